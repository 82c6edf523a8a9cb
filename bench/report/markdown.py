"""report.md from merged rows (bench/report/rows.py): the environment, the marks, the
precision line, a table per case, mode and dtype, the suspect figures, the rows not ok, and the
tutorial's own timing beside proper timing."""

from __future__ import annotations

import pandas as pd

from bench.report import flags, models, serving, share
from bench.report.devices import devices
from bench.report.headline import headline
from bench.report.rows import SHAPE, knobs
from bench.results import CONTENDED_CORES, MODES
from bench.tables import markdown_table


def cell(row) -> str:
    """The median with its marks (`!` suspect, `#` contended, `t` throttled, `i` interpreted,
    `~` uncertain) and its speedup (`!` when it rests on a suspect row); an unchecked row's
    median behind `?`, with no speedup."""
    if row["status"] == "unchecked" and pd.notna(row.get("p50_ms")):
        return f"?{row['p50_ms']:.3g}"
    if row["status"] != "ok":
        return row["status"]
    marks = ("!" if row.get("suspect") else "") + ("#" if row.get("contended") else "")
    marks += "t" if bool(row.get("throttled", False)) else ""
    marks += "i" if bool(row.get("interpreted", False)) else ""
    text = marks + ("~" if row.get("uncertain") else "") + f"{row['p50_ms']:.3g}"
    if pd.notna(row.get("speedup")):
        text += f" ({'!' if row.get('speedup_suspect') else ''}{row['speedup']:.2f}x)"
    return text


def precision(df: pd.DataFrame) -> list[str]:
    """One line on how well the ok rows' medians are known: the larger half of each one's 95%
    interval (p50_ci_lo_ms, p50_ci_hi_ms) relative to it. [] for runs without the columns."""
    ok = df[df["status"] == "ok"]
    if "p50_ci_lo_ms" not in ok or ok["p50_ci_lo_ms"].isna().all():
        return []
    ok = ok[ok["p50_ci_lo_ms"].notna()]
    half = (
        pd.concat(
            [ok["p50_ms"] - ok["p50_ci_lo_ms"], ok["p50_ci_hi_ms"] - ok["p50_ms"]], axis=1
        ).max(axis=1)
        / ok["p50_ms"]
    )
    return [
        f"Precision: the median's 95% interval is within +-2% of it for {(half <= 0.02).sum()} "
        f"of {len(half)} ok rows and within +-5% for {(half <= 0.05).sum()}; its larger "
        f"half-width is {100 * half.median():.1f}% at the median row (assuming independent "
        "samples; run-to-run differences can be larger).",
        "",
    ]


def _threads(df: pd.DataFrame) -> str:
    """What the rows ran on, from the rows (their `threads` column), not the configuration."""
    threads = sorted({int(t) for t in df.get("threads", pd.Series(dtype=float)).dropna()})
    if not threads:
        return "threads not recorded"
    span = str(threads[0]) if len(threads) == 1 else f"{threads[0]}-{threads[-1]}"
    return f"rows timed on {span} thread{'s' if threads[-1] > 1 else ''}"


def _calibration_notes(env: dict) -> list[str]:
    """The calibration's notes (an emulated dtype) of a run and of its resumes."""
    return [*env.get("calibration_notes", []), *(
        n for r in env.get("resumes", []) for n in r.get("calibration_notes", [])
    )]  # fmt: skip


