"""`python3 -m tools.gpurun`: the GPU run's driver (tools/gpurun/parts.py lists the parts).

Everything measured goes into one folder that is packed into <out>/results.tgz (replaced, never
half-written) every PACK_S seconds and after every part, next to <out>/run.log (all output, as
it is printed): two files, so a call cut at any point returns what it had measured. status.txt
in the archive gives each part's exit status, time, limit and the Triton kernels it compiled.
Standard library only, until the carried wheels are unpacked for the parts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from tools.gpurun.parts import BUDGET_S, PARTS, SMOKE, Part, chosen
from tools.gpurun.warm import CARRIED, compiled_kernels, unpack, unpack_wheels

ROOT = Path(__file__).resolve().parents[2]
PACK_S = 15  # seconds between archives while a part runs
SMOKE_SLACK = 5  # the rehearsal's limits: the CPU interpreter on a machine that may be busy
WORKERS = max(1, (os.cpu_count() or 4) - 2)  # pytest workers of the kernel tests part
VERSIONS = """
import importlib, platform, torch, triton
print("python", platform.python_version(), "torch", torch.__version__, "triton",
      triton.__version__, "cuda", torch.version.cuda, "gpu",
      torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for name in ("hydra", "omegaconf", "liger_kernel", "pandas", "matplotlib", "xdist"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "present"))
    except ImportError as exc:
        print(name, "MISSING", exc)
