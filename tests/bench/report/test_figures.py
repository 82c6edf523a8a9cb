"""Plots that read at a glance: every plot kind, drawn from committed runs with the longest
labels the cases produce (the serving cases' knobs, the layer share, the models' panels,
single-length panels, a CPU-vs-CUDA comparison, the probe), keeps each text inside its figure
with no two titles overlapping, and every committed PNG has a white margin (no dark pixel
within 3 px of an edge)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from bench.probe import report as probe_report
from bench.report import models, plots, rows, share

ROOT = Path(__file__).parents[3]
REFERENCE = ROOT / "results" / "reference"


@pytest.fixture
def figures(monkeypatch):
    """The figures the report draws, checked before they are saved (saved all the same)."""
    drawn = []

    def keep(fig, path, dpi=100):
        fig.canvas.draw()
        _check(Path(path).name, fig)  # as drawn, before saving redraws it at its own dpi
        drawn.append(Path(path).name)
        fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.15)

    for module in (plots, share, models, probe_report):
        monkeypatch.setattr(module, "save", keep)
    return drawn


def _check(name: str, fig) -> None:
    renderer = fig.canvas.get_renderer()
    drawn = fig.get_tightbbox(renderer)  # inches, around every artist drawn (ticks in view)
    frame = fig.bbox_inches
    inside = (
        drawn.x0 >= frame.x0 - 0.01
        and drawn.y0 >= frame.y0 - 0.01
        and drawn.x1 <= frame.x1 + 0.01
        and drawn.y1 <= frame.y1 + 0.01
    )
    assert inside, f"{name}: drawn {drawn} past the figure {frame}"
    canvas = fig.bbox
    named = [ax.title for ax in fig.axes] + [ax.xaxis.label for ax in fig.axes]
    named += [ax.yaxis.label for ax in fig.axes] + [fig._suptitle] * (fig._suptitle is not None)
    for t in (t for t in named if t.get_text().strip()):
        box = t.get_window_extent(renderer)
        assert box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1, f"{name}: {t.get_text()!r}"
        assert box.y0 >= canvas.y0 - 1 and box.y1 <= canvas.y1 + 1, f"{name}: {t.get_text()!r}"
    titles = [ax.title for ax in fig.axes if ax.title.get_text()]
    titles += [fig._suptitle] if fig._suptitle is not None else []
    for a, b in itertools.combinations(titles, 2):
        ea, eb = a.get_window_extent(renderer), b.get_window_extent(renderer)
        assert not ea.overlaps(eb), f"{name}: {a.get_text()[:40]!r} overlaps {b.get_text()[:40]!r}"
    sizes = [t.get_fontsize() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts]
    sizes += [t.get_fontsize() for leg in fig.legends for t in leg.texts]
    assert all(s >= 8 for s in sizes), f"{name}: legend text under 8 pt"


def _ok(run: str) -> pd.DataFrame:
    df = rows.speedups(rows.load([REFERENCE / run]))
    return df.assign(uncertain=False)[df["status"] == "ok"]


@pytest.mark.parametrize("run", ["serving-cpu", "multimodal-cpu"])
def test_every_plot_of_a_committed_run_fits_its_frame(tmp_path, figures, run):
    df = _ok(run)
    plots.write_all(df[df["mode"] == "forward"], tmp_path)  # serving's labels; single lengths
    assert len(figures) >= 2  # each checked as it was drawn


def test_the_layer_share_fits_its_frame(tmp_path, figures):
    share.plot(_ok("layer-cpu"), tmp_path)
    assert figures


def test_the_models_plot_fits_its_frame(tmp_path, figures):
    """Every preset's bars, three panels, the implementations' legend under them."""
    models.plot(_ok("models-cpu"), tmp_path)
    assert {"models_forward_float32.png", "models_forward_backward_float32.png"} <= set(figures)


def test_cpu_against_cuda_and_the_probe_fit_their_frames(tmp_path, figures):
    df = _ok("serving-cpu")
    df = df[df["case"].isin(["rope_cache", "alibi_paged"])]  # the longest labels, two cases
    cuda = df.assign(device="cuda", device_name="gpu", p50_ms=df["p50_ms"] / 7)
    plots.write_all(pd.concat([df, cuda], ignore_index=True), tmp_path)
    assert any(name.startswith("cpu_vs_cuda") for name in figures)
    probe_report.plot(probe_report.load(REFERENCE / "probe-modern"), tmp_path / "probe.png")
    assert "probe.png" in figures


def _committed_pngs() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.png"], cwd=ROOT, capture_output=True, text=True)
    return [ROOT / p for p in out.stdout.split()]


@pytest.mark.parametrize("png", _committed_pngs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_plots_have_a_white_margin(png):
    image = matplotlib.image.imread(png)[..., :3]
    luminance = image.mean(axis=-1)
    edges = (luminance[:3], luminance[-3:], luminance[:, :3], luminance[:, -3:])
    assert all((e > 0.6).all() for e in edges), f"{png.name}: dark pixels at its edge"