def markdown(df: pd.DataFrame, envs: list[dict]) -> str:
    """df: rows with `speedup` and `cell` (see build)."""
    df = df.assign(column=df["impl"] + " @ " + df["device"])
    lines = ["# posenc-bench report", ""]
    where = [
        f"- {env.get('gpu') or env.get('cpu')}: torch {env.get('torch')}, triton "
        f"{env.get('triton')}, git {str(env.get('git_sha'))[:10]}"
        for env in envs
    ]
    lines += list(dict.fromkeys(where))  # a multirun's jobs share one line
    lines += [f"- {_threads(df)}"]
    notes = [n for env in envs for n in _calibration_notes(env)]
    lines += [f"- {note}" for note in dict.fromkeys(notes)]
    runs = df.attrs.get("runs", [])
    if len(runs) > 1:
        lines += ["", f"Merged from {len(runs)} runs: " + ", ".join(f"`{r}`" for r in runs) + "."]
    lines += ["", *headline(df), *devices(df)]
    ok = int((df["status"] == "ok").sum())
    lines += [
        "## Tables",
        "",
        "Cells: median ms per call (speedup vs the baseline on the same device, timed side by",
        "side in the same run: transformers' own code (`hf`) where it ran, else the case's",
        "baseline implementation); non-ok cells show the status",
        "(see results.csv for the message). Marks:",
        f"`~` uncertain ({int(df['uncertain'].sum())} of {ok} ok cells): the median's 95% "
        f"interval is wider than +-{100 * flags.UNCERTAIN_CI:.0f}%;",
        f"`#` contended ({int(df['contended'].sum())} of {ok}): other processes took over "
        f"{CONTENDED_CORES} of a core while it was timed{_busiest(df)};",
        f"`!` suspect ({int((df['suspect'] != '').sum())} of {ok}): physically impossible as "
        'measured ("Suspect figures" below says why); a speedup on a suspect row is marked '
        "too and is not a result.",
    ]
    if (df["status"] == "unchecked").any():
        lines += [
            f"`?` unchecked ({int((df['status'] == 'unchecked').sum())} rows): timed, but its "
            "float64 truth could not be computed (out of memory, say), so not verified: no "
            "speedup, and listed under 'Rows not ok'.",
        ]
    if "throttled" in df and df["throttled"].any():
        held = sorted({r for v in df.loc[df["throttled"], "gpu_held"] for r in str(v).split(",")})
        lines += [
            f"`t` throttled ({int(df['throttled'].sum())} of {ok}): NVML said the GPU held its "
            f"clocks down while it was timed ({', '.join(held)}; results.csv's gpu_held): "
            "slower than the same GPU free.",
        ]
    if "interpreted" in df and df["interpreted"].any():
        lines += [
            f"`i` interpreted ({int(df['interpreted'].sum())} of {ok}): a Triton kernel run by "
            "Triton's interpreter on a CPU; its time checks the plumbing and is not the "
            "kernel's speed, nor is its speedup.",
        ]
    lines += [""]
    if "pct_peak_bw" in df and (df["pct_peak_bw"] > 100).any():
        lines += [
            f"{int((df['pct_peak_bw'] > 100).sum())} ok rows pass the run's calibrated copy "
            "bandwidth (pct_peak_bw over 100%): that copy moves 64 MiB (CPU) or 1 GiB (CUDA) "
            "through memory, and these rows' bytes fit in the caches; pct_copy_bw compares "
            "each row with a copy of its own size, timed beside it.",
            "",
        ]
    dup = df.attrs.get("duplicates", 0)
    if dup:
        lines += [
            f"{dup} rows were measured more than once (re-runs, or the same point in "
            "several runs): each cell shows the latest; merged.csv has them all.",
            "",
        ]
    lines += precision(df)
    lines += tutorial_table(df)
    order = {name: i for i, name in enumerate(dict.fromkeys(df["case"]))}  # as measured
    groups = df.groupby(["case", "mode", "dtype"], sort=False)
    keys = sorted(groups.groups, key=lambda k: (order.get(k[0], 99), MODES.index(k[1]), k[2]))
    for case, mode, dtype in keys:
        group = groups.get_group((case, mode, dtype))
        # Columns where nothing ran (e.g. CUDA-only impls on a CPU) are left to "Rows not ok".
        group = group[group.groupby("column")["status"].transform(lambda s: (s != "skipped").any())]
        if group.empty:
            continue
        table = group.pivot_table(index=SHAPE, columns="column", values="cell", aggfunc="first")
        lines += [f"## {case} / {mode} / {dtype}", "", _to_markdown(table), ""]
    lines += share.section(df)
    lines += models.section(df)
    lines += serving.section(df)
    lines += wall_table(df) + suspect_table(df) + not_ok_table(df)
    return "\n".join(lines) + "\n"


def wall_table(df: pd.DataFrame) -> list[str]:
    """CUDA rows' GPU time beside what a caller that waits for each call pays (wall_ms): where
    the host's launch work, not the GPU, sets the pace."""
    if "wall_ms" not in df:
        return []
    rows = df[(df["status"] == "ok") & df["wall_ms"].notna() & df["p50_ms"].notna()]
    if rows.empty:
        return []
    header = ["case", "impl", "mode", "knobs", "shape", "GPU ms (p50)", "wall ms", "wall / GPU"]
    body = [
        [r["case"], r["impl"], r["mode"], knobs(r["params"]),
         f"B={r['batch']} L={r['seq_len']}", f"{r['p50_ms']:.3g}", f"{r['wall_ms']:.3g}",
         f"{r['wall_ms'] / r['p50_ms']:.2f}"]
        for _, r in rows.iterrows()
    ]  # fmt: skip
    intro = (
        "GPU time (CUDA events, the call queued behind a spin: what the GPU works) beside the "
        "wall time of the call with one sync after it (what a caller that waits for each call "
        "pays, the host's launch work included); a ratio well above 1: host-bound."
    )
    return ["## Host-inclusive time (CUDA)", "", intro, "", *markdown_table(header, body), ""]


def _busiest(df: pd.DataFrame) -> str:
    if "others_cpu" not in df or df["others_cpu"].isna().all():
        return ""
    return f" (the most: {df['others_cpu'].max():.2f} cores)"


