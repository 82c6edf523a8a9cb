"""posenc's multi-axis and per-frequency RoPE tables against Hugging Face transformers' own model
code: Qwen2-VL's and Qwen3-VL's text rotary embeddings (M-RoPE, contiguous and interleaved
sections), the Qwen2-VL position ids of a text + image + video sequence (get_rope_index), the
vision encoders' 2D RoPE (Pixtral's; Qwen2-VL's axial), and p-RoPE (transformers'
"proportional" RoPE of Gemma 4). Not a test: transformers is not a dependency.

    pip install --no-deps --target /tmp/hf transformers tokenizers huggingface_hub safetensors
    PYTHONPATH=/tmp/hf:. python tools/multiaxis_vs_transformers.py

Prints, per model, the largest relative difference of: the inverse frequencies (transformers
computes them in float32: within 1e-6); the model's own mixing of axes (its
`recomposition_frequencies`) applied to float64 angles against posenc's float64 tables (equal);
and the float32 tables of its forward against posenc's float32 ones, beside transformers' own
error against float64 (its float32 angles p * theta are off by up to about p * 2^-24 rad: the
tables may differ by twice that). The position ids must be equal. Exit 1 past any bound.
"""

from __future__ import annotations

import sys
import types

import torch

from posenc import functional as F

LIMIT = 1e-6


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _text_rotary(cls_path: str, section: list[int], head_dim: int, base: float):
    """A model's text rotary embedding, built from a minimal config."""
    module_name, cls_name = cls_path.rsplit(".", 1)
    module = __import__(module_name, fromlist=[cls_name])
    config = types.SimpleNamespace(
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": base, "mrope_section": section},
        head_dim=head_dim,
        hidden_size=head_dim * 4,
        num_attention_heads=4,
    )
    config.standardize_rope_params = lambda: None
    return getattr(module, cls_name)(config)


def _three_rows(name, rot, inv, positions, ours64, ours32, freqs_shape):
    """The inverse frequencies; transformers' recomposition of float64 angles (the model's own
    mixing of axes, in float64) against posenc's float64 tables; the float32 forward."""
    yield f"{name}: inverse frequencies", _rel(rot.inv_freq, inv), LIMIT
    angles = positions.double().unsqueeze(-1) * inv  # float64, the model's own layout
    cos = rot.recomposition_frequencies(angles.reshape(freqs_shape).cos())
    half = cos.shape[-1] // 2
    yield f"{name}: axis mixing, float64", _rel(cos[..., :half], ours64[0]), 1e-15
    cos_hf, sin_hf = rot(torch.zeros(1), positions)
    diff = max(_rel(cos_hf[..., :half], ours32[0]), _rel(sin_hf[..., :half], ours32[1]))
    own = max(_rel(cos_hf[..., :half], ours64[0]), _rel(sin_hf[..., :half], ours64[1]))
    yield f"{name}: float32 tables (transformers' own error vs float64: {own:.1e})", diff, own * 2


def _mrope_rows():
    segments = [7, (1, 12, 16), 5, (4, 6, 8, 25), 3]
    pos = F.mrope_position_ids(segments).unsqueeze(1)  # (3, 1, L)
    pos = torch.cat((pos, pos + 100), dim=1)  # two sequences: (3, 2, L)
    for name, cls, section, inter in (
        (
            "M-RoPE Qwen2-VL",
            "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLRotaryEmbedding",
            [16, 24, 24],
            False,
        ),
        (
            "M-RoPE Qwen3-VL",
            "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding",
            [24, 20, 20],
            True,
        ),
    ):
        rot = _text_rotary(cls, section, 128, 1000000.0)
        tables = [
            F.mrope_cos_sin(pos, 128, section, base=1e6, interleaved=inter, dtype=dt)
            for dt in (torch.float64, torch.float32)
        ]
        inv = F.rope_inv_freq(128, 1e6)
        yield from _three_rows(f"{name} {section}", rot, inv, pos, *tables, (3, 2, -1, 64))


