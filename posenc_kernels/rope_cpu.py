"""RoPE on the CPU in one pass (csrc/rope_cpu.c), what `apply_rope` runs for CPU tensors outside
Triton's interpreter: q and k read once and written once, the traffic of a copy (the eager
formula makes three or more passes and temporaries; docs/performance.md has the measurements).

The C file is compiled at first use with the machine's C compiler (`$CC`, else cc, gcc or clang:
`-O3 -march=native`, about a second) into a cache folder (`$POSENC_CACHE`, else
~/.cache/posenc-bench), keyed by the source, the flags and the CPU, and loaded with ctypes; each
call splits its rows over torch's thread count, each thread one ctypes call (ctypes lets go of
the GIL), so there is no second threading runtime beside torch's. Without a compiler the first
call says so in one line.

Layout: the kernel walks x as (B, H, L, D) through its strides, in memory order (l outer in
bshd memory, h outer in bhsd); float32 and bfloat16 in, float32 arithmetic; float16 rotates
through a float32 copy.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("csrc") / "rope_cpu.c"
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC", "-std=c11")
_I64 = ctypes.c_int64
_P = ctypes.c_void_p
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
# below this many elements a thread costs more than it saves: 64 rows of 8 heads of 128 (the
# split's unit is one row of D, so every layout, bshd or bhsd, splits over every thread)
MIN_ELEMENTS_PER_THREAD = 65536


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise RuntimeError(
        "posenc_kernels' CPU RoPE is compiled at first use and needs a C compiler: install gcc or "
        "clang, or set CC"
    )


def _cpu_id() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    flags = [ln for ln in text.splitlines() if ln.startswith("flags")]
    return flags[0] if flags else platform.processor()


@functools.cache
def library() -> ctypes.CDLL:
    """The compiled kernel, built once per source, flags and CPU (atomically: a temporary
    file renamed into the cache, so that concurrent first uses never load half a file)."""
    cc = _compiler()
    key = hashlib.sha256(
        SOURCE.read_bytes() + " ".join((cc, *FLAGS, platform.machine(), _cpu_id())).encode()
    ).hexdigest()[:16]
    cache = Path(os.environ.get("POSENC_CACHE") or Path.home() / ".cache" / "posenc-bench")
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"rope_cpu-{key}.so"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".so")
        os.close(fd)
        done = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if done.returncode:
            os.unlink(tmp)
            raise RuntimeError(f"compiling {SOURCE.name} failed: {done.stderr.strip()[-500:]}")
        os.replace(tmp, path)
    lib = ctypes.CDLL(str(path))
    lib.rope_rows.restype = None
    lib.rope_rows.argtypes = [
        ctypes.c_int, _P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_int, _I64, _I64, _P, _I64, _I64,
        _I64, _I64, _I64, _I64, ctypes.c_int, ctypes.c_float, _I64, _I64,
    ]  # fmt: skip
    return lib


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="posenc-rope")


def _array(values) -> ctypes.Array:
    return (_I64 * len(values))(*values)


def rotate(
    x: Tensor,
    out: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    half: int,
    positions: Tensor | None = None,
    offset: int = 0,
    start: int = 0,
    interleaved: bool = False,
    scale: Tensor | None = None,
    divide: bool = False,
    inverse: bool = False,
) -> Tensor:
    """out <- x turned by the tables' angles (minus them with inverse), x and out (B, H, L, D)
    views of one dtype (out may be x), last stride 1; cos, sin (and scale) float32 (T, F) rows
    by position or (B or 1, L, F) per token; positions int64 (B, L) or broadcast views of it;
    the rotated pairs counted from dim start."""
    lib = library()
    b, h, n, d = x.shape
    if cos.dim() == 2:  # rows by position (T, F): every sequence reads the same table
        tb, tl = 0, cos.stride(0)
    else:  # per token (B or 1, L, F)
        tb, tl = (cos.stride(0) if cos.shape[0] > 1 else 0), cos.stride(1)
    pb = pl = 0
    if positions is not None:
        pb, pl = positions.stride()
    rows = b * h * n  # of D elements each, in the kernel's (b, outer, inner) order
    threads = max(1, min(torch.get_num_threads(), rows * d // MIN_ELEMENTS_PER_THREAD))
    args = (
        _DTYPES[x.dtype],
        x.data_ptr(),
        out.data_ptr(),
        _array(x.shape),
        _array(x.stride()),
        _array(out.stride()),
        cos.data_ptr(),
        sin.data_ptr(),
        scale.data_ptr() if scale is not None else None,
        int(divide),
        tb,
        tl,
        positions.data_ptr() if positions is not None else None,
        pb,
        pl,
        offset,
        start,
        half,
        cos.shape[-1],
        int(interleaved),
        -1.0 if inverse else 1.0,
    )
    if threads == 1:
        lib.rope_rows(*args, 0, rows)
        return out
    cuts = [rows * i // threads for i in range(threads + 1)]
    pool = _pool(threads)
    jobs = [pool.submit(lib.rope_rows, *args, a, b) for a, b in zip(cuts, cuts[1:], strict=False)]
    for job in jobs:
        job.result()
    return out


def launch(q, k, q_out, k_out, cos, sin, scale, pos, offset, rotary, start, interleaved, backward):
    """rope.py's launch on the CPU: q, k, q_out, k_out (B, L, H, D) views; pos None, (B,) or
    (B, L); the xPos scale multiplies q's rows and divides k's."""
    if pos is not None and pos.dim() == 1:  # one offset per sequence: position pos[b] + l
        pos = pos[:, None] + torch.arange(q.shape[1], dtype=pos.dtype)
    if pos is not None:
        pos = pos.to(torch.int64)
    common = dict(
        half=rotary // 2, positions=pos, offset=offset, start=start, interleaved=interleaved
    )
    for x, out, divide in ((q, q_out, False), (k, k_out, True)):
        x4, out4 = x.transpose(1, 2), out.transpose(1, 2)  # (B, H, L, D)
        if out.data_ptr() == x.data_ptr() and any(
            st == 0 and n > 1 for st, n in zip(x.stride(), x.shape, strict=True)
        ):
            raise ValueError("inplace=True: q and k must not be expanded views (stride 0)")
        if x.dtype in _DTYPES and x.stride(-1) == 1 and out.stride(-1) == 1:
            rotate(x4, out4, cos, sin, scale=scale, divide=divide, inverse=backward, **common)
            continue
        # float16, or a last dim with a stride (an expanded gradient): a float32 copy of its own
        x32 = torch.empty(x4.shape, dtype=torch.float32).copy_(x4)
        rotate(x32, x32, cos, sin, scale=scale, divide=divide, inverse=backward, **common)
        out4.copy_(x32)
