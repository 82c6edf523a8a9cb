"""The forward's grid without a GPU: query heads packed a program, the key split from the
program slots (SMs x the programs one holds, from registers and shared memory), and the byte
and wave model of a decode step. What the kernels compute with it is tested against the
reference in test_relbias_sequences.py and test_relbias_paged.py."""

import pytest
import torch

from posenc_kernels import _relbias_grid as G
from posenc_kernels._relbias_seq import AT_END, CACHE, PACKED, SELF, Sequences

H100 = dict(regs=65536, shared=233472, threads=2048)  # sm_90's per-SM resources


def test_num_splits_fills_the_gpu_and_leaves_full_grids_alone():
    """None when the programs fill the slots or the keys are few; a decode step of 8 programs
    on 132 slots fills at least 90% of a wave; never more than the keys allow
    (MIN_SPLIT_BLOCKS each) or MAX_SPLITS."""
    n = G.num_splits
    assert n(132, 1000, 132) == 1 and n(500, 1000, 132) == 1
    assert n(8, 7, 132) == 1  # under 2 x MIN_SPLIT_BLOCKS key blocks
    s = n(8, 1000, 132)
    assert 8 * s / 132 >= 0.9 and 8 * (s - 1) / 132 < 0.9
    assert n(1, 10_000, 132) == G.MAX_SPLITS
    assert n(1, 40, 132) == 40 // G.MIN_SPLIT_BLOCKS
    assert n(100, 1000, 132) == 5  # 500 programs: 4 waves, the last 95% full (1-4: 76%)
    assert n(132, 1000, 264) == 2  # 132 programs fill 132 SMs of one program, half of 264


@pytest.mark.parametrize(
    "regs, warps, shared, want",
    [
        (128, 4, 32 * 1024, 4),  # registers: 4 x 4 warps x 4096 = 64K
        (255, 4, 32 * 1024, 2),  # 255 x 32 rounds up to 8192 a warp
        (96, 4, 100 * 1024, 2),  # shared: 228 KiB / (100 + 1) KiB
        (32, 1, 0, 32),  # the 32-program cap
        (24, 16, 0, 4),  # threads: 2048 / 512 (registers allow 5)
        (255, 16, 200 * 1024, 1),  # never below one
    ],
)
def test_programs_per_sm_is_the_tightest_resource(regs, warps, shared, want):
    assert G.programs_per_sm(regs, warps, shared, H100) == want


def _seq(mode, rows_q, rows_k, count=2):
    return Sequences(mode, None, count, rows_q, rows_k)


def test_a_group_is_packed_where_its_rows_fit_the_tile():
    """GROUP x Lq rows in block_m: a decode step or a short chunk at the end; not packed
    documents, FoX, plain multi-head attention, or a group whose rows overflow the tile."""
    assert G.packed_heads(_seq(AT_END, 1, 4096), 32, 8, 128, False) == 4
    assert G.packed_heads(_seq(CACHE, 4, 4096), 32, 8, 16, False) == 4  # 16 rows
    assert G.packed_heads(_seq(SELF, 1, 1), 8, 2, 16, False) == 4
    assert G.packed_heads(_seq(CACHE, 5, 4096), 32, 8, 16, False) == 1  # 20 rows
    assert G.packed_heads(_seq(AT_END, 1, 4096), 32, 32, 128, False) == 1  # no group
    assert G.packed_heads(_seq(AT_END, 1, 4096), 32, 8, 128, True) == 1  # FoX
    assert G.packed_heads(_seq(PACKED, 4, 4, count=3), 32, 8, 128, False) == 1


def test_slots_are_read_only_when_the_split_depends_on_them():
    """The compiled kernel's occupancy is asked for only where the split is the heuristic's
    and the keys are long enough to share."""
    asked = []

    def slots():
        asked.append(1)
        return 264

    G.forward_grid(_seq(CACHE, 1, 100), 8, 4, 16, 64, None, slots)  # 2 key blocks
    G.forward_grid(_seq(CACHE, 1, 8192), 8, 4, 16, 64, 3, slots)  # the caller's split
    assert not asked
    G.forward_grid(_seq(CACHE, 1, 8192), 8, 4, 16, 64, None, slots)
    assert asked == [1]


def test_occupancy_reads_the_compiled_kernel_once_per_specialization():
    """occupancy compiles without launching (warmup), reads registers, warps and shared
    memory, and keeps the answer per specialization: a later call makes no arguments (a
    split's partial outputs) and compiles nothing."""
    compiles = []

    class Compiled:
        n_regs = 128

        class metadata:  # noqa: N801 (Triton's attribute)
            num_warps, shared = 4, 64 * 1024

        def _init_handles(self):
            pass

    class Kernel:
        def warmup(self, *args, grid, **constexprs):
            compiles.append(constexprs)
            return Compiled()

    made = []

    def args():  # the arguments are made only for a compile
        made.append(1)
        return [torch.zeros(1, dtype=torch.float16)]

    G._OCCUPANCY.clear()
    for block_n in (64, 64, 128):
        got = G.occupancy(Kernel(), args, dict(BLOCK_N=block_n), H100)
        assert got == 3  # shared: 228 KiB / 65 KiB
    assert [c["BLOCK_N"] for c in compiles] == [64, 128] and len(made) == 2
    G._OCCUPANCY.clear()


def test_decode_packed_reads_each_cache_once_and_fills_the_gpu():
    """Llama-3.1-8B's heads (32 on 8 kv heads), D = 128 bfloat16, caches of 16k-32k keys, on
    132 SMs holding 2 programs each: packed, the programs read exactly the caches' bytes (one
    head a program: GROUP = 4 times them); at batch 64 one wave-rounded grid with no split;
    at batch 1 the keys split to fill at least 85% of one wave, every chunk whole key blocks."""
    slots, heads, kv_heads, d = 264, 32, 8, 128
    for bsz in (64, 1):
        lens = [16384 + (b * 997) % 16385 for b in range(bsz)]
        seq = Sequences(CACHE, None, bsz, 1, 32768)
        packed = G.forward_grid(seq, heads, 4, 16, 64, None, slots)
        single = G.forward_grid(seq, heads, 1, 16, 64, None, slots)
        c_packed = G.cost(packed, lens, heads, kv_heads, 1, d, 2, slots)
        c_single = G.cost(single, lens, heads, kv_heads, 1, d, 2, slots)
        assert c_packed.kv_bytes == c_packed.cache_bytes == 2 * d * 2 * kv_heads * sum(lens)
        assert c_single.kv_bytes == 4 * c_packed.kv_bytes
        assert packed.programs == bsz * kv_heads * packed.splits
        assert packed.chunk % 64 == 0 and packed.splits * packed.chunk >= 32768
        if bsz == 64:
            assert packed.splits == 1 and c_packed.partial_bytes == 0
            assert c_packed.waves == 2  # 512 programs on 264 slots
        else:
            assert packed.splits > 1 and c_packed.waves == 1 and c_packed.fill >= 0.85
            assert c_packed.partial_bytes == 2 * 4 * (d + 1) * heads * packed.splits
