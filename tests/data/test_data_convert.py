"""convert() and ``dgn data convert``: adapter registry, options, report and atomic output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dgn.data import ADAPTERS, convert, read_problems
from dgn.data.adapters import get_adapter
from dgn.errors import DataError, DgnUserError

FEVER = Path(__file__).parent / "fixtures" / "fever"
ERASER = Path(__file__).parent / "fixtures" / "eraser"
SCIFACT = Path(__file__).parent / "fixtures" / "scifact"
TASK2 = Path(__file__).parent / "fixtures" / "entailmentbank" / "task2.jsonl"


def test_registry_names() -> None:
    assert set(ADAPTERS) == {
        "fever", "fm2", "wice", "climate-fever", "eraser", "scifact", "entailmentbank",
    }
    with pytest.raises(
        DgnUserError,
        match="unknown data format 'fm3'; known formats: climate-fever, entailmentbank, eraser, "
        "fever, fm2, scifact, wice",
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


# ---- formats with documents beside them: docs=, strict= and --docs, --strict ------------


def test_convert_passes_docs_and_strict(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    report = convert("eraser", ERASER / "fever" / "val.jsonl", out, docs=ERASER / "fever" / "docs.jsonl")
    assert (report.written, report.skipped) == (3, 3)
    assert [p.id for p in read_problems(out)] == ["101", "102", "104"]
    out.write_text("previous\n")
    with pytest.raises(DataError, match="document 'Penélope_Cruz' not found"):
        convert("eraser", ERASER / "fever" / "val.jsonl", out, strict=True)
    assert out.read_text() == "previous\n"
    # SciFact's corpus goes through the same keyword
    shutil.copy(SCIFACT / "claims.jsonl", tmp_path / "claims.jsonl")
    report = convert("scifact", tmp_path / "claims.jsonl", out, docs=SCIFACT / "corpus.jsonl")
    assert (report.written, report.skipped) == (3, 1)
    report = convert("entailmentbank", TASK2, out)
    assert report.summary() == "written 3, skipped 0; noted 1 (repeated id made unique: 1)"
    report = convert("eraser", ERASER / "multirc" / "val.jsonl", out, multirc=False)
    assert report.written == 4


def test_convert_refuses_docs_and_strict_elsewhere(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    with pytest.raises(DgnUserError, match="only used by the 'eraser' and 'scifact' formats, not 'fm2'"):
        convert("fm2", "in.jsonl", out, docs=tmp_path)
    with pytest.raises(DgnUserError, match="strict= is only used by the 'eraser' format, not 'scifact'"):
        convert("scifact", SCIFACT / "claims.jsonl", out, strict=True)
    with pytest.raises(DgnUserError, match="bad option for format 'entailmentbank'"):
        convert("entailmentbank", TASK2, out, corpus=tmp_path)
    assert list(tmp_path.iterdir()) == []


def _cli(args: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from dgn.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_convert_eraser_scifact_entailmentbank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    val = ERASER / "fever" / "val.jsonl"
    out = tmp_path / "fever.jsonl"
    code, stdout, err = _cli(["data", "convert", "--format", "eraser", "--input", val, "--output", out], capsys)
    assert (code, err) == (0, "")
    assert stdout == (
        f"{out}: written 3, skipped 3 (document missing: 1, evidence spans several documents: 1, "
        "no evidence: 1)\n"
    )
    code, stdout, err = _cli(["data", "convert", "--format", "eraser", "--input", val, "--output", out,
                              "--docs", ERASER / "fever" / "docs.jsonl", "--seed", "1"], capsys)
    assert code == 0 and "written 3, skipped 3" in stdout
    assert [p.meta["docid"] for p in read_problems(out)] == ["Paris", "Paris", "Berlin"]
    before = out.read_bytes()
    code, stdout, err = _cli(["data", "convert", "--format", "eraser", "--input", val, "--output", out,
                              "--strict"], capsys)
    assert code == 2 and stdout == ""
    assert err == (
        f"dgn data convert: error: {val}:3: field 'evidences[0][0].docid': document 'Penélope_Cruz' not "
        f"found in {ERASER / 'fever' / 'docs'}\n"
    )
    assert out.read_bytes() == before  # the old output stays
    shutil.copy(SCIFACT / "claims.jsonl", tmp_path / "claims.jsonl")
    code, stdout, err = _cli(["data", "convert", "--format", "scifact", "--input", tmp_path / "claims.jsonl",
                              "--output", tmp_path / "sf.jsonl", "--docs", SCIFACT / "corpus.jsonl"], capsys)
    assert (code, err) == (0, "") and "written 3, skipped 1 (no evidence: 1)" in stdout
    code, stdout, err = _cli(["data", "convert", "--format", "entailmentbank", "--input", TASK2,
                              "--output", tmp_path / "eb.jsonl.gz"], capsys)
    assert (code, err) == (0, "") and "noted 1 (repeated id made unique: 1)" in stdout
    assert [p.id for p in read_problems(tmp_path / "eb.jsonl.gz")] == ["Q1", "Q2", "Q1#2"]


@pytest.mark.parametrize(
    ("extra", "fmt", "expect"),
    [
        (["--docs", "{fixtures}"], "fm2", "--docs is only used with --format eraser or scifact, not 'fm2'"),
        (["--docs", "{fixtures}"], "entailmentbank", "--docs is only used with --format eraser or scifact"),
        (["--strict"], "scifact", "--strict is only used with --format eraser, not 'scifact'"),
        (["--docs", "{tmp}/nowhere"], "eraser", "--docs {tmp}/nowhere: not found (expected the docs/ directory or docs.jsonl)"),
        (["--docs", "{tmp}/nowhere"], "scifact", "--docs {tmp}/nowhere: not found (expected the corpus.jsonl)"),
        ([], "scifact", "no SciFact corpus for {tmp}/in.jsonl: looked for {tmp}/corpus.jsonl, {tmp}/corpus.jsonl.gz"),
        ([], "eraser", "no ERASER documents for {tmp}/in.jsonl: looked for {tmp}/docs/, {tmp}/docs.jsonl, {tmp}/docs.jsonl.gz"),
    ],
)
def test_cli_convert_refusals(
    extra: list[str], fmt: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.jsonl").write_text("{}\n")
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    values = {"fixtures": ERASER, "tmp": tmp_path}
    args = ["data", "convert", "--format", fmt, "--input", tmp_path / "in.jsonl", "--output", out]
    code, stdout, err = _cli(args + [a.format(**values) for a in extra], capsys)
    assert code == 2 and stdout == ""
    assert err.startswith("dgn data convert: error: ") and err.count("\n") == 1
    assert expect.format(**values) in err
    assert out.read_text() == "previous\n"
