"""posenc's RoPE schedules against Hugging Face transformers' (modeling_rope_utils), the code the
released long-context checkpoints run with. Not a test: transformers is not a dependency.

    pip install --target /tmp/hf transformers
    PYTHONPATH=/tmp/hf python tools/scaling_vs_transformers.py

For every variant, a few head dims, bases and lengths: the largest relative difference of the
inverse frequencies and of the attention factor. transformers evaluates base ** (2i / dim) in
float32, posenc in float64: rounding the exponent to float32 alone moves the result by up to
(2i / dim) ln(base) 2^-24, 7.8e-7 relative at base 5e5, and the operations after it add a few
ulps; a different definition (a ramp edge, a band, a factor) differs by 1e-3 or more. Exit 1
if any difference exceeds 1e-6.
"""

from __future__ import annotations

import sys

from transformers import modeling_rope_utils as hf

from posenc.functional import rope_frequencies

LIMIT = 1e-6


class _Config:
    """The few attributes transformers' rope functions read from a model config."""

    def __init__(self, dim: int, base: float, scaling: dict):
        self.head_dim, self.hidden_size, self.num_attention_heads = dim, dim, 1
        self.max_position_embeddings = scaling.get("original_max_position_embeddings", 4096)
        self.rope_parameters = {"rope_theta": base, "rope_type": scaling["type"], **scaling}
        del self.rope_parameters["type"]

    def standardize_rope_params(self):
        pass


def _phi3_like(dim: int) -> dict:
    short = [1.0 + 0.05 * i for i in range(dim // 2)]
    return {
        "type": "longrope",
        "short_factor": short,
        "long_factor": [4 * f for f in short],
        "original_max_position_embeddings": 4096,
        "factor": 32.0,
    }


def _cases():
    for dim in (64, 128):
        for base in (10000.0, 500000.0):
            yield dim, base, {"type": "linear", "factor": 4.0}, None
            for length in (1024, 4096, 20000):
                yield (
                    dim,
                    base,
                    {"type": "dynamic", "factor": 8.0, "original_max_position_embeddings": 4096},
                    length,
                )
            for factor in (4.0, 16.0):
                yield (
                    dim,
                    base,
                    {"type": "yarn", "factor": factor, "original_max_position_embeddings": 4096},
                    None,
                )
            yield (
                dim,
                base,
                {
                    "type": "yarn",
                    "factor": 8.0,
                    "beta_fast": 16.0,
                    "beta_slow": 2.0,
                    "original_max_position_embeddings": 2048,
                },
                None,
            )
            yield (
                dim,
                base,
                {
                    "type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
                None,
            )
            for length in (None, 2048, 131072):
                yield dim, base, _phi3_like(dim), length


def main() -> int:
    worst = 0.0
    print("| type | dim | base | seq_len | inv_freq rel diff | attention factor rel diff |")
    print("|---|---|---|---|---|---|")
    for dim, base, scaling, length in _cases():
        ours, ours_att = rope_frequencies(dim, base, scaling, length)
        theirs, their_att = hf.ROPE_INIT_FUNCTIONS[scaling["type"]](
            _Config(dim, base, scaling), "cpu", length
        )
        diff = ((ours - theirs.double()).abs() / ours).max().item()
        att = abs(ours_att - float(their_att)) / ours_att
        worst = max(worst, diff, att)
        print(f"| {scaling['type']} | {dim} | {base:g} | {length} | {diff:.1e} | {att:.1e} |")
    print(f"\nlargest: {worst:.1e} (limit {LIMIT:.1e})")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
