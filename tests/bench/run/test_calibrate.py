"""The calibration is bounded in time whatever the matmul costs (bench/run/calibrate.py): the
matrix stops growing once one product is slow, so a dtype this device emulates costs a few
products, not minutes; such a dtype is named (env.json, the report)."""

import time

import torch

from bench.run import calibrate


def test_a_slow_matmul_stops_the_matrix_growing():
    sizes = []

    def slow(a, b):  # a product that takes 0.2 s whatever its size: an emulated dtype
        sizes.append(a.shape[0])
        time.sleep(0.2)
        return a

    rate = calibrate.matmul_rate(torch.device("cpu"), torch.float32, 0.05, slow)
    assert set(sizes) == {256} and len(sizes) <= 3, sizes
    assert rate < 2 * 256**3 / 0.1 / 1e12  # from the slow product, not a guess


def test_a_fast_matmul_grows_to_the_largest_size():
    sizes = []

    def instant(a, b):
        sizes.append(a.shape[0])
        return a

    calibrate.matmul_rate(torch.device("cpu"), torch.float32, 0.001, instant)
    assert sorted(set(sizes)) == [256, 512, 1024, 2048]


def test_an_emulated_dtype_is_said_so():
    f32 = {"calib_matmul_tflops": 1.0}
    note = calibrate.matmul_note({"calib_matmul_tflops": 0.05}, f32, "bfloat16")
    assert note.startswith("bfloat16 matmul at 0.05x float32's on this device: emulated")
    assert calibrate.matmul_note({"calib_matmul_tflops": 2.0}, f32, "bfloat16") is None
    assert calibrate.matmul_note({"calib_matmul_tflops": 0.05}, f32, "float32") is None
