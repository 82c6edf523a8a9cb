"""The pages' figures are their committed rows: each figure tools/figures/ writes is quoted in
its page (README.md, docs/kernels.md's tables) as written, no other measured number is in
the README, and its test count comes from a record that only a whole, passing `make test` on a
committed tree may write."""

import json
import re

import pytest

from tools import figures
from tools.figures import readme, sources
from tools.figures import record as recorder

README = figures.README.read_text()


@pytest.mark.parametrize(
    "page, name", [(page, name) for page, names in figures.PAGES.items() for name in names]
)
def test_each_page_quotes_each_figure_as_its_rows_give_it(page, name):
    text = (figures.ROOT / page).read_text()
    assert name not in figures.misquoted(text, page), figures.PAGES[page][name]()


@pytest.mark.parametrize("quoted", sorted(readme.README_SETTINGS))
def test_each_setting_the_readme_states_is_the_code_s(quoted):
    assert figures.flat(quoted) in figures.flat(README)
    assert readme.README_SETTINGS[quoted]() == quoted


def test_every_page_is_held_to_its_rows():
    """README.md and every page of docs/: a new page is written from rows from its first day."""
    pages = {"README.md", *(f"docs/{p.name}" for p in (figures.ROOT / "docs").glob("*.md"))}
    assert set(figures.WHOLE) == pages


@pytest.mark.parametrize("page", sorted(figures.WHOLE))
def test_no_other_measured_figure_is_in_the_page(page):
    loose = figures.loose((figures.ROOT / page).read_text(), page)
    assert not loose, f"{page} quotes {loose} without a row behind it (tools/figures/)"


def test_a_figure_that_drifts_from_its_rows_is_caught():
    """The checks can fail: a figure changed in the text, and one written loose."""
    drifted = README.replace(readme.probe_run(), readme.probe_run().replace(" s)", "1 s)"))
    assert figures.misquoted(drifted) == ["probe_run"]
    assert figures.loose(README + "\nThe kernel is 1.7x faster.\n") == ["1.7x"]


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
    assert figures.loose(text + "\nThe kernel is 1.7x faster.\n", page) == ["1.7x"]


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
