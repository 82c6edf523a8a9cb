"""Run inside a checkout of an earlier commit (its root the working directory and first on the
path): capture the GPU sweep's attention launches with that commit's own launchers and capture
code, compile them for sm_90a and read them with this tree's compile.py (loaded by path, so the
checkout's modules are the ones imported). Writes a CSV of the columns the time model reads.

    python PATH/TO/_at_commit.py OUT.csv COMPILE_PY

tools/audit/fit.py runs it (`--audit-commit`); it imports nothing of this tree but compile.py.
"""

from __future__ import annotations

import csv
import importlib.util
import sys

FAMILIES = ("alibi", "t5", "shaw_bias", "shaw_kv")
# the columns the time model reads, besides the kernel's identity
COLUMNS = ("kernel", "family", "causal", "tiles", "num_warps", "registers", "shared_bytes")
COLUMNS += ("loop_sass", "loop_inner", "loop_mma")


def _capture_module():
    try:  # where the audit lived over the project's history
        from tools.audit import capture, specs
    except ImportError:
        from bench.audit import capture, specs
    return capture, specs


def _family_names(specs) -> dict[str, str]:
    """This commit's name for each family (Shaw's scalar bias was once `shaw`)."""
    names = {getattr(f, "kernel", f.name) for f in specs._families()}  # once `kernel`
    return {f: f if f in names else "shaw" for f in FAMILIES if f in names or f == "shaw_bias"}


def main(out: str, compile_py: str) -> None:
    load = importlib.util.spec_from_file_location("_audit_compile", compile_py)
    comp = importlib.util.module_from_spec(load)
    load.loader.exec_module(comp)
    capture, specs = _capture_module()
    rows = []
    for family, name in _family_names(specs).items():
        for causal in (False, True):
            for job in capture.capture(specs.Spec("relbias", name, causal=causal), 90):
                res = comp.compile_job(job)
                if res.get("problem"):
                    raise SystemExit(f"{job['name']} {family}: {res['problem']}")
                m, n = job["block"]
                rows.append(
                    dict(
                        res,
                        kernel=job["name"],
                        family=family,
                        causal=causal,
                        tiles=f"{m}x{n}",
                        num_warps=job["options"]["num_warps"],
                    )
                )
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:3])
