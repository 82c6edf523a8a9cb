"""The pages' figures are their committed rows: each figure tools/figures/ writes is quoted in
its page (README.md, docs/kernels.md's tables) as written, no other measured number is in
the README, and its test count comes from a record that only a whole, passing `make test` on a
committed tree may write."""

import inspect
import json
import re

import pytest

from bench.probe.report import reciprocal_rank
from bench.run.check import FACTOR
from bench.run.samples import Timing
from tools import figures
from tools.figures import readme, sources
from tools.figures import record as recorder

README = figures.README.read_text()

# Numbers the README states that are settings, not measurements: each as the code or the
# run's configuration gives it.
SETTINGS = {
    "at most 3x the reference's own": lambda: f"at most {FACTOR:g}x the reference's own",
    "with its 95% interval": lambda: (
        f"with its {inspect.signature(Timing.median_ci).parameters['level'].default:.0%} interval"
    ),
    "medians come with their 95% interval": lambda: (
        "medians come with their "
        f"{inspect.signature(Timing.median_ci).parameters['level'].default:.0%} interval"
    ),
    "(decode: 8 rows": lambda: f"(decode: {_decode_batch()} rows",
    "RoPE falls by 8x": lambda: f"RoPE falls by {_probe_factor()}x",
    "Ranked at 2x": lambda: (
        f"Ranked at {inspect.signature(reciprocal_rank).parameters['factor'].default}x"
    ),
}
# A measured figure: a percentage, a time, a ratio, an accuracy, a count of rows or of cases
FIGURE = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?: ?%| ?ms\b| ?min\b| minutes\b| ?s\b|x\b)|\b\d+:\d\d\b"
    r"|(?<![\w.])[01]\.\d\d\b|\b\d+ rows\b|\b\d+ of \d+\b"
)


def _decode_batch() -> int:
    df = readme._rows(readme.LAYER)
    return int(df.loc[df["case"].str.endswith("_decode"), "batch"].max())


