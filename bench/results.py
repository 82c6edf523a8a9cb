"""The results schema (one definition of a row: its columns, its identity, its version), the
append-only CSV writer, the checked reader (a torn last row set aside), and env.json.

One row per (case, impl, mode, device, device name, dtype, point). Rows are appended and flushed
as they are measured, so an interrupted sweep keeps everything it finished; `resume` skips the
keys already in the file. Columns are only ever added, never renamed: a row names its schema's
version, a key the schema does not have is an error (never dropped), and a file of an older
version (fewer columns) is upgraded in place on resume, its rows kept with the new columns
empty. The probe's probe.csv is a schema of its own, written by the same writer. Resume with
retry_timeouts moves a run's timed-out rows to results.csv.retried, to measure them again.

Why this file is long: the row's definition, its writer and its reader change together (a
column, a status, a torn or retried row), so they stay in one module."""

from __future__ import annotations

import csv
import errno
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# `contended`: others took over a quarter of a core while the row was timed (bench/run/machine.py)
CONTENDED_CORES = 0.25


@dataclass(frozen=True)
class Schema:
    """A CSV's row definition: its columns in order, the columns that identify a row (what a
    resumed run skips and a report merges on), and its version (the `schema_version` column,
    where it has one)."""

    columns: tuple[str, ...]
    key: tuple[str, ...]
    version: int | None = None
    numeric: frozenset[str] = frozenset()  # columns that hold a number or nothing
    statuses: tuple[str, ...] = ()  # the `status` column's values, where the schema checks it

    def key_of(self, row: dict) -> tuple[str, ...]:
        return tuple(str(row.get(k, "")) for k in self.key)

    def check(self, row: dict) -> None:
        """Every key of `row` is a column: a misspelled one raises, naming it."""
        unknown = [k for k in row if k not in self.columns]
        if unknown:
            raise KeyError(
                f"row has keys that are no column of the schema: {', '.join(map(repr, unknown))}"
            )

    def problem(self, row: dict) -> str | None:
        """What is wrong with a row read back (a number that is not one, an unknown status)."""
        for column in self.numeric & row.keys():
            value = row[column]
            if value:
                try:
                    float(value)
                except ValueError:
                    return f"{column} is {value!r}, not a number"
        if self.statuses and row.get("status") not in self.statuses:
            return f"status is {row.get('status')!r}, not one of {', '.join(self.statuses)}"
        return None

    def upgradable_from(self, header: tuple[str, ...]) -> bool:
        """A file with this header is an older version of the schema (a subset of its columns:
        columns are only ever added), so it can be rewritten with the new ones empty."""
        return set(header) <= set(self.columns)


SHAPE = ("batch", "seq_len", "d_model", "num_heads", "params")  # a point, with its knobs
KEY = ("case", "impl", "mode", "device", "device_name", "dtype", *SHAPE)
# 1: the rows before the column (read with it empty); 2: schema_version itself; 3: model;
# 4: share_partner, pe_share_best; 5: wall_ms; 6: gpu_held; 7: baseline (the case's, so that a
# report needs no case registry)
SCHEMA_VERSION = 7
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
    "model",
    "schema_version",
    "share_partner",
    "pe_share_best",
    "wall_ms",
    "gpu_held",
    "baseline",
)
TEXT = {*COLUMNS[:8], "params", "share_partner"}  # run_id .. dtype, and these: text
TEXT |= {"status", "message", "timestamp", "timing_method", "contended", "model", "gpu_held"}
TEXT |= {"baseline"}
MODES = ("forward", "backward", "forward+backward")  # the mode column's values (registry.Mode)
STATUSES = ("ok", "wrong", "oom", "skipped", "error", "timeout", "unchecked")  # registry.Status
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a write refused for want of room
RESULTS = Schema(COLUMNS, KEY, SCHEMA_VERSION, frozenset(COLUMNS) - TEXT, STATUSES)


@dataclass(frozen=True)
class Read:
    """A results file read back: its header, its rows (each checked), the text they came from,
    and the torn last line (a write cut short: no line end), set aside, or None."""

    header: tuple[str, ...]
    rows: list[dict]
    text: str
    torn: str | None


