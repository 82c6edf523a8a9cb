"""The attention kernels' time model (tools/audit/model.py): what it charges an iteration,
how many iterations each program streams, and the calibration data it reads."""

import pytest

from tools.audit import fit, model


def test_a_narrow_product_from_shared_memory_costs_more_than_its_flops():
    """An m64n16 with both operands in shared memory streams 2.5 KiB for 8 cycles of products
    (20 cycles at 128 B a cycle); an m64n128 with A in registers is bound by its products (64);
    two warp groups take the tensor cores in turn; issue is instructions per scheduler."""
    narrow = model.Loop(insts=100, mufu=4, inner=0, mma=((16, False, 4),))
    wide = model.Loop(insts=100, mufu=20, inner=0, mma=((128, True, 1),))
    assert model.iteration_cycles(narrow, 4, 1) == (80, 100)
    assert model.iteration_cycles(wide, 8, 1) == (128, 2 * 160)  # MUFU: 8 issue cycles each
    nested = model.Loop(insts=100, mufu=0, inner=10, mma=())
    assert model.iteration_cycles(nested, 4, 5)[1] == 140  # 4 more trips of the inner loop


@pytest.mark.parametrize("kernel", ["fwd", "dq", "dkdv"])
def test_every_program_streams_its_blocks_once(kernel):
    """Outer and band iterations cover the streamed blocks: all of them without a mask, the
    lower triangle with one (fwd and dq hold queries, dk/dv keys)."""
    length, bm, bn = 512, 64, 32
    full = model.programs(kernel, "shaw_bias", length, bm, bn, 16, False)
    held, streamed = (bn, bm) if kernel == "dkdv" else (bm, bn)
    assert len(full) == length // held
    assert all(outer + len(trips) == length // streamed for outer, trips in full)
    causal = model.programs(kernel, "shaw_bias", length, bm, bn, 16, True)
    total = sum(outer + len(trips) for outer, trips in causal)
    pairs = sum(x0 // streamed + (held // streamed or 1) for x0 in range(0, length, held))
    if kernel == "dkdv":  # keys x0: the query blocks from x0's on
        pairs = sum(length // streamed - x0 // streamed for x0 in range(0, length, held))
    assert total == pairs


def test_the_band_trips_are_the_table_indices_a_tile_spans():
    """Shaw: every index the tile's relative positions reach (clipped to K); T5: the buckets
    between the extremes (its buckets are monotone on each side of 0)."""
    (_, trips), *_ = model.programs("dq", "shaw_bias", 64, 64, 32, 4, False)
    assert trips == [2 * 4 + 1] * 2
    t5 = model.bucket_index("t5", 128)
    assert len(t5) == 257 and t5[128] == 0 and max(t5) == 31  # r = 0: bucket 0


def test_every_committed_gpu_run_has_the_audit_of_the_kernels_it_measured():
    """The fit reads each run's commit from its reports and that commit's kernels from
    results/gpu-compile/measured/ (written by `--audit-commit`)."""
    points = fit.measured_points()
    assert len(points) and set(points["family"]) <= set(fit.NAMES)
    for commit in points["commit"].unique():
        rows = fit.audit_rows(commit)
        assert set(model.KERNELS.values()) <= set(rows["kernel"])
        assert rows["loop_mma"].notna().all()
