"""convert(): adapter registry, report and atomic output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dgn.data import ADAPTERS, convert, read_problems
from dgn.data.adapters import get_adapter
from dgn.errors import DataError, DgnUserError

FEVER = Path(__file__).parent / "fixtures" / "fever"


def test_registry_names() -> None:
    assert set(ADAPTERS) == {"fever", "fm2", "wice", "climate-fever"}
    with pytest.raises(
        DgnUserError,
        match="unknown data format 'fm3'; known formats: climate-fever, fever, fm2, wice",
    ):
        get_adapter("fm3")


def test_convert_fm2_to_gzip(fm2_dev: Path, tmp_path: Path) -> None:
    out = tmp_path / "fm2-dev.jsonl.gz"
    report = convert("fm2", fm2_dev, out, seed=3)
    assert report.written == 1169 and report.skipped == 0
    problems = list(read_problems(out))
    assert len(problems) == 1169 and problems[0].meta["original_index"]
    again = tmp_path / "again.jsonl.gz"
    convert("fm2", fm2_dev, again, seed=3)
    assert again.read_bytes() == out.read_bytes()  # byte-identical, deterministic


def test_convert_wice_and_climate_fever(
    wice_dev: Path, climate_fever_file: Path, tmp_path: Path
) -> None:
    report = convert("wice", wice_dev, tmp_path / "w.jsonl")
    assert report.written == 349 and report.dropped["empty gold set"] == 43
    assert "dropped 43" in report.summary()
    report = convert("climate-fever", climate_fever_file, tmp_path / "c.jsonl")
    assert report.written == 1535
    assert all(p.relevance is not None for p in read_problems(tmp_path / "c.jsonl"))


def test_convert_fever(tmp_path: Path) -> None:
    out = tmp_path / "fever.jsonl"
    report = convert(
        "fever", FEVER / "train.jsonl", out, wiki=FEVER / "wiki-pages", wiki_db=tmp_path / "w.db"
    )
    assert (report.written, report.skipped) == (7, 3)
    assert report.summary().startswith("written 7, skipped 3 (NEI (no evidence pages): 2")
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines][:2] == ["75397", "150448"]
    assert all(len(x["meta"]["sentence_ids"]) == len(x["candidates"]) for x in lines)


def test_convert_option_errors(tmp_path: Path) -> None:
    with pytest.raises(DgnUserError, match="only used by the 'fever' format"):
        convert("fm2", "in.jsonl", tmp_path / "o.jsonl", wiki=FEVER / "wiki-pages")
    with pytest.raises(DgnUserError, match="bad option for format 'fm2'"):
        convert("fm2", "in.jsonl", tmp_path / "o.jsonl", colour="red")
    with pytest.raises(DgnUserError, match="wiki-pages"):
        convert("fever", FEVER / "train.jsonl", tmp_path / "o.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_convert_failure_keeps_old_output(tmp_path: Path) -> None:
    src = tmp_path / "cf.jsonl"
    good = {
        "claim_id": "1",
        "claim": "c",
        "evidences": [{"evidence": "e", "evidence_label": "SUPPORTS", "votes": ["SUPPORTS"]}],
    }
    src.write_text(
        json.dumps(good) + "\n" + json.dumps(dict(good, claim_id="2", claim=None)) + "\n"
    )
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    with pytest.raises(DataError, match=r"cf\.jsonl:2: field 'claim'"):
        convert("climate-fever", src, out)
    assert out.read_text() == "previous\n"
    with pytest.raises(DataError, match="cannot read file"):
        convert("climate-fever", tmp_path / "missing.jsonl", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cf.jsonl", "out.jsonl"]
    bad = dict(good, evidences=[{"evidence": "e", "votes": []}])
    src.write_text(json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"cf\.jsonl:1: field 'evidences\[0\]\.evidence_label'"):
        convert("climate-fever", src, out)