def read_rows(path: Path, schema: Schema = RESULTS) -> Read:
    """Every row of a CSV of `schema`, checked: the number of fields, the numeric columns, the
    status. A last line without its line end is a row cut short (a kill, a full disk): it is
    returned apart, never as a row; a malformed row anywhere else raises ValueError naming the
    file and the line."""
    with open(path, newline="") as f:
        text = f.read()
    torn = None
    if text and not text.endswith("\n"):
        cut = text.rfind("\n") + 1
        text, torn = text[:cut], text[cut:]
    reader = csv.reader(text.splitlines(keepends=True))
    header = tuple(next(reader, ()))
    if header and not schema.upgradable_from(header):
        extra = [c for c in header if c not in schema.columns]
        raise ValueError(
            f"{path} has columns this version does not know ({', '.join(extra)}): "
            "resume into a new run directory"
        )
    rows = []
    for fields in reader:
        where = f"{path}, line {reader.line_num}"
        if len(fields) != len(header):
            raise ValueError(f"{where}: {len(fields)} fields, the header has {len(header)}")
        row = dict(zip(header, fields, strict=True))
        if problem := schema.problem(row):
            raise ValueError(f"{where}: {problem}")
        rows.append(row)
    return Read(header, rows, text, torn)


def row_key(row: dict) -> tuple[str, ...]:
    """A results row's identity (RESULTS.key)."""
    return RESULTS.key_of(row)


class ResultsWriter:
    """Appends rows to a CSV of `schema` (results.csv; the probe's probe.csv), writing the
    header only when the file is new and flushing every row to disk. A file of an older version
    of the schema is rewritten first (atomically: a new file renamed over it) with the new
    columns empty; a file with columns the schema lacks (another tool's, a newer version's) is
    refused, since appending would lose them."""

    def __init__(self, path: Path, schema: Schema = RESULTS, retry: tuple[str, ...] = ()):
        """retry: statuses whose rows are measured again (resume with retry_timeouts): moved
        to <file>.retried, so that their points are not in `existing`."""
        self.path, self.schema = Path(path), schema
        self.existing = set()
        self.upgraded_from: tuple[str, ...] | None = None
        self.set_aside: str | None = None  # what was done with a torn last row, said once
        if self.path.exists() and self.path.stat().st_size:
            read = read_rows(self.path, schema)
            header, rows = read.header, read.rows
            if read.torn is not None:
                self._set_aside(read)
            again = [r for r in rows if r.get("status") in retry]
            if again:
                self._keep_aside(again)
                rows = [r for r in rows if r.get("status") not in retry]
            if header != schema.columns or again:  # an older version's, or rows moved out
                self._rewrite(rows)
                self.upgraded_from = header if header != schema.columns else None
            self.existing = {schema.key_of(r) for r in rows}
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 (closed in close())
        self._writer = csv.DictWriter(self._file, fieldnames=schema.columns)
        if new:
            self._writer.writeheader()
            self._file.flush()

    def _set_aside(self, read: Read) -> None:
        """The torn last line kept verbatim in <file>.torn, the file cut back to its whole rows
        (renamed over it), so that the row's point is measured again."""
        aside = self.path.with_name(self.path.name + ".torn")
        with open(aside, "a", newline="") as f:
            f.write(read.torn + "\n")
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        os.chmod(fd, os.stat(self.path).st_mode & 0o7777)  # mkstemp's 0600 would replace it
        with os.fdopen(fd, "w", newline="") as f:
            f.write(read.text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.set_aside = (
            f"{self.path.name}: its last row was cut short ({len(read.torn)} bytes, kept in "
            f"{aside.name}); its point is measured again"
        )

    def _keep_aside(self, rows: list[dict]) -> None:
        """Rows to measure again, appended to <file>.retried (with its header when new)."""
        aside = self.path.with_name(self.path.name + ".retried")
        new = not aside.exists()
        with open(aside, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.schema.columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)
        said = f"{len(rows)} timed-out rows measured again (kept in {aside.name})"
        self.set_aside = f"{self.set_aside}; {said}" if self.set_aside else said

    def _rewrite(self, rows: list[dict]) -> None:
        """The file's rows under the schema's header (missing columns empty), renamed over it."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        os.chmod(fd, os.stat(self.path).st_mode & 0o7777)  # mkstemp's 0600 would replace it
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.schema.columns)
            writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def append(self, row: dict) -> None:
        if self.schema.version is not None:
            row = {**row, "schema_version": self.schema.version}
        self.schema.check(row)
        self._writer.writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.existing.add(self.schema.key_of(row))

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
    import torch  # here: a report reads rows without loading torch

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