"""


# The GPU's state around each part from nvidia-smi (standard library only): clocks, power, its
# limit, temperature, the mask of reasons holding the clocks down (older name where the newer fails)
GPU_QUERY = "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,{reasons}"
GPU_REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


class GpuRun:
    def __init__(
        self,
        out: Path,
        budget_s: int,
        smoke: bool,
        python: str,
        audit: Path,
        cache: Path,
        parts: tuple[Part, ...] = PARTS,
    ):
        self.out, self.budget_s, self.smoke, self.python = out, budget_s, smoke, python
        self.parts = parts
        self.audit, self.cache = audit, cache
        self.start = time.monotonic()
        self.work = Path(tempfile.mkdtemp(prefix="gpurun-"))
        self.res = self.work / "gpu"  # what the archive holds
        self.res.mkdir()
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out / "run.log", "a", buffering=1)  # noqa: SIM115
        self.lock = threading.Lock()
        self.env = dict(
            os.environ, PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(self.work / "triton-cache")
        )
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        if smoke:  # the CPU, the kernels under Triton's interpreter
            self.env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")

    # -- output and the archive ----------------------------------------------------------------

    def say(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)
            self.log.write(text + "\n")

    def status(self, text: str) -> None:
        self.say(text)
        with open(self.res / "status.txt", "a") as f:
            f.write(text + "\n")

    def left(self) -> int:
        return int(self.budget_s - (time.monotonic() - self.start))

    def pack(self) -> None:
        with self.lock:
            tmp = self.out / "results.tgz.tmp"
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(self.res, arcname="gpu")
            tmp.replace(self.out / "results.tgz")

    def _packer(self, stop: threading.Event) -> None:
        while not stop.wait(PACK_S):
            try:
                self.pack()
            except OSError as exc:  # a file vanishing mid-pack: the next pack has it
                self.say(f"(pack skipped: {exc})")

    # -- parts -----------------------------------------------------------------------------------

    def env_part(self) -> None:
        """nvidia-smi, the carried wheels unpacked onto PYTHONPATH, the carried Triton cache
        unpacked into the GPU run's (tools/gpurun/warm.py), the versions."""
        self._run_quiet(["nvidia-smi"], 15)
        wheels = sorted((ROOT / ".whl").glob("*.whl"))
        if wheels:
            site = self.work / "site"
            unpack_wheels(wheels, site)
            self.env["PYTHONPATH"] = os.pathsep.join([str(site), self.env["PYTHONPATH"]])
            self.say("wheels: " + ", ".join(w.name for w in wheels))
        if self.cache.is_file():  # a part's "kernels compiled" is then what missed
            try:
                n = unpack(self.cache, Path(self.env["TRITON_CACHE_DIR"]))
                self.status(f"== warm Triton cache: {n} kernels carried in {self.cache.name}")
            except (OSError, tarfile.TarError, ValueError) as exc:  # cold, not fatal
                self.status(f"== warm Triton cache: not unpacked ({exc}); compiling cold")
        out = self._run_quiet([self.python, "-c", VERSIONS], 90)
        (self.res / "versions.txt").write_text(out)
        self.status(f"== env: done after {self.elapsed()}s")

    def _run_quiet(self, argv: list[str], timeout: int) -> str:
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=self.env, cwd=ROOT
            )
            text = proc.stdout + proc.stderr
        except (OSError, subprocess.SubprocessError) as exc:
            text = f"{argv[0]}: {exc}\n"
        self.say(text.rstrip())
        return text

    def gpu_state(self) -> str | None:
        """One line of the GPU's state now, e.g. "1980 MHz, 2619 MHz, 96.5 W, 700.0 W, 37,
        0x0000000000000000"; None without nvidia-smi (the smoke rehearsal on a CPU)."""
        for reasons in GPU_REASONS:
            query = GPU_QUERY.format(reasons=reasons)
            try:
                proc = subprocess.run(
                    ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    env=self.env,
                )
            except (OSError, subprocess.SubprocessError):
                return None
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.strip().splitlines()[0]
        return None

    def argv(self, part: Part) -> list[str]:
        args = part.argv if not self.smoke else (part.smoke_argv or (*part.argv, *SMOKE))
        device = "cpu" if self.smoke else "cuda"
        return [
            self.python,
            *(
                a.format(res=self.res, device=device, audit=self.audit, workers=WORKERS)
                for a in args
            ),
        ]

    def run_part(self, part: Part) -> None:
        if part.name == "audit" and not self.audit.is_file():
            self.status(f"== audit: skipped, {self.audit} not carried (make gpu-prep)")
            return
        if part.name == "audit":
            (self.res / "audit").mkdir(exist_ok=True)
        limit = part.limit_s * (SMOKE_SLACK if self.smoke else 1)
        avail = self.left() - 10
        limit = min(limit, avail)
        if limit < part.min_s:
            self.status(f"== {part.name}: skipped, {avail}s left (needs {part.min_s}s)")
            return
        self.say(
            f"== {part.name} (limit {limit}s, {self.elapsed()}s into the GPU run): {part.what}"
        )
        before, gpu_before = self._cached_kernels(), self.gpu_state()
        t0 = time.monotonic()
        rc = self._stream(self.argv(part), limit)
        compiled = self._cached_kernels() - before
        self.status(
            f"== {part.name}: exit {rc} after {int(time.monotonic() - t0)}s "
            f"(limit {limit}s; Triton kernels compiled: {compiled})"
        )
        if gpu_before is not None:  # sm, mem clocks, power, limit, temperature, reasons
            self.status(f"   gpu before: {gpu_before}; after: {self.gpu_state()}")
        self.pack()

    def _stream(self, argv: list[str], limit: int) -> int:
        """Runs argv, its output line by line to the console and the log; killed (its whole
        process group) at the limit: exit 124."""
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=ROOT,
            start_new_session=True,
        )
        pump = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        pump.start()
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            rc = 124
        pump.join(timeout=5)
        return rc

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.say(line.rstrip("\n"))

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    def _cached_kernels(self) -> int:
        """Kernels compiled into the GPU run's own Triton cache (tools/gpurun/warm.py): a hit on an
        earlier part's entry, or on a carried one, adds none."""
        return compiled_kernels(Path(self.env["TRITON_CACHE_DIR"]))

    def elapsed(self) -> int:
        return int(time.monotonic() - self.start)

    def run(self) -> None:
        stop = threading.Event()
        packer = threading.Thread(target=self._packer, args=(stop,), daemon=True)
        self.say(
            f"gpu run: smoke={self.smoke} out={self.out} budget={self.budget_s}s "
            f"python={self.python}"
        )
        try:
            self.env_part()
            self.pack()
            packer.start()
            for part in self.parts:
                self.run_part(part)
        finally:
            stop.set()
            self.say(f"gpu run: done in {self.elapsed()}s -> {self.out / 'results.tgz'}")
            self.say((self.res / "status.txt").read_text().rstrip())
            self.pack()
            self.log.close()
            shutil.rmtree(self.work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tools.gpurun", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--smoke", action="store_true", help="rehearse on a CPU: Triton's interpreter, tiny sizes"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help=f"seconds for the whole run (default {BUDGET_S}; smoke 3600)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where run.log and results.tgz go (default results/gpu-run/<time>)",
    )
    parser.add_argument("--python", default=sys.executable, help="the parts' interpreter")
    parser.add_argument(
        "--audit",
        type=Path,
        default=ROOT / ".audit" / "audit.py",
        help="the independent audit's copy (make gpu-prep)",
    )
    parser.add_argument(
        "--triton-cache",
        type=Path,
        default=CARRIED,
        help="the carried warm Triton cache (make gpu-cache), unpacked when present",
    )
    parser.add_argument(
        "--parts",
        default=None,
        help="only these parts, comma-separated, in the order named (default: every part; "
        f"{','.join(p.name for p in PARTS)})",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print what each part launches, its estimate and limit; exit",
    )
    args = parser.parse_args(argv)
    if args.plan:
        from tools.gpurun import estimate

        print(estimate.markdown(estimate.estimates()))
        return 0
    try:
        parts = chosen(args.parts)
    except ValueError as exc:
        parser.error(str(exc))
    budget = args.budget if args.budget is not None else (3600 if args.smoke else BUDGET_S)
    if budget < 1:
        parser.error(f"--budget must be a positive number of seconds, got {budget}")
    out = args.out or ROOT / "results" / "gpu-run" / time.strftime("%Y%m%d-%H%M%S")
    audit, cache = args.audit.resolve(), args.triton_cache.resolve()
    GpuRun(out.resolve(), budget, args.smoke, args.python, audit, cache, parts).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
