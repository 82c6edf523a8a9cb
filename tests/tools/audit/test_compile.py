# ruff: noqa: E501 (TTGIR lines as Triton prints them)
"""The compile audit's reading of a kernel's TTGIR (tools/audit/compile.py): which dots became
wgmma, the shape of each wgmma in the key loops (a narrow m64n16 product counted), and whether
the loop was pipelined; on a TTGIR written as Triton 3.9 prints it for sm_90a."""

from tools.audit.compile import read_ttgir

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
