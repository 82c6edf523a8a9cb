"""docs/kernels.md's time-model figures: the fit to the committed GPU runs and what it predicts
for the kernels of the one audit no run measured (tools/audit/fit.py)."""

from __future__ import annotations

from tools.audit import fit, model


def model_fit() -> str:
    points, p = fit.fitted()
    return fit.summary(points, p)


def model_table() -> str:
    points, p = fit.fitted()
    return fit.now_table(points, p, fit.now_commit())


def _kernel_cycles(commit: str, kernel: str, family: str, p: model.Params) -> float:
    rows = fit._audit_rows(commit)
    at = (rows["kernel"] == model.KERNELS[kernel]) & (rows["family"] == family)
    point = dict(family=family, seq_len=4096, batch=4, heads=16, causal=False)
    point["k"] = fit._k(dict(point, shaw_k=16))
    return model.kernel_cycles(rows[at & ~rows["causal"]].iloc[0], point, p.alpha, p.overhead)


def model_dkdv() -> str:
    """T5's dk/dv at the sweep's shape: the kernels the newest run measured, and now's."""
    points, p = fit.fitted()
    then = points.loc[points["run"] == points["run"].max(), "commit"].iloc[0]
    a, b = (_kernel_cycles(c, "dkdv", "t5", p) / p.hz * 1e3 for c in (then, fit.now_commit()))
    return f"T5's dk/dv at B=4, H=16, L=4096 {a:.1f} -> {b:.1f} ms"


def model_flex() -> str:
    """ALiBi's forward and backward: the newest run's FlexAttention against the model now."""
    points, p = fit.fitted()
    newest = points[points["run"] == points["run"].max()]
    at = newest[(newest["family"] == "alibi") & (newest["mode"] == "forward+backward")]
    at = at[~at["causal"]].head(1)
    rows = fit._audit_rows(fit.now_commit())
    ours = fit.predict(at, lambda pt: rows, p)[0]
    flex = fit.flex_seconds(at.iloc[0])
    return (
        f"FlexAttention's {flex * 1e3:.2f} ms measured against the model's {ours * 1e3:.2f} ms "
        f"({flex / ours:.2f}x)"
    )


MODEL_FIGURES = {
    "model_fit": model_fit,
    "model_table": model_table,
    "model_dkdv": model_dkdv,
    "model_flex": model_flex,
}
