"""The results schema, an append-only CSV writer, and env.json.

One row per (case, impl, mode, device, dtype, point). Rows are appended and flushed as they are
measured, so an interrupted sweep keeps everything it finished; `resume` skips the keys already
in the file. Columns are only ever added, never renamed.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

COLUMNS = (
    "run_id",
    "case",
    "level",
    "impl",
    "mode",
    "device",
    "device_name",
    "dtype",
    "batch",
    "seq_len",
    "d_model",
    "num_heads",
    "head_dim",
    "params",
    "p20_ms",
    "p50_ms",
    "p80_ms",
    "n_samples",
    "gbps",
    "tflops",
    "pct_peak_bw",
    "pct_peak_flops",
    "peak_mem_bytes",
    "max_abs_err",
    "status",
    "message",
    "timestamp",
    "tutorial_ms_per_100",
    "calib_copy_gbps",
    "calib_matmul_tflops",
    "threads",
    "peak_reserved_bytes",
    "copy_ms",
    "pct_copy_bw",
    "p50_ci_lo_ms",
    "p50_ci_hi_ms",
    "err_ratio",
    "bytes_moved",
    "flops",
    "timing_method",
    "cpu_util",
    "first_call_ms",
    "others_cpu",
    "contended",
    "pe_share",
    "pe_share_lo",
    "pe_share_hi",
    "pe_share_profiler",
    "tokens_per_s",
)
KEY = (
    "case",
    "impl",
    "mode",
    "device",
    "dtype",
    "batch",
    "seq_len",
    "d_model",
    "num_heads",
    "params",
)


def row_key(row: dict, key: tuple[str, ...] = KEY) -> tuple[str, ...]:
    return tuple(str(row.get(k, "")) for k in key)


class ResultsWriter:
    """Appends rows to a CSV (results.csv; the probe's probe.csv with its own columns and key),
    writing the header only when the file is new and flushing every row to disk."""

    def __init__(self, path: Path, columns: tuple[str, ...] = COLUMNS, key: tuple[str, ...] = KEY):
        self.path, self.key = Path(path), key
        self.existing = set()
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                if tuple(reader.fieldnames or ()) != columns:  # appending would misalign rows
                    raise ValueError(
                        f"{self.path} has another column schema (an older "
                        "version?): resume into a new run directory"
                    )
                self.existing = {row_key(r, key) for r in reader}
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 (closed in close())
        self._writer = csv.DictWriter(self._file, fieldnames=columns, extrasaction="ignore")
        if new:
            self._writer.writeheader()
            self._file.flush()

    def append(self, row: dict) -> None:
        self._writer.writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.existing.add(row_key(row, self.key))

    def close(self) -> None:
        self._file.close()


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's answer elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _system_thp() -> str | None:
    """The kernel's transparent-huge-page mode, e.g. "always [madvise] never" (Linux only)."""
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return None


def environment() -> dict:
    """Where the run happened: devices, versions, threads, git sha, CPU allocation settings.

    THP_MEM_ALLOC_ENABLE=1 makes torch's CPU allocator ask for huge pages (madvise): large
    fresh outputs then fault in 2 MiB pages instead of 4 KiB ones, 3-4x faster on this project's
    VM for allocating encoders (README, "CPU allocation"). It is read once per process."""
    env = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thp_mem_alloc_enable": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "system_thp": _system_thp(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "git_sha": git_sha(),
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            cuda=torch.version.cuda,
            gpu_l2_bytes=getattr(props, "L2_cache_size", None),
            driver=_nvidia_smi("driver_version"),
            gpu_clocks_mhz=_nvidia_smi("clocks.sm"),
        )
    return env


def _nvidia_smi(field: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def write_env(path: Path, extra: dict) -> None:
    Path(path).write_text(json.dumps({**environment(), **extra}, indent=2, default=str) + "\n")
