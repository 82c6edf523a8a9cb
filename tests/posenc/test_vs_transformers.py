"""posenc's RoPE tables against Hugging Face transformers' own code, the code released checkpoints
run with: every long-context schedule (ROPE_INIT_FUNCTIONS: linear, dynamic, yarn, llama3,
longrope, proportional) by its inverse frequencies and attention factor, and by the cos/sin tables
of transformers' rotary embedding at positions past the original context; the multi-axis forms
(Qwen2-VL's and Qwen3-VL's M-RoPE, Qwen2-VL's position ids, Pixtral's and Qwen2-VL's vision 2D
RoPE) and p-RoPE (transformers' "proportional", Gemma 4's).

transformers computes base ** (2i / dim) and the angles p * theta in float32, posenc in float64:
rounding the exponent alone moves theta by up to (2i / dim) ln(base) 2^-24 (7.8e-7 relative at
base 5e5), so the inverse frequencies agree within 1e-6, and the tables within a few ulps of the
float32 angle (ANGLE_ULPS) beside the frequencies' own difference (LIMIT, reached where YaRN's
ramp is not rounded to whole dimensions: transformers computes it in float32); a different
definition (a ramp edge, a band, a factor) differs by 1e-3 or more, far outside either bound.
"""

from __future__ import annotations

import types

import pytest
import torch

from posenc import functional as F
from posenc.functional import rope_cos_sin, rope_frequencies

hf = pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")
from transformers import modeling_rope_utils  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from bench.cases._peers import llama_config  # noqa: E402

