"""The probe's encodings, declared once: how each enters the model (bench/probe/model.py), which
paper proposed it, and whether the default size runs it. The config's choices and the report's
order and colours are read from here (docs/probe.md describes each; a test keeps them in step).

A new encoding is one `Encoding(...)` line if posenc has its parts; the fields say where it acts:
  absolute   added to the token embeddings: "sinusoidal" or "learnable" (a table of positions)
  attention  the attention module: "plain", "shaw" (key and value terms), "rope", "cope"
  bias       a logit bias from posenc: "alibi", "t5" (one table shared by the layers, as in
             T5), "fire", "kerple" (one module per layer, as their papers have them)
  rope       options of posenc.RoPEMultiHeadAttention (rotate_fraction, xpos_scale_base)
  randomized the positions of each sequence drawn sorted from a range 4x the longest evaluated
             (Ruoss et al. 2023), in training and in evaluation, for the table or the rotation
  plain_last the last layer attends without positions (the RoPE/NoPE interleave)
  temperature  those position-free layers scale each query by Llama 4's temperature of its
             position, floor_scale the training length (Llama 4's 8192, the span of its chunked
             RoPE layers, lies far past the probe's lengths), attn_scale 0.1 as Llama 4's
  gate       every layer's logits gain FoX's forget-gate bias (posenc.ForgettingGate of the
             layer's normed input; Lin et al. 2025)
  gate_bias  the gates' biases start spread over this range across the heads (None: near 0)
  needs_causal  defined for causal attention only (refused with causal=false)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Encoding:
    name: str
    paper: str
    absolute: str | None = None
    attention: str = "plain"
    bias: str | None = None
    rope: dict = field(default_factory=dict)
    randomized: bool = False
    plain_last: bool = False
    temperature: bool = False
    gate: bool = False
    gate_bias: tuple[float, float] | None = None
    needs_causal: bool = False
    modern: bool = False  # proposed since 2022: in probe=modern and probe=gpu, not the default

    @property
    def table_limited(self) -> bool:
        """A learned table of the trained positions only: longer inputs have no rows."""
        return self.absolute == "learnable" and not self.randomized

    @property
    def rotary(self) -> bool:
        return self.attention == "rope"


# xPos's scale base and p-RoPE's fraction are their papers' defaults (Sun et al. 2022: 512;
# Barbero et al. 2024: 0.75, the best of their Gemma 2B runs)
SPECS = {
    e.name: e
    for e in (
        Encoding("nope", "no positions (Kazemnejad et al. 2023 on causal models)"),
        Encoding("sinusoidal", "Vaswani et al. 2017", absolute="sinusoidal"),
        Encoding("learnable", "Gehring et al. 2017; BERT, GPT-2", absolute="learnable"),
        Encoding("shaw", "Shaw et al. 2018", attention="shaw"),
        Encoding("rope", "Su et al. 2021 (RoFormer)", attention="rope"),
        Encoding("alibi", "Press et al. 2022", bias="alibi"),
        Encoding("t5", "Raffel et al. 2020", bias="t5"),
        Encoding("fire", "Li et al. 2023 (FIRE)", bias="fire", modern=True),
        Encoding("kerple", "Chi et al. 2022 (KERPLE, log)", bias="kerple", modern=True),
        Encoding(
            "xpos",
            "Sun et al. 2022 (xPos)",
            attention="rope",
            rope={"xpos_scale_base": 512.0},
            modern=True,
        ),
        Encoding(
            "p_rope",
            "Barbero et al. 2024 (p-RoPE, p = 0.75)",
            attention="rope",
            rope={"rotate_fraction": 0.75},
            modern=True,
        ),
        Encoding(
            "cope",
            "Golovneva et al. 2024 (CoPE)",
            attention="cope",
            needs_causal=True,
            modern=True,
        ),
        Encoding(
            "rope_randomized",
            "Ruoss et al. 2023 (randomized RoPE)",
            attention="rope",
            randomized=True,
            modern=True,
        ),
        Encoding(
            "learnable_randomized",
            "Ruoss et al. 2023 (randomized learned table)",
            absolute="learnable",
            randomized=True,
            modern=True,
        ),
        Encoding(
            "rope_nope_last",
            "RoPE/NoPE interleave (Llama 4, Command A): last layer NoPE",
            attention="rope",
            plain_last=True,
            modern=True,
        ),
        Encoding(
            "irope",
            "Llama 4 (iRoPE): last layer NoPE, its queries scaled by position",
            attention="rope",
            plain_last=True,
            temperature=True,
            modern=True,
        ),
        Encoding(
            "fox",
            "Lin et al. 2025 (Forgetting Transformer, no positional embedding)",
            gate=True,
            needs_causal=True,
            modern=True,
        ),
        Encoding(
            "fox_open",
            "Lin et al. 2025 (Forgetting Transformer, gates starting open)",
            gate=True,
            gate_bias=(3.0, 6.0),
            needs_causal=True,
            modern=True,
        ),
        Encoding(
            "fox_rope",
            "Lin et al. 2025 (Forgetting Transformer with RoPE)",
            attention="rope",
            gate=True,
            needs_causal=True,
            modern=True,
        ),
    )
}

ENCODINGS = tuple(SPECS)
DEFAULT_ENCODINGS = tuple(name for name, spec in SPECS.items() if not spec.modern)
