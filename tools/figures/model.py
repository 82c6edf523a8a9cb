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


def _kernel_change(kernel: str, family: str, label: str) -> str:
    """One kernel at the newest run's point of a family (not causal): the model for the
    kernels that run measured, and for now's."""
    points, p = fit.fitted()
    newest = points[points["run"] == points["run"].max()]
    pt = newest[(newest["family"] == family) & ~newest["causal"]].iloc[0]
    point = dict(pt, k=fit.clip(pt))
    ms = []
    for commit in (pt["commit"], fit.now_commit()):
        rows = fit.audit_rows(commit)
        at = (rows["kernel"] == model.KERNELS[kernel]) & (rows["family"] == family)
        row = rows[at & (rows["causal"].astype(str) == "False")].iloc[0]
        ms.append(model.kernel_cycles(row, point, p.alpha, p.overhead) / p.hz * 1e3)
    shape = f"B={pt['batch']}, H={pt['heads']}, L={pt['seq_len']}"
    return f"{label} at {shape} {ms[0]:.1f} -> {ms[1]:.1f} ms"


def model_dkdv() -> str:
    """T5's dk/dv: the 4-warp tiles' gain."""
    return _kernel_change("dkdv", "t5", "T5's dk/dv")


def model_alibi_dkdv() -> str:
    """ALiBi's dk/dv: its 64 x 64 tile's gain (with the 4-warp tiles before it)."""
    return _kernel_change("dkdv", "alibi", "ALiBi's dk/dv")


def model_dq() -> str:
    """ALiBi's dq: FlexAttention's dq tile's gain."""
    return _kernel_change("dq", "alibi", "ALiBi's dq")


def model_flex() -> str:
    """ALiBi's forward and backward: the newest run's FlexAttention against the model now."""
    points, p = fit.fitted()
    newest = points[points["run"] == points["run"].max()]
    at = newest[(newest["family"] == "alibi") & (newest["mode"] == "forward+backward")]
    at = at[~at["causal"]].head(1)
    rows = fit.audit_rows(fit.now_commit())
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
    "model_alibi_dkdv": model_alibi_dkdv,
    "model_dq": model_dq,
    "model_flex": model_flex,
}
