# ruff: noqa: E501 (TTGIR lines as Triton prints them)
"""The compile audit's reading of a kernel's TTGIR (tools/audit/compile.py): which dots became
wgmma, the shape of each wgmma in the key loops (a narrow m64n16 product counted), and whether
the loop was pipelined; on a TTGIR written as Triton 3.9 prints it for sm_90a."""

from tools.audit.compile import (
    problems,
    read_ttgir,
    sass_inner,
    sass_loop_spills,
    sass_loops,
    sass_mma,
    verdict,
)

LAYOUTS = """\
#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [8, 1], instrShape = [16, 16, 16]}>
#mma1 = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 2], instrShape = [16, 64, 16]}>
"""
LOOP = """\
module {
  tt.func @kernel() {
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (tensor<64x128xf32, #mma1>) {
      %c = ttg.async_copy_global_to_local %p, %buf : tensor<32x128x!tt.ptr<bf16>> -> <32x128xbf16>
      %s = ttng.warp_group_dot %q, %k, %z0 {inputPrecision = 0 : i32, isAsync = true} : !ttg.memdesc<64x128xbf16, #shared, #smem> * !ttg.memdesc<128x32xbf16, #shared1, #smem, mutable> -> tensor<64x32xf32, #mma> loc(#loc1)
      %o = ttng.warp_group_dot %p2, %v, %acc {inputPrecision = 0 : i32, isAsync = true} : tensor<64x32xbf16, #ttg.dot_op<{opIdx = 0, parent = #mma1, kWidth = 2}>> * !ttg.memdesc<32x128xbf16, #shared, #smem, mutable> -> tensor<64x128xf32, #mma1> loc(#loc2)
      scf.yield %o : tensor<64x128xf32, #mma1>
    }
    %e = math.exp2 %x : tensor<64x32xf32, #mma>
    tt.return
  }
}
"""


def test_the_loops_wgmma_shapes_and_the_narrow_ones_are_read():
    got = read_ttgir(LAYOUTS + LOOP)
    assert got["wgmma_dots"] == 2 and got["dot_loops"] == 1 and got["pipelined_loops"] == 1
    assert got["loop_wgmma"] == "m64n16 m64n64"
    assert got["narrow_wgmma"] == 1  # the score product: 16 columns a warp group
    assert got["exp2"] == 1


def test_wide_products_are_not_narrow():
    wide = LAYOUTS.replace("instrShape = [16, 16, 16]", "instrShape = [16, 128, 16]")
    got = read_ttgir(wide + LOOP)
    assert got["loop_wgmma"] == "m64n64 m64n128" and got["narrow_wgmma"] == 0


def _row(kernel, family, narrow):
    """An sm_90a bfloat16 row at default tiles that passes every other rule."""
    return dict(
        problem=None, atomics=0, shared_bytes=65536, default_tiles=True, spill_stores=0,
        spill_loads=0, dtype="bfloat16", kernel=kernel, tiles="32x64", dots=4, wgmma_dots=4,
        family=family, fma_loop_dots=0, dot_loops=3, nested_loops=0, pipelined_loops=3,
        narrow_wgmma=narrow,
    )  # fmt: skip


def test_a_narrow_product_fails_the_audit_in_every_family():
    """An m64n16 product in a key loop fails on sm_90a in every family, forward and backward
    (Shaw's key + value term's backward, the last to hold them, runs m64n32 now)."""
    assert problems(_row("_relbias_bwd_dkdv_kernel", "alibi", 6), 90) == (
        "6 m64n16 wgmma in the key loops"
    )
    assert "m64n16" in problems(_row("_relbias_fwd_kernel", "t5", 2), 90)
    assert "m64n16" in problems(_row("_relbias_bwd_dq_kernel", "t5", 2), 90)
    for family in ("t5", "shaw_bias", "fox"):
        assert "m64n16" in problems(_row("_relbias_bwd_dkdv_kernel", family, 6), 90)
    for kernel in ("_relbias_bwd_dkdv_kernel", "_relbias_bwd_dq_kernel"):
        assert "m64n16" in problems(_row(kernel, "shaw_kv", 6), 90)
    assert "m64n16" in problems(_row("_relbias_fwd_kernel", "shaw_kv", 2), 90)
    assert problems(_row("_relbias_bwd_dkdv_kernel", "alibi", 0), 90) == ""
    assert problems(_row("_relbias_bwd_dkdv_kernel", "alibi", 6), 80) == ""  # no wgmma there


def test_a_spill_fails_the_audit_inside_a_key_loop():
    """A spill inside a key loop is paid every iteration and fails; a few words kept in local
    memory before and after the loops pass; a kernel without key loops (RoPE) fails on any."""
    outside = dict(_row("_relbias_bwd_dkdv_kernel", "t5", 0), spill_stores=2, spill_loads=2)
    assert problems(dict(outside, loop_spills=0), 90) == ""
    assert problems(dict(outside, loop_spills=3), 90) == (
        "spills in the key loops (3 local accesses)"
    )
    rope = dict(outside, kernel="_rope_kernel", dot_loops=0, dots=0, wgmma_dots=0)
    assert problems(dict(rope, loop_spills=0), 90) == "spills (2 local stores)"
    assert sass_loop_spills(SPILL) == [2]


