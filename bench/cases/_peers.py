"""Implementations from other libraries that compute what a case computes: Hugging Face
transformers' (`hf`) and fla-core's (`fla`, forgetting attention on a GPU).

transformers as an implementation: what the `hf` rows share. Each is transformers'
own function called the way its models call it, with the inputs its models hand it, built from
the point (a config holding the point's RoPE schedule, its rotary embedding's tables); the row is
skipped, saying "needs transformers", where the package is absent. Where an `hf` row ran, the
report measures speedups against it: it is what most users would otherwise run.
"""

from __future__ import annotations

import functools

from bench.registry import Impl, Point

NEEDS = "transformers"


def hf_impl(make, supports=None, note: str = "", grad: bool = True) -> Impl:
    kwargs = {"supports": supports} if supports is not None else {}
    return Impl(make, needs=NEEDS, note=note, grad=grad, **kwargs)


def fla_impl(make, supports) -> Impl:
    return Impl(make, devices=("cuda",), needs="fla", supports=supports, note="fla-core's kernel")


def rope_parameters(base: float, scaling: dict | None, rotate_fraction: float = 1.0):
    """(rope_parameters, max_position_embeddings) as a checkpoint's config.json spells posenc's
    schedule (posenc/_scaling.py's dict): dynamic's original context is max_position_embeddings
    (transformers reads it there), the other extensions' is their factor times it; p-RoPE is
    transformers' "proportional" RoPE, whose factor divides the frequencies as linear's does."""
    params = {"rope_type": "default", "rope_theta": base}
    mpe = 4096
    if scaling is not None:
        from posenc._scaling import SCHEDULES  # the defaults, spelled out for transformers

        defaults = SCHEDULES[scaling["type"]].optional
        optional = {k: v for k, v in defaults.items() if v is not None}
        extra = {**optional, **{k: v for k, v in scaling.items() if k != "type"}}
        params.update(extra, rope_type=scaling["type"])
        original = extra.get("original_max_position_embeddings", mpe)
        if scaling["type"] == "dynamic":
            mpe = params.pop("original_max_position_embeddings")
        elif scaling["type"] != "linear":
            mpe = int(original * (scaling.get("factor") or 1.0))
    if rotate_fraction != 1.0:
        if params["rope_type"] not in ("default", "linear"):
            raise ValueError(
                f"transformers' proportional RoPE has no {params['rope_type']} schedule"
            )
        params.update(rope_type="proportional", partial_rotary_factor=rotate_fraction)
    return params, mpe


def llama_config(head_dim: int, heads: int, kv_heads: int, base: float, scaling=None, fraction=1.0):
    """A Llama config with the point's attention shapes and RoPE schedule."""
    from transformers import LlamaConfig

    params, mpe = rope_parameters(base, scaling, fraction)
    return LlamaConfig(
        head_dim=head_dim,
        hidden_size=head_dim * heads,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=mpe,
        rope_parameters=params,
    )


def rotary_tables(config, positions, dtype):
    """cos, sin (B, L, D) as the model's rotary embedding returns them for positions (B, L),
    in the model's dtype: built once per forward and shared by the layers, so not timed."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rotary = LlamaRotaryEmbedding(config).to(positions.device)
    with torch.no_grad():
        return rotary(torch.zeros((), dtype=dtype, device=positions.device), positions)


MROPE_ROTARY = {  # M-RoPE style -> transformers' module and text rotary embedding class
    "qwen2_vl": ("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLRotaryEmbedding"),
    "qwen3_vl": ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLTextRotaryEmbedding"),
}


def mrope_call(style: str, section: list[int], head_dim: int, position_ids, q, k):
    """transformers' Qwen2-VL / Qwen3-VL text attention's rotation: its rotary embedding mixes
    the per-axis angles of position_ids (3, B, L) into (B, L, D) tables once per forward (not
    timed), and its attention calls its module's `apply_rotary_pos_emb` on q and k."""
    import importlib
    import types

    import torch

    module_name, cls_name = MROPE_ROTARY[style]
    module = importlib.import_module(module_name)
    config = types.SimpleNamespace(  # the fields the rotary embedding reads of a model config
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
        head_dim=head_dim,
        hidden_size=head_dim * q.shape[1],
        num_attention_heads=q.shape[1],
        standardize_rope_params=lambda: None,
    )
    rotary = getattr(module, cls_name)(config).to(q.device)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros((), dtype=q.dtype, device=q.device), position_ids)
    return lambda: module.apply_rotary_pos_emb(q, k, cos, sin)


def t5_attention(inputs):
    """T5's relative bias as T5Attention computes it (`_relative_position_bucket` of j - i, then
    its table looked up: (1, H, Lq, Lk), built in the call, as the table trains) added to the
    scores of its eager attention (softmax in float32), scaled by 1/sqrt(D) like the case's."""
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    from bench.cases.families import T5_ARGS

    table = inputs["params"]["relative_attention_bias.weight"]  # (num_buckets, H): its Embedding
    lq, lk = inputs["q"].shape[2], inputs["k"].shape[2]
    device = table.device
    relative = torch.arange(lk, device=device)[None] - torch.arange(lq, device=device)[:, None]
    scale = inputs["q"].shape[-1] ** -0.5
    mask = _causal_mask(lq, lk, device) if inputs["causal"] else None

    def attend(q, k, v):
        bucket = T5Attention._relative_position_bucket(relative, **T5_ARGS)
        bias = nn_embedding(bucket, table).permute(2, 0, 1)[None].to(q.dtype)
        scores = torch.matmul(q * scale, k.transpose(-1, -2)) + bias
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(scores), v)

    return attend


