"""Which figures a report must not print as plain results, from the rows alone.

- contended: measured while other processes held the CPU (the `contended` column, measured
  by the runner: bench/run/machine.py; in rows from before that column, the process got under half
  a core while it was timed).
- throttled: timed on a GPU whose clocks NVML said were held down (a power cap, thermal
  slowdown: the `gpu_held` column, bench/run/gpu_state.py): slower than the same GPU free.
- uncertain: the median's 95% interval is wider than +-UNCERTAIN_CI of it.
- interpreted: a Triton kernel run under Triton's interpreter on a CPU (TRITON_INTERPRET=1): its
  time checks the plumbing, it is not the kernel's speed (its row's message says so).
- suspect: physically impossible as measured, so the measurement or its model is wrong:
  * faster than a copy of its modelled bytes timed beside it (pct_copy_bw over 100%): the
    bytes model counts more than the call moves, or the copy was slowed (the run's calibrated
    copy, pct_peak_bw, is a 64 MiB copy through memory: a row whose bytes fit in the caches
    passes it legitimately, so it is explained in the report, not flagged);
  * past the run's measured matmul rate (pct_peak_flops over 100%): the FLOP model counts
    more than the call computes, or the calibration ran in a slow phase (it is one product
    per size, measured once per run);
  * forward+backward faster than forward alone at the same point, implementation and run.
  A speedup involving a suspect row is itself suspect.
"""

from __future__ import annotations

import pandas as pd

from bench.results import KEY

UNCERTAIN_CI = 0.10
SAME = ["run_id", *(k for k in KEY if k != "mode")]  # a row in every mode


def _ok(df: pd.DataFrame) -> pd.Series:
    return (df["status"] == "ok") & df["p50_ms"].notna()


def uncertain(df: pd.DataFrame) -> pd.Series:
    flag = pd.Series(False, index=df.index)
    if "p50_ci_hi_ms" in df:
        half = (
            pd.concat(
                [df["p50_ms"] - df["p50_ci_lo_ms"], df["p50_ci_hi_ms"] - df["p50_ms"]], axis=1
            ).max(axis=1)
            / df["p50_ms"]
        )
        flag |= half > UNCERTAIN_CI
    return flag & _ok(df)


INTERPRETER = "Triton's interpreter"  # in the message of a row the interpreter ran


def interpreted(df: pd.DataFrame) -> pd.Series:
    message = df["message"].astype(object).where(df["message"].notna(), "")
    return message.astype(str).str.contains(INTERPRETER, regex=False) & _ok(df)


def contended(df: pd.DataFrame) -> pd.Series:
    flag = pd.Series(False, index=df.index)
    if "contended" in df:
        flag |= df["contended"].astype(str).str.lower().eq("true")
    if "cpu_util" in df and ("contended" not in df or df["contended"].isna().all()):
        flag |= (df["device"] == "cpu") & (df["cpu_util"] < 0.5)  # rows from before the column
    return flag & _ok(df)


def throttled(df: pd.DataFrame) -> pd.Series:
    if "gpu_held" not in df:
        return pd.Series(False, index=df.index)
    held = df["gpu_held"].astype(object).where(df["gpu_held"].notna(), "")
    return held.astype(str).str.strip().ne("") & _ok(df)


def suspect(df: pd.DataFrame) -> pd.Series:
    """Why each row is physically impossible as measured ("" where it is not)."""
    why = [""] * len(df)  # Python strings: pandas 3's str and object columns do not add

    def add(mask: pd.Series, text) -> None:
        mask = (mask.fillna(False) & _ok(df)).to_numpy(dtype=bool)
        texts = list(text) if isinstance(text, pd.Series) else [text] * len(df)
        for i in mask.nonzero()[0]:
            why[i] = f"{why[i]}; {texts[i]}" if why[i] else str(texts[i])

    for column, what in (
        ("pct_copy_bw", "a same-size copy timed beside it"),
        ("pct_peak_flops", "the run's measured matmul rate"),
    ):
        if column in df:
            pct = df[column].map(lambda v: f"{v:.0f}" if pd.notna(v) else "")
            add(df[column] > 100, column + " " + pct + f"%: faster than {what}")
    key = [c for c in SAME if c in df]
    modes = df[_ok(df)].pivot_table(index=key, columns="mode", values="p50_ms", aggfunc="first")
    if {"forward", "forward+backward"} <= set(modes.columns):
        bad = modes[modes["forward+backward"] < modes["forward"]].index
        inverted = df.set_index(key).index.isin(bad) & df["mode"].isin(
            ["forward", "forward+backward"]
        )
        add(pd.Series(inverted, index=df.index), "forward+backward faster than forward")
    return pd.Series(why, index=df.index, dtype=object)


def speedup_suspect(df: pd.DataFrame) -> pd.Series:
    """A speedup whose row or whose baseline row (same point, mode, device, run) is suspect."""
    if "suspect" not in df or "base_suspect" not in df:
        return pd.Series(False, index=df.index)
    return (df["suspect"] != "") | df["base_suspect"].eq(True)  # no baseline row (NaN): False