def _probe_factor() -> int:
    df = readme._rows_probe(readme.PROBE)
    return int(df["eval_len"].max() // df["train_len"].min())


@pytest.mark.parametrize(
    "page, name", [(page, name) for page, names in figures.PAGES.items() for name in names]
)
def test_each_page_quotes_each_figure_as_its_rows_give_it(page, name):
    text = (figures.ROOT / page).read_text()
    assert name not in figures.misquoted(text, page), figures.PAGES[page][name]()


@pytest.mark.parametrize("quoted", sorted(SETTINGS))
def test_each_setting_the_readme_states_is_the_code_s(quoted):
    assert figures.flat(quoted) in figures.flat(README)
    assert SETTINGS[quoted]() == quoted


def _loose(text: str, page: str = "README.md") -> list[str]:
    """The figure-like numbers of `text` (page's contents, its Python examples aside) that
    neither a figure of the page nor a setting it states covers."""
    text = re.sub(r"```python.*?```", " ", text, flags=re.S)
    for name in figures.ELSEWHERE.get(page, ()):
        text = re.sub(f"<!-- {name}: begin -->.*?<!-- {name}: end -->", " ", text, flags=re.S)
    text = figures.flat(text)
    covered = [False] * len(text)
    quoted = list(figures.written(page).values())
    settings = [*figures.WHOLE[page], *(SETTINGS if page == "README.md" else ())]
    for q in quoted + [figures.flat(s) for s in settings]:
        for m in re.finditer(re.escape(q), text):
            covered[m.start() : m.end()] = [True] * (m.end() - m.start())
    return [m.group() for m in FIGURE.finditer(text) if not all(covered[m.start() : m.end()])]


def test_every_page_is_held_to_its_rows():
    """README.md and every page of docs/: a new page is written from rows from its first day."""
    pages = {"README.md", *(f"docs/{p.name}" for p in (figures.ROOT / "docs").glob("*.md"))}
    assert set(figures.WHOLE) == pages


@pytest.mark.parametrize("page", sorted(figures.WHOLE))
def test_no_other_measured_figure_is_in_the_page(page):
    loose = _loose((figures.ROOT / page).read_text(), page)
    assert not loose, f"{page} quotes {loose} without a row behind it (tools/figures/)"


def test_a_figure_that_drifts_from_its_rows_is_caught():
    """The checks can fail: a figure changed in the text, and one written loose."""
    drifted = README.replace(readme.probe_run(), readme.probe_run().replace(" s)", "1 s)"))
    assert figures.misquoted(drifted) == ["probe_run"]
    assert _loose(README + "\nThe kernel is 1.7x faster.\n") == ["1.7x"]


@pytest.mark.parametrize("page", sorted(p for p in figures.WHOLE if figures.PAGES[p]))
def test_a_docs_page_that_drifts_from_its_rows_is_caught(page):
    """Each docs page: its first figure with one digit changed is misquoted, and a number
    written loose is caught."""
    text = (figures.ROOT / page).read_text()
    name, figure = next(iter(figures.PAGES[page].items()))
    quoted = figures.flat(figure())
    digit = re.search(r"\d", quoted)
    drifted = quoted[: digit.start()] + str((int(digit.group()) + 1) % 10) + quoted[digit.end() :]
    assert name in figures.misquoted(figures.flat(text).replace(quoted, drifted), page)
    assert _loose(text + "\nThe kernel is 1.7x faster.\n", page) == ["1.7x"]


def test_a_probe_figure_reads_one_cell_or_says_why():
    """A placeholder that would read several lines' rows as one, or no row, is an error."""
    from tools.figures import probe

    assert probe._fill(probe.P, "{m:nope/copy/1}") == probe._value(probe.P, "m", "nope", "copy", 1)
    with pytest.raises(LookupError, match="one line"):
        probe._fill(probe.P, "{m:nope,alibi/copy/1}")
    with pytest.raises(LookupError, match="no rows"):
        probe._fill(probe.P, "{m:nope/copy/3}")


RUN = {
    "commit": "abc1234",
    "dirty": False,
    "passed": 1800,
    "failed": 0,
    "exitstatus": 0,
    "seconds": 390,
    "cores": 2,
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
    "whole_suite": True,
}


@pytest.mark.parametrize(
    "change, why",
    [
        ({"whole_suite": False}, "not recorded: it did not run the whole suite as make test does"),
        ({"failed": 2}, "not recorded: 2 tests failed"),
        ({"dirty": True}, "not recorded: its tree had uncommitted changes"),
    ],
)
def test_only_a_whole_passing_run_on_a_committed_tree_is_recorded(
    tmp_path, monkeypatch, change, why
):
    last, record = tmp_path / "run", tmp_path / "tests.json"
    monkeypatch.setattr(recorder, "LAST_RUN", last)
    monkeypatch.setattr(sources, "TESTS", record)
    monkeypatch.setattr(sources, "ROOT", tmp_path)
    assert recorder.record_tests().startswith("no record of a test run")
    last.write_text(json.dumps(dict(RUN, **change)))
    assert recorder.record_tests() == why and not record.exists()
    last.write_text(json.dumps(RUN))
    assert recorder.record_tests() == "recorded tests.json: 1800 in 6:30 on 2 cores at abc1234"
    assert json.loads(record.read_text())["passed"] == 1800


def test_the_record_knows_a_whole_suite_from_a_part(tmp_path):
    """make test's selection is whole; a path, a test id, -k or other marks are parts."""
    from types import SimpleNamespace

    from tests._record import MAKE_TEST_MARKS, _whole_suite

    (tmp_path / "tests").mkdir()

    def config(args, **option):
        opts = dict(keyword="", markexpr=MAKE_TEST_MARKS, deselect=None, lf=False) | option
        return SimpleNamespace(
            args=args,
            rootpath=tmp_path,
            invocation_params=SimpleNamespace(dir=tmp_path),
            option=SimpleNamespace(**opts),
        )

    assert _whole_suite(config(["tests"])) and _whole_suite(config([]))
    assert not _whole_suite(config(["tests/test_readme.py"]))
    assert not _whole_suite(config(["tests/test_readme.py::test_links_and_paths_exist"]))
    assert not _whole_suite(config(["tests"], keyword="readme"))
    assert not _whole_suite(config(["tests"], markexpr=""))
    assert not _whole_suite(config(["tests"], lf=True))