LIMIT = 1e-6
ANGLE_ULPS = 2.0**-20  # 16 ulps of a float32 angle (measured: at most 4)
ORIGINAL = 2048


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _longrope(dim: int) -> dict:
    short = [1.0 + 0.05 * i for i in range(dim // 2)]
    return {
        "type": "longrope",
        "short_factor": short,
        "long_factor": [4 * f for f in short],
        "original_max_position_embeddings": ORIGINAL,
        "factor": 8.0,
    }


def _schedules(dim: int) -> list[dict]:
    return [
        {"type": "linear", "factor": 4.0},
        {"type": "dynamic", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
        {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
        {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": ORIGINAL},
        {
            "type": "yarn",
            "factor": 8.0,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "original_max_position_embeddings": ORIGINAL,
        },
        {  # gpt-oss: the ramp's ends not rounded to whole dimensions
            "type": "yarn",
            "factor": 32.0,
            "truncate": False,
            "original_max_position_embeddings": ORIGINAL,
        },
        {  # DeepSeek-V2's magnitude scales: the attention factor is their ratio
            "type": "yarn",
            "factor": 40.0,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": ORIGINAL,
        },
        {
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": ORIGINAL,
        },
        _longrope(dim),
    ]


CASES = [
    (dim, base, i)
    for dim in (64, 256)
    for base in (10000.0, 500000.0)
    for i in range(len(_schedules(64)))
]


def _config(dim: int, base: float, scaling: dict):
    """A Llama config holding the schedule as a checkpoint's config.json spells it: the
    harness's own conversion (bench/cases/_peers.py), held to transformers here too."""
    return llama_config(dim, 2, 2, base, scaling)


@pytest.mark.parametrize(("dim", "base", "which"), CASES)
def test_inverse_frequencies_and_attention_factor(dim, base, which):
    scaling = _schedules(dim)[which]
    for length in (None, ORIGINAL // 2, 5 * ORIGINAL):
        ours, ours_att = rope_frequencies(dim, base, scaling, length)
        theirs, their_att = modeling_rope_utils.ROPE_INIT_FUNCTIONS[scaling["type"]](
            _config(dim, base, scaling), "cpu", length
        )
        assert _rel(ours, theirs) <= LIMIT, (scaling, length)
        assert abs(ours_att - float(their_att)) <= LIMIT * ours_att, (scaling, length)


@pytest.mark.parametrize(("dim", "base", "which"), [c for c in CASES if c[1] == 500000.0])
def test_tables_past_the_original_context(dim, base, which):
    """cos and sin as the model's rotary embedding returns them (its attention factor included,
    dynamic and LongRoPE choosing by the length as it does), within a few ulps of the angle
    and the frequencies' own 1e-6."""
    scaling = _schedules(dim)[which]
    rot = LlamaRotaryEmbedding(_config(dim, base, scaling))
    for length in (ORIGINAL // 2, 4 * ORIGINAL):
        positions = torch.arange(length)
        cos_hf, sin_hf = (t[0, :, : dim // 2] for t in rot(torch.zeros(1), positions[None]))
        cos, sin = rope_cos_sin(positions, dim, base, scaling=scaling, seq_len=length)
        angles = positions.double()[:, None] * rot.inv_freq.double()
        bound = rot.attention_scaling * (angles * (ANGLE_ULPS + LIMIT) + 2.0**-21)
        assert ((cos - cos_hf).abs() <= bound).all(), (scaling, length)
        assert ((sin - sin_hf).abs() <= bound).all(), (scaling, length)


@pytest.mark.parametrize(
    ("dim", "p", "factor"), [(128, 0.25, 1.0), (256, 0.25, 1.0), (128, 0.5, 8.0), (64, 1.0, 1.0)]
)
def test_proportional_is_p_rope(dim, p, factor):
    """transformers' "proportional" (Gemma 4) is p-RoPE: the first floor(p dim / 2) frequencies
    of the whole head turn, the others stand still, all divided by its factor (posenc: a linear
    schedule of that factor with rotate_fraction p)."""
    config = types.SimpleNamespace(
        rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": p, "factor": factor},
        head_dim=dim,
        hidden_size=dim,
        num_attention_heads=1,
        standardize_rope_params=lambda: None,
    )
    inv_hf, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["proportional"](config)
    scaling = None if factor == 1.0 else {"type": "linear", "factor": factor}
    positions = torch.arange(0, 9000, 7)
    cos, sin = rope_cos_sin(positions, dim, scaling=scaling, rotate_fraction=p)
    angles = positions.double()[:, None] * inv_hf.double()
    bound = angles * ANGLE_ULPS + 2.0**-21
    assert ((cos - angles.cos()).abs() <= bound).all()
    assert ((sin - angles.sin()).abs() <= bound).all()
    assert ((inv_hf == 0) == (sin[1] == 0)).all()  # the same pairs stand still


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
        standardize_rope_params=lambda: None,
    )
    return getattr(module, cls_name)(config)


def _three_checks(rot, inv, positions, ours64, ours32, freqs_shape):
    """The inverse frequencies; the model's own mixing of axes applied to float64 angles against
    posenc's float64 tables (equal); its float32 forward against posenc's float32 tables, within
    twice its own error against float64 (its float32 angles are off by about p 2^-24 rad)."""
    assert _rel(rot.inv_freq, inv) <= LIMIT
    angles = positions.double().unsqueeze(-1) * inv
    cos = rot.recomposition_frequencies(angles.reshape(freqs_shape).cos())
    half = cos.shape[-1] // 2
    assert _rel(cos[..., :half], ours64[0]) <= 1e-15
    cos_hf, sin_hf = rot(torch.zeros(1), positions)
    diff = max(_rel(cos_hf[..., :half], ours32[0]), _rel(sin_hf[..., :half], ours32[1]))
    own = max(_rel(cos_hf[..., :half], ours64[0]), _rel(sin_hf[..., :half], ours64[1]))
    assert diff <= 2 * own


@pytest.mark.parametrize(
    ("cls", "section", "interleaved"),
    [
        (
            "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLRotaryEmbedding",
            [16, 24, 24],
            False,
        ),
        (
            "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding",
            [24, 20, 20],
            True,
        ),
    ],
)
def test_mrope_text_tables(cls, section, interleaved):
    pos = F.mrope_position_ids([7, (1, 12, 16), 5, (4, 6, 8, 25), 3]).unsqueeze(1)  # (3, 1, L)
    pos = torch.cat((pos, pos + 100), dim=1)  # two sequences: (3, 2, L)
    rot = _text_rotary(cls, section, 128, 1e6)
    tables = [
        F.mrope_cos_sin(pos, 128, section, base=1e6, interleaved=interleaved, dtype=dt)
        for dt in (torch.float64, torch.float32)
    ]
    _three_checks(rot, F.rope_inv_freq(128, 1e6), pos, *tables, (3, 2, -1, 64))


def test_qwen2_vl_position_ids():
    """get_rope_index of text + an image + a video (t <= max(h, w)) equals mrope_position_ids."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2

    fake = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=2))
    )
    fake.get_vision_position_ids = types.MethodType(q2.Qwen2VLModel.get_vision_position_ids, fake)
    # text 5, an image of 1 x 16 x 20 patches (8 x 10 after the 2 x 2 merge), text 4,
    # a video of 3 x 8 x 8 patches (3 x 4 x 4 tokens), text 2
    kinds = torch.tensor([[0] * 5 + [1] * (8 * 10) + [0] * 4 + [2] * (3 * 4 * 4) + [0] * 2])
    ids, _ = q2.Qwen2VLModel.get_rope_index(
        fake,
        torch.zeros_like(kinds),
        kinds,
        image_grid_thw=torch.tensor([(1, 16, 20)]),
        video_grid_thw=torch.tensor([(3, 8, 8)]),
    )
    assert torch.equal(ids[:, 0], F.mrope_position_ids([5, (1, 8, 10), 4, (3, 4, 4), 2]))


@pytest.mark.parametrize("which", ["pixtral", "axial"])
def test_vision_2d_tables(which):
    from transformers.models.pixtral import modeling_pixtral as px
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2

    h, w, d = 24, 32, 64
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    hw = torch.stack((rows.flatten(), cols.flatten()), dim=-1)  # (N, 2)
    theta = F.rope_inv_freq(d)
    if which == "pixtral":
        cls, inv = px.PixtralVisionRotaryEmbedding, torch.cat((theta[0::2], theta[1::2]))
    else:
        cls, inv = q2.Qwen2VLVisionRotaryEmbedding, F.rope_inv_freq(d // 2)
    config = types.SimpleNamespace(
        rope_parameters={"rope_type": "axial", "rope_theta": 10000.0},
        head_dim=d,
        hidden_size=d * 4,
        embed_dim=d * 4,
        num_attention_heads=4,
    )
    tables = [
        F.rope_2d_cos_sin(h, w, d, split=which, dtype=dt) for dt in (torch.float64, torch.float32)
    ]
    _three_checks(cls(config), inv, hw, *tables, (h * w, 2, -1))