def _position_rows():
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2

    fake = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=2))
    )
    fake.get_vision_position_ids = types.MethodType(q2.Qwen2VLModel.get_vision_position_ids, fake)
    # text 5, an image of 1 x 16 x 20 patches (8 x 10 after the 2 x 2 merge), text 4,
    # a video of 3 x 8 x 8 patches (3 x 4 x 4 tokens), text 2
    grids = [(1, 16, 20), (3, 8, 8)]
    kinds = [0] * 5 + [1] * (8 * 10) + [0] * 4 + [2] * (3 * 4 * 4) + [0] * 2
    types_ = torch.tensor([kinds])
    ids, _ = q2.Qwen2VLModel.get_rope_index(
        fake,
        torch.zeros_like(types_),
        types_,
        image_grid_thw=torch.tensor([grids[0]]),
        video_grid_thw=torch.tensor([grids[1]]),
    )
    ours = F.mrope_position_ids([5, (1, 8, 10), 4, (3, 4, 4), 2])
    yield (
        "Qwen2-VL get_rope_index (image; video t <= max(h, w))",
        float((ids[:, 0] != ours).sum()),
        0.0,
    )


def _vision_rows():
    from transformers.models.pixtral import modeling_pixtral as px
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2

    h, w, d = 24, 32, 64
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    hw = torch.stack((rows.flatten(), cols.flatten()), dim=-1)  # (N, 2)
    theta = F.rope_inv_freq(d)
    for name, cls, split, inv in (
        (
            "2D RoPE Pixtral",
            px.PixtralVisionRotaryEmbedding,
            "pixtral",
            torch.cat((theta[0::2], theta[1::2])),
        ),
        (
            "2D RoPE Qwen2-VL vision",
            q2.Qwen2VLVisionRotaryEmbedding,
            "axial",
            F.rope_inv_freq(d // 2),
        ),
    ):
        config = types.SimpleNamespace(
            rope_parameters={"rope_type": "axial", "rope_theta": 10000.0},
            head_dim=d,
            hidden_size=d * 4,
            embed_dim=d * 4,
            num_attention_heads=4,
        )
        tables = [
            F.rope_2d_cos_sin(h, w, d, split=split, dtype=dt)
            for dt in (torch.float64, torch.float32)
        ]
        yield from _three_rows(
            f"{name} {h}x{w} D={d}", cls(config), inv, hw, *tables, (h * w, 2, -1)
        )


def _proportional_rows():
    from transformers import modeling_rope_utils as hf

    for d, p in ((128, 0.25), (256, 0.25), (128, 0.5), (64, 1.0)):
        config = types.SimpleNamespace(
            rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": p},
            head_dim=d,
            hidden_size=d,
            num_attention_heads=1,
        )
        config.standardize_rope_params = lambda: None
        inv_hf, _ = hf._compute_proportional_rope_parameters(config)
        inv = F.rope_inv_freq(d).clone()
        inv[F.rotating_frequencies(d, p) :] = 0
        _, sin = F.rope_cos_sin(torch.tensor([1]), d, rotate_fraction=p)
        same = bool(((inv_hf == 0) == (sin[0] == 0)).all())  # rope_cos_sin zeroes the same ones
        yield f"p-RoPE (proportional) D={d} p={p}: inverse frequencies", _rel(inv_hf, inv), LIMIT
        yield f"p-RoPE D={d} p={p}: the same frequencies stand still", float(not same), 0.0


def main() -> int:
    rows = [*_mrope_rows(), *_position_rows(), *_vision_rows(), *_proportional_rows()]
    worst = 0
    print("| table | largest relative difference | allowed |")
    print("|---|---|---|")
    for name, diff, bound in rows:
        print(f"| {name} | {diff:.2e} | {bound:.1e} |")
        worst |= diff > bound
    return int(worst)


if __name__ == "__main__":
    sys.exit(main())