def _shapes(g: pd.DataFrame) -> str:
    """The shapes of a set of rows, compactly: B=1,8 L=128..1024 (4) d=256 H=4."""
    parts = []
    for col, name in (("batch", "B"), ("seq_len", "L"), ("d_model", "d"), ("num_heads", "H")):
        values = sorted(set(g[col]))
        if len(values) <= 3:
            parts.append(f"{name}={','.join(map(str, values))}")
        else:
            parts.append(f"{name}={values[0]}..{values[-1]} ({len(values)})")
    return " ".join(parts)


def suspect_table(df: pd.DataFrame) -> list[str]:
    bad = df[df["suspect"] != ""]
    if bad.empty:
        return []
    header = ["case", "impl", "mode", "device", "shape", "knobs", "ms", "why"]
    rows = [
        [
            r["case"],
            r["impl"],
            r["mode"],
            r["device"],
            _shapes(pd.DataFrame([r])),
            knobs(r["params"]),
            f"{r['p50_ms']:.3g}",
            r["suspect"],
        ]
        for _, r in bad.iterrows()
    ]
    intro = "Not results: each is faster than physics allows as measured (bench/report/flags.py)."
    return ["## Suspect figures", "", intro, "", *markdown_table(header, rows), ""]


def not_ok_table(df: pd.DataFrame) -> list[str]:
    """Rows not ok, one line per (case, impl, mode, device, knobs, status, message), with how
    many rows and which shapes share it."""
    bad = df[df["status"] != "ok"]
    message = (
        bad["message"].astype(object).where(bad["message"].notna(), "")
        if ("message" in bad)
        else ""
    )
    bad = bad.assign(knobs=bad["params"].map(knobs), message=message)
    if bad.empty:
        return []
    header = ["case", "impl", "mode", "device", "knobs", "rows", "shapes", "status", "message"]
    key = ["case", "impl", "mode", "device", "knobs", "status", "message"]
    rows = [
        [case, impl, mode, device, knob, len(g), _shapes(g), status, msg]
        for (case, impl, mode, device, knob, status, msg), g in bad.groupby(key, sort=False)
    ]
    return ["## Rows not ok", "", *markdown_table(header, rows)]


def tutorial_table(df: pd.DataFrame) -> list[str]:
    """Section 5.2's numbers as the tutorial measures them, next to proper timing (if any)."""
    if "tutorial_ms_per_100" not in df or df["tutorial_ms_per_100"].isna().all():
        return []
    rows = df[df["tutorial_ms_per_100"].notna() | (df["mode"] == "forward")]
    rows = rows[rows["case"].isin(df.loc[df["tutorial_ms_per_100"].notna(), "case"])]
    order = {"seed": 0, "reference": 1}  # the tutorial's code first, then the corrected ones
    rows = rows.sort_values("impl", key=lambda s: s.map(order).fillna(2), kind="stable")
    cases = list(dict.fromkeys(df["case"]))  # in the order the run measured them
    rows = rows.sort_values("case", key=lambda s: s.map(cases.index), kind="stable")
    lines = [
        "## Section 5.2: the tutorial's timing and proper timing",
        "",
        "`tutorial ms / 100 calls`: wall clock around 100 calls, no warm-up, no sync, as in the",
        "tutorial. `p50 ms per call [p20, p80]`: warm-up, one timed sample per call.",
        "",
    ]
    header = [
        "case",
        "impl",
        "device",
        "shape",
        "tutorial ms / 100 calls",
        "p50 ms per call [p20, p80]",
        "x 100",
        "speedup vs seed",
        "status",
    ]
    body = []
    for _, r in rows.iterrows():
        seed = rows[
            (rows["case"] == r["case"]) & (rows["impl"] == "seed") & (rows["device"] == r["device"])
        ]["p50_ms"]
        shape = f"B={r['batch']} L={r['seq_len']} d={r['d_model']}"
        tut = "" if pd.isna(r["tutorial_ms_per_100"]) else f"{r['tutorial_ms_per_100']:.1f}"
        if r["status"] != "ok":
            body.append([r["case"], r["impl"], r["device"], shape, tut, "", "", "", r["status"]])
            continue
        speed = f"{seed.iloc[0] / r['p50_ms']:.1f}x" if len(seed) and seed.notna().all() else ""
        timed = f"{r['p50_ms']:.3f} [{r['p20_ms']:.3f}, {r['p80_ms']:.3f}]"
        body.append(
            [
                r["case"],
                r["impl"],
                r["device"],
                shape,
                tut,
                timed,
                f"{100 * r['p50_ms']:.1f}",
                speed,
                "ok",
            ]
        )
    return [*lines, *markdown_table(header, body), ""]


def _to_markdown(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    body = [
        [*idx[:-1], knobs(idx[-1]), *("" if pd.isna(row[c]) else row[c] for c in cols)]
        for idx, row in table.iterrows()
    ]
    return "\n".join(markdown_table(["B", "L", "d_model", "H", "knobs", *cols], body))