SPILL = """\
        /*0100*/                   STL [R1], R6 ;
        /*0110*/                   HGMMA.64x32x16.F32.BF16 R88, gdesc[UR12], RZ, !UPT ;
        /*0120*/                   STL [R1+0x4], R7 ;
        /*0130*/                   LDL R8, [R1+0x4] ;
        /*0140*/              @!P2 BRA 0x110 ;
        /*0150*/                   LDL.LU R6, [R1] ;
"""


def test_a_loop_inside_a_key_loop_fails_in_every_family():
    """The band stores a value a (row, index) (Shaw's logits and ds, the tables' ds): an inner
    loop there (the per-index or per-bucket sums it ran before) fails on every target."""
    nested = dict(nested_loops=1, pipelined_loops=2)
    for family in ("shaw_kv", "t5", "shaw_bias"):
        for kernel in ("_relbias_fwd_kernel", "_relbias_bwd_dq_kernel"):
            for capability in (90, 80):
                row = dict(_row(kernel, family, 0), **nested)
                assert "1 key loop(s) holding a loop" in problems(row, capability)
    assert problems(_row("_relbias_bwd_dq_kernel", "t5", 0), 90) == ""


SASS = """\
        /*0100*/                   MOV R1, c[0x0][0x28] ;
        /*0110*/                   MUFU.RCP R6, R6 ;
        /*0200*/                   HGMMA.64x64x16.F32.BF16 R88, gdesc[UR8], RZ, !UPT ;
        /*0210*/                   FMUL R90, R90, R3 ;
        /*0220*/                   FFMA R91, R91, R3, -R4 ;
        /*0230*/                   FMNMX R5, R90, R91, !PT ;
        /*0240*/                   MUFU.EX2 R90, R90 ;
        /*0250*/                   HGMMA.64x128x16.F32.BF16 R24, R120, gdesc[UR8].tnspB, R24 ;
        /*0260*/                   IADD3 R7, R7, 0x40, RZ ;
        /*0270*/              @!P2 BRA 0x200 ;
        /*0280*/                   FADD R9, R9, R8 ;
        /*0290*/                   IADD3 R10, R10, 0x1, RZ ;
        /*02a0*/               @P0 BRA 0x280 ;
        /*02b0*/                   BRA 0x2c0 ;
"""


def test_the_sass_loops_are_read_per_iteration():
    """The loop from 0x200 to its backward branch: 8 instructions, 3 FP32, 1 MUFU, 2 HGMMA; the
    loop without a tensor-core instruction (0x280) and the forward branch are not counted."""
    assert sass_loops(SASS) == [(8, 3, 1, 2)]


NESTED = """\
        /*0100*/                   HGMMA.64x16x16.F32.BF16 R88, gdesc[UR12], RZ, !UPT ;
        /*0110*/                   HGMMA.64x16x16.F32.BF16 R88, gdesc[UR12], R88 ;
        /*0120*/                   HGMMA.64x64x16.F32.BF16 R24, R120, gdesc[UR12].tnspB, R24 ;
        /*0130*/                   FADD R9, R9, R8 ;
        /*0140*/                   IADD3 R10, R10, 0x1, RZ ;
        /*0150*/               @P0 BRA 0x130 ;
        /*0160*/              @!P2 BRA 0x100 ;
"""


def test_the_sass_loops_say_their_products_and_inner_loops():
    """What the time model charges (tools/audit/model.py): each HGMMA's N and where its A
    operand lives (a register tuple or a shared-memory descriptor), and the instructions of a
    loop nested in a key loop (0x130-0x150: 3), which the model multiplies by its trips."""
    assert sass_mma(SASS) == ["1x64s+1x128r"]
    assert sass_inner(SASS) == [0]
    assert sass_mma(NESTED) == ["2x16s+1x64r"]
    assert sass_inner(NESTED) == [3]
    assert sass_loops(NESTED) == [(7, 1, 0, 3)]


def test_a_problem_at_the_default_tiles_fails_the_audit_and_a_candidates_spill_does_not():
    """Every default-tile row with a problem fails the audit (no row is excused); a candidate
    tile fails it only with a compile error or shared memory past the limit."""
    row = dict(
        kernel="_relbias_bwd_dkdv_kernel", target="sm_90a", triton="3.9.0", family="t5",
        causal="True", variant="default gqa 4 packed", default_tiles=True,
        problem="spills in the key loops (2 local accesses)",
    )  # fmt: skip
    assert verdict([row]) == [row]
    assert verdict([dict(row, problem="")]) == []
    candidate = dict(row, default_tiles=False)  # its spill is reported in the tables only
    assert verdict([candidate]) == []
    for problem in ("compile error: CompilationError: x", "shared memory 300000 > 232448"):
        assert verdict([dict(candidate, problem=problem)]) == [dict(candidate, problem=problem)]
