"""Each case's bytes and FLOPs per mode, against counts worked out by hand for one small shape
(the models are in each case file's docstring)."""

import pytest
import torch

from bench.cases import CASES
from bench.registry import Cost, Point

BF16, F32 = torch.bfloat16, torch.float32

# (case, point, dtype, {mode: (bytes, flops)})
HAND = [
    # q (2, 2, 4, 8) and k (2, 1, 4, 8): 192 elements, read + written in bf16 (768 B), and two
    # (4, 4) float32 tables (128 B); 3 FLOPs per element. Backward: the same rotation by -angle.
    (
        "rope",
        Point(2, 4, 16, 2, num_kv_heads=1),
        BF16,
        {"forward": (896, 576), "backward": (896, 576), "forward+backward": (1792, 1152)},
    ),
    # p-RoPE (p = 1/4) at D=32: q and k (2*2*4*32 + 2*1*4*32 = 768 elements, 1536 B each way
    # in bf16), tables of the 4 frequencies that turn: 2 x (4, 4) float32 = 128 B
    (
        "rope",
        Point(2, 4, 64, 2, num_kv_heads=1, rope_variant="p_rope"),
        BF16,
        {"forward": (3200, 2304), "backward": (3200, 2304), "forward+backward": (6400, 4608)},
    ),
    # xPos: a third (4, 4) table, the scale
    (
        "rope",
        Point(2, 4, 16, 2, num_kv_heads=1, rope_variant="xpos"),
        BF16,
        {"forward": (960, 576), "backward": (960, 576), "forward+backward": (1920, 1152)},
    ),
    # M-RoPE: q (2, 2, 4, 32), k (2, 1, 4, 32): 768 elements, 3072 B; per-token tables
    # 2 x (2, 4, 16) float32 = 1024 B
    (
        "mrope",
        Point(2, 4, 64, 2, num_kv_heads=1),
        BF16,
        {"forward": (4096, 2304), "backward": (4096, 2304), "forward+backward": (8192, 4608)},
    ),
    # x (2, 4, 8) float32: read 64 + write 64 + 32 table entries; 64 adds; backward dx = dy: free
    (
        "sinusoidal",
        Point(2, 4, 8, 1),
        F32,
        {"forward": (640, 64), "backward": (0, 0), "forward+backward": (640, 64)},
    ),
    # the learned table's gradient: read dy (64), write the 32 table entries, 64 adds
    (
        "learnable",
        Point(2, 4, 8, 1),
        F32,
        {"forward": (640, 64), "backward": (384, 64), "forward+backward": (1024, 128)},
    ),
    # two (4, 4, 8) gathers (256 elements) + two (33, 8) tables (528): float32
    (
        "relative_tables",
        Point(1, 4, 8, 1),
        F32,
        {"forward": (3136, 0), "backward": (3136, 256), "forward+backward": (6272, 256)},
    ),
    # q, k, v, out (1, 2, 8, 8) bf16 = 256 B each; slopes 2 x 4 B. 4 B H L^2 D = 4096 FLOPs;
    # backward reads q k v o do, writes dq dk dv (8 x 256 B), 2.5 x 4096 FLOPs
    (
        "alibi_attention",
        Point(1, 8, 16, 2),
        BF16,
        {"forward": (1032, 4096), "backward": (2064, 10240), "forward+backward": (3096, 14336)},
    ),
    # causal: half the FLOPs, the same bytes
    (
        "alibi_attention",
        Point(1, 8, 16, 2, causal=True),
        BF16,
        {"forward": (1032, 2048), "backward": (2064, 5120), "forward+backward": (3096, 7168)},
    ),
    # grouped-query k and v (1, 2, 4, 8) float32 = 256 B each beside q and out (1, 4, 4, 8) =
    # 512 B; slopes 4 x 4 B; 4 B H L^2 D = 2048 FLOPs. Backward: q, out, do, dq (4 x 512 B),
    # k, v, dk, dv (4 x 256 B), the slopes twice
    (
        "alibi_attention",
        Point(1, 4, 32, 4, num_kv_heads=2),
        F32,
        {"forward": (1552, 2048), "backward": (3104, 5120), "forward+backward": (4656, 7168)},
    ),
    # T5's (32, 2) bf16 table: 128 B
    (
        "t5_attention",
        Point(1, 8, 16, 2),
        BF16,
        {"forward": (1152, 4096), "backward": (2304, 10240), "forward+backward": (3456, 14336)},
    ),
    # Shaw key + value: the (33, 8) E_K, E_V tables (2 x 528 B); Q E_K^T and weights x E_V:
    # 4 B H L (2K + 1) D = 16896 FLOPs forward, twice that backward
    (
        "shaw_kv_attention",
        Point(1, 8, 16, 2),
        BF16,
        {
            "forward": (2080, 4096 + 16896),
            "backward": (4160, 10240 + 33792),
            "forward+backward": (6240, 14336 + 50688),
        },
    ),
    # attention over x (1, 4, 8) float32, 4 weights 8 x 8 + 4 biases: projections 8 B L d^2 =
    # 2048 FLOPs, attention 4 B L^2 d = 512; bytes x, y, weights (64 + 256 + 32 floats).
    # Backward: projections x 2, attention x 2.5; reads dy, x, weights, writes dx, dW.
    (
        "rope_attention",
        Point(1, 4, 8, 2),
        F32,
        {"forward": (1408, 2560), "backward": (2688, 5376), "forward+backward": (4096, 7936)},
    ),
    # Shaw's relative terms at K = 32: 4 B L (2K + 1) d = 8320 forward, 16640 backward
    (
        "shaw_attention",
        Point(1, 4, 8, 2),
        F32,
        {
            "forward": (1408, 2560 + 8320),
            "backward": (2688, 5376 + 16640),
            "forward+backward": (4096, 7936 + 24960),
        },
    ),
]


IDS = [f"{h[0]}{'-causal' if h[1].causal else ''}" for h in HAND]


@pytest.mark.parametrize(("case", "point", "dtype", "want"), HAND, ids=IDS)
def test_bytes_and_flops_per_mode(case, point, dtype, want):
    for mode, (n_bytes, flops) in want.items():
        assert CASES[case].cost(point, dtype, mode) == Cost(n_bytes, flops), mode


def test_forward_backward_costs_the_sum_of_its_two_modes():
    point = Point(2, 8, 16, 2)
    for case in CASES.values():
        fwd, bwd, both = (
            case.cost(point, torch.float32, m) for m in ("forward", "backward", "forward+backward")
        )
        want = Cost(fwd.bytes + bwd.bytes, fwd.flops + bwd.flops, fwd.tokens)  # the same tokens
        assert both == want, case.name