def nn_embedding(index, table):
    import torch.nn.functional as nnf

    return nnf.embedding(index, table)


def _causal_mask(lq: int, lk: int, device):
    import torch

    return torch.ones(lq, lk, dtype=torch.bool, device=device).triu(lk - lq + 1)


def bloom_alibi_attention(inputs):
    """BLOOM's ALiBi as BloomAttention computes it: `build_alibi_tensor` (slope times the key's
    position, (B H, 1, L), built once per forward by the model: not timed) as baddbmm's input
    beside q k^T / sqrt(D), the causal mask added, softmax in float32, bmm with v. The key's
    position stands for -(i - j) because softmax ignores a per-row constant: causal only."""
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    q = inputs["q"]
    b, h, n, d = q.shape
    alibi = build_alibi_tensor(torch.ones(b, n, device=q.device), h, q.dtype)
    mask = torch.zeros(n, n, dtype=q.dtype, device=q.device)
    mask = mask.masked_fill(_causal_mask(n, n, q.device), torch.finfo(q.dtype).min)

    def attend(q, k, v):
        scores = alibi.baddbmm(
            q.reshape(b * h, n, d), k.reshape(b * h, n, d).transpose(-1, -2), alpha=d**-0.5
        )
        probs = torch.softmax(scores.view(b, h, n, n) + mask, dim=-1, dtype=torch.float32)
        out = torch.bmm(probs.to(q.dtype).view(b * h, n, n), v.reshape(b * h, n, d))
        return out.view(b, h, n, d)

    return attend


def hf_plain(point: Point) -> str | None:
    """supports() of transformers' T5 and BLOOM attention: one head count, no sinks."""
    if point.sinks:
        return "sinks: transformers' T5 and BLOOM attention have none"
    return "grouped-query k and v: T5 and BLOOM have none" if point.num_kv_heads else None


def bloom_supports(point: Point) -> str | None:
    return hf_plain(point) or (None if point.causal else "BLOOM's ALiBi is causal only")


def fla_fox_attention(inputs):
    """fla-core's FoX kernel as flash-linear-attention's ForgettingAttention layer calls it: q, k,
    v (B, L, H, D) (here transposed views: it makes them contiguous itself), log forget gates
    g (B, L, H)."""
    from fla.ops.forgetting_attn.parallel import parallel_forgetting_attn

    g = inputs["params"]["log_f"]
    scale = inputs["q"].shape[-1] ** -0.5

    def attend(q, k, v):
        t = (x.transpose(1, 2) for x in (q, k, v))
        return parallel_forgetting_attn(*t, g.transpose(1, 2), scale=scale).transpose(1, 2)

    return attend


@functools.lru_cache(maxsize=32)
def model_rotation(model: str):
    """(the model's rotation in transformers or None, its Layout) (posenc/_hf_rotation.py)."""
    from posenc import _hf_rotation
    from posenc.models import hf_config

    rotation = _hf_rotation.find(hf_config(model)[1])
    return rotation, (_hf_rotation.layout(rotation) if rotation is not None else None)


def model_hf_problem(model: str, head_dim: int, targets: str = "qk") -> str | None:
    """Why the model's own rotation cannot be an `hf` row of the rope case, or None."""
    rotation, layout = model_rotation(model)
    if rotation is None:
        return "transformers has no rotary embedding for this model's text config"
    if layout.permutes:
        return "its rotation writes dims in another order (scores agree, outputs cannot)"
    if not rotation.takes(head_dim):
        return "partial rotary: the model's attention slices q and k around this call"
    if targets != "qk" and not rotation.one_at_a_time:
        return f"rope_targets={targets}: the model's apply function turns q and k together"
    return None


def model_call(model: str, layer: str | None, xs):
    """The model's own rotation in transformers, on q and k (or q alone, or an output turned
    back with (cos, -sin), as DeepSeek-V4's attention does) as its attention hands them over:
    its rotary embedding's tables of the layer's RoPE key for positions 0 .. L-1 (built once,
    not timed), then its modeling module's apply function (posenc/_hf_rotation.py)."""
    import torch

    rotation = model_rotation(model)[0]
    rotation.rotary.to(xs[0].device)
    positions = torch.arange(xs[0].shape[2], device=xs[0].device)
    out = rotation.tables(positions, layer, xs[0].dtype)  # Llama 4's: one complex tensor
    if not rotation.one_at_a_time:
        return lambda: rotation.apply_tables(*xs, out)
    cos, sin = out
    turns = [(x, sin) for x in xs[:2]] + [(x, -sin) for x in xs[2:]]  # o: the inverse
    return lambda: tuple(rotation.apply(x, cos, s) for x, s in turns)
