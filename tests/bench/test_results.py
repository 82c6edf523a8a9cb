"""The results schema: one definition of a row (columns, identity, version), strict about keys,
and an older run (fewer columns) read and resumed with its rows kept, never refused or lost."""

import csv
import shutil
from pathlib import Path

import pytest

from bench.report import build as report
from bench.report import rows as report_rows
from bench.results import COLUMNS, KEY, RESULTS, SCHEMA_VERSION, ResultsWriter, Schema

ROOT = Path(__file__).resolve().parents[2]
OLDER = ROOT / "results" / "reference" / "decode-cpu" / "results.csv"  # a committed older run


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or ()), list(reader)


def _row(**extra) -> dict:
    return {"case": "toy", "impl": "a", "mode": "forward", "status": "ok", **extra}


def test_a_row_names_its_schema_version_and_a_misspelled_key_is_an_error(tmp_path):
    path = tmp_path / "results.csv"
    writer = ResultsWriter(path)
    writer.append(_row(p50_ms=1.5))
    with pytest.raises(KeyError, match="'p50_msec'"):
        writer.append(_row(impl="b", p50_msec=2.0))
    writer.close()
    header, rows = _read(path)
    assert tuple(header) == COLUMNS and len(rows) == 1  # the bad row wrote nothing
    assert rows[0]["schema_version"] == str(SCHEMA_VERSION) and rows[0]["p50_ms"] == "1.5"


def test_one_row_identity_for_resume_and_report():
    assert report_rows.KEY == KEY == RESULTS.key
    assert "device_name" in KEY  # the same point on another GPU is another row
    assert RESULTS.key_of({"case": "c", "batch": 2}) == ("c", *[""] * 5, "2", *[""] * 4)


def test_an_older_run_is_upgraded_in_place_with_its_rows_kept(tmp_path):
    old_header, old_rows = _read(OLDER)
    assert "schema_version" not in old_header and set(old_header) < set(COLUMNS)
    path = tmp_path / "results.csv"
    shutil.copy(OLDER, path)
    writer = ResultsWriter(path)
    assert writer.upgraded_from == tuple(old_header)
    assert len(writer.existing) == len({RESULTS.key_of(r) for r in old_rows})  # resumable
    writer.append(_row(p50_ms=1.0))
    writer.close()
    header, rows = _read(path)
    assert tuple(header) == COLUMNS and len(rows) == len(old_rows) + 1
    for old, new in zip(old_rows, rows, strict=False):
        assert {k: new[k] for k in old_header} == old  # every value kept, in order
        assert new["schema_version"] == "" and new["tokens_per_s"] == ""  # added: empty
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]  # no temporary left


def test_a_file_with_columns_the_schema_lacks_is_refused_by_name(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text(",".join(COLUMNS) + ",gpu_temp\n" + "x," * len(COLUMNS) + "x\n")
    before = path.read_text()
    with pytest.raises(ValueError, match="gpu_temp"):
        ResultsWriter(path)
    assert path.read_text() == before


def test_a_schema_without_a_version_writes_none():
    schema = Schema(("a", "b"), ("a",))
    assert schema.version is None and schema.upgradable_from(("a",))
    assert not schema.upgradable_from(("a", "c"))


def test_an_older_run_makes_a_report(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    shutil.copy(OLDER, run / "results.csv")
    df = report_rows.load([run])
    assert set(COLUMNS) <= set(df.columns) and df["schema_version"].isna().all()
    out = report.build([run], tmp_path / "report")
    text = (out / "report.md").read_text()
    assert "## alibi_decode / forward / float32" in text and "## Headline" in text
