"""ERASER adapter (FEVER and MultiRC layouts), on hand-written fixtures in ERASER's formats."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dgn.data.eraser import convert_eraser
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.errors import DataError, DgnUserError

ERASER = Path(__file__).parent / "fixtures" / "eraser"
FEVER = ERASER / "fever"
MULTIRC = ERASER / "multirc"

# The fixture's Paris document as ERASER's docs/ loader reads it (lines stripped, the blank
# line gone) and as its docs.jsonl holds it.
PARIS = [
    "Paris is the capital of France .",
    "It has 2.1 million residents .",
    "The Seine flows through Paris .",
    "It hosted the 1900 Summer Olympics .",
]
BERLIN = ["Berlin is in Germany .", "It is the capital of Germany .", "It has a zoo ."]


def _texts(p: Problem) -> list[set[str]]:
    return [{p.candidates[i] for i in g} for g in p.gold]


def _line(annotation_id: str, evidences: list[Any], query: str = "q", **extra: Any) -> dict[str, Any]:
    return {"annotation_id": annotation_id, "classification": "SUPPORTS", "docids": None,
            "evidences": evidences, "query": query, "query_type": None, **extra}


def _ev(docid: str, start: int, end: int, text: str | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"docid": docid, "start_sentence": start, "end_sentence": end}
    if text is not None:
        ev["text"] = text
    return ev


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- FEVER layout --------------------------------------------------------------------


@pytest.fixture(scope="module")
def fever() -> tuple[dict[str, Problem], ConvertReport]:
    report = ConvertReport()
    problems = {p.id: p for p in convert_eraser(FEVER / "val.jsonl", report=report)}
    return problems, report


def test_fever_problems_by_hand(fever: tuple[dict[str, Problem], ConvertReport]) -> None:
    problems, report = fever
    assert list(problems) == ["101", "102", "104"]
    assert report.reasons == Counter(
        {"document missing": 1, "evidence spans several documents": 1, "no evidence": 1}
    )
    assert not report.dropped and not report.notes
    p101, p102, p104 = problems["101"], problems["102"], problems["104"]
    assert sorted(p101.candidates) == sorted(PARIS) and sorted(p104.candidates) == sorted(BERLIN)
    assert _texts(p101) == [{"The Seine flows through Paris ."}]
    # three groups, the third repeating the first: two sets, the second of two sentences
    assert _texts(p102) == [
        {"Paris is the capital of France ."},
        {"It has 2.1 million residents .", "It hosted the 1900 Summer Olympics ."},
    ]
    assert _texts(p104) == [{"Berlin is in Germany .", "It is the capital of Germany ."}]  # [0, 2): two
    assert p101.query == "The Seine runs through Paris."
    assert (p101.meta["docid"], p101.meta["label"]) == ("Paris", "SUPPORTS")
    assert (p102.meta["docid"], p102.meta["label"]) == ("Paris", "REFUTES")
    for p in problems.values():
        doc = PARIS if p.meta["docid"] == "Paris" else BERLIN
        assert [doc[o] for o in p.meta["original_index"]] == p.candidates


def _gold_as_evidence_text(p: Problem) -> set[str]:
    """Each gold set's sentences in document order, joined as ERASER's evidence ``text``."""
    order = p.meta["original_index"]
    return {" ".join(p.candidates[i] for i in sorted(g, key=lambda v: order[v])) for g in p.gold}


def _evidence_text(rec: dict[str, Any]) -> set[str]:
    return {" ".join(ev["text"] for ev in sorted(g, key=lambda e: e["start_sentence"])) for g in rec["evidences"]}


def test_fever_gold_equals_evidence_text(fever: tuple[dict[str, Problem], ConvertReport]) -> None:
    problems, _ = fever
    for line in (FEVER / "val.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["annotation_id"] in problems:
            assert _gold_as_evidence_text(problems[rec["annotation_id"]]) == _evidence_text(rec)


def test_docs_folder_and_docs_jsonl_agree(fever: tuple[dict[str, Problem], ConvertReport]) -> None:
    # beside val.jsonl are docs/ (found first) and docs.jsonl, holding the same sentences
    problems, _ = fever
    from_jsonl = {p.id: p for p in convert_eraser(FEVER / "val.jsonl", docs=FEVER / "docs.jsonl")}
    assert from_jsonl == problems
    from_dir = {p.id: p for p in convert_eraser(FEVER / "val.jsonl", docs=FEVER / "docs")}
    assert from_dir == problems


def test_docs_found_beside_in_order(tmp_path: Path) -> None:
    shutil.copy(FEVER / "val.jsonl", tmp_path / "val.jsonl")
    with pytest.raises(DgnUserError) as info:
        list(convert_eraser(tmp_path / "val.jsonl"))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == (
        f"no ERASER documents for {tmp_path / 'val.jsonl'}: looked for {tmp_path}/docs/, "
        f"{tmp_path}/docs.jsonl, {tmp_path}/docs.jsonl.gz; pass docs=PATH (--docs PATH)"
    )
    with gzip.open(tmp_path / "docs.jsonl.gz", "wb") as fh:
        fh.write((FEVER / "docs.jsonl").read_bytes())
    assert len(list(convert_eraser(tmp_path / "val.jsonl"))) == 3
    (tmp_path / "docs.jsonl").write_text("", encoding="utf-8")  # docs.jsonl before docs.jsonl.gz
    report = ConvertReport()
    assert list(convert_eraser(tmp_path / "val.jsonl", report=report)) == []
    assert report.reasons["document missing"] == 4  # 101, 102, 103 and 104 name one document each
    with pytest.raises(DgnUserError, match="ERASER documents: docs='.*nowhere' not found"):
        list(convert_eraser(tmp_path / "val.jsonl", docs=tmp_path / "nowhere"))


def test_a_release_folder_is_not_a_docs_folder() -> None:
    with pytest.raises(DgnUserError, match=r"ERASER documents: .*fever holds docs/; pass .*fever/docs itself"):
        list(convert_eraser(FEVER / "val.jsonl", docs=FEVER))


def test_strict_missing_document() -> None:
    with pytest.raises(
        DataError,
        match=r"val\.jsonl:3: field 'evidences\[0\]\[0\]\.docid': document 'Penélope_Cruz' not found in .*docs",
    ):
        list(convert_eraser(FEVER / "val.jsonl", strict=True))


def test_docs_jsonl_keeps_empty_lines_aligned(tmp_path: Path) -> None:
    # ERASER splits docs.jsonl documents on "\n" and keeps every line: "b ." is sentence 2
    _write(tmp_path / "docs.jsonl", [{"docid": "D", "document": "a .\n\nb .\nc ."}])
    _write(tmp_path / "val.jsonl", [_line("1", [[_ev("D", 2, 3, "b .")]])])
    report = ConvertReport()
    [p] = convert_eraser(tmp_path / "val.jsonl", report=report)
    assert sorted(p.candidates) == ["", "a .", "b .", "c ."]
    assert _texts(p) == [{"b ."}] and not report.notes
    # a docs/ file drops the blank line, as ERASER's loader does: "b ." is sentence 1 there
    (tmp_path / "docs.jsonl").unlink()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "D").write_text("a .\n\nb .\nc .\n", encoding="utf-8")
    [p] = convert_eraser(tmp_path / "val.jsonl", report=report)
    assert sorted(p.candidates) == ["a .", "b .", "c ."]
    assert _texts(p) == [{"c ."}]
    assert report.notes == Counter({"evidence text differs from the document": 1})


def test_eraser_errors_are_located(tmp_path: Path) -> None:
    _write(tmp_path / "docs.jsonl", [{"docid": "D", "document": "a .\nb ."}])
    val = tmp_path / "val.jsonl"
    cases = [
        (_line("1", [[{"docid": "D", "start_sentence": "0", "end_sentence": 1}]]),
         r"val\.jsonl:1: field 'evidences\[0\]\[0\]\.start_sentence': expected int, got str"),
        (_line("1", [[_ev("D", 1, 3)]]),
         r"val\.jsonl:1: field 'evidences\[0\]\[0\]\.end_sentence': sentences \[1, 3\) out of range "
         r"for document 'D' of 2 sentences"),
        (_line("1", [[_ev("D", 1, 1)]]), r"field 'evidences\[0\]\[0\]\.end_sentence'"),
        (_line("1", {"D": 1}), r"val\.jsonl:1: field 'evidences': expected list, got dict"),
        (_line("1", ["x"]), r"field 'evidences\[0\]': expected a list of evidence objects, got str"),
        (_line("1", [[_ev("D", 0, 1)]], classification=3), r"field 'classification': expected str or null"),
        (_line(None, [[_ev("D", 0, 1)]]), r"field 'annotation_id': expected a string id, got null"),  # type: ignore[arg-type]
    ]
    for row, pattern in cases:
        _write(val, [row])
        with pytest.raises(DataError, match=pattern):
            list(convert_eraser(val))
    _write(tmp_path / "docs.jsonl", [{"docid": "D", "document": "a"}, {"docid": "D", "document": "b"}])
    with pytest.raises(DataError, match=r"docs\.jsonl:2: field 'docid': docid 'D' repeats \(first at line 1\)"):
        list(convert_eraser(val))
    _write(tmp_path / "docs.jsonl", [{"docid": "D", "document": ["a"]}])
    with pytest.raises(DataError, match=r"docs\.jsonl:1: field 'document': expected str, got list"):
        list(convert_eraser(val))


def test_docid_must_be_a_file_name_in_a_docs_folder(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "secret").write_text("outside\n", encoding="utf-8")
    _write(tmp_path / "val.jsonl", [_line("1", [[_ev("../secret", 0, 1)]])])
    with pytest.raises(DataError, match=r"docid '\.\./secret' is not a file name"):
        list(convert_eraser(tmp_path / "val.jsonl"))


# ---- MultiRC layout -------------------------------------------------------------------


def test_multirc_options_become_one_problem() -> None:
    report = ConvertReport()
    problems = list(convert_eraser(MULTIRC / "val.jsonl", report=report))
    assert [p.id for p in problems] == ["News-1.txt:0", "News-1.txt:1"]
    assert report.skipped == 0 and not report.dropped
    q0, q1 = problems
    assert q0.query == "When was the power back ?"
    # both options carry the question's one group: one set of two sentences
    assert _texts(q0) == [{"Thousands lost power .", "Crews restored it by Wednesday ."}]
    assert q0.meta["docid"] == "News-1.txt" and q0.meta["label"] is None
    assert q0.meta["answers"] == ["Wednesday", "Monday"]
    assert q0.meta["answer_labels"] == ["True", "False"]
    # question 1: options 10 and 2 in ERASER's (string) order, sorted by number; gold = the
    # distinct groups of both lines (option 10's two, option 2 repeating one and adding one)
    assert q1.query == "What happened after the storm ?"
    assert q1.meta["answers"] == ["Schools closed", "Nothing"]
    assert q1.meta["answer_labels"] == ["True", "False"]
    assert q1.meta["annotation_ids"] == ["News-1.txt:1:2", "News-1.txt:1:10"]
    assert sorted(map(sorted, _texts(q1))) == [
        ["Schools stayed closed until Friday ."], ["The storm hit the coast on Monday ."],
        ["Thousands lost power ."],
    ]
    assert len(q0.candidates) == 4


def test_multirc_false_keeps_one_problem_per_line() -> None:
    problems = list(convert_eraser(MULTIRC / "val.jsonl", multirc=False))
    assert [p.id for p in problems] == [
        "News-1.txt:0:0", "News-1.txt:0:1", "News-1.txt:1:10", "News-1.txt:1:2",
    ]
    assert problems[0].query == "When was the power back ? || Wednesday"
    assert problems[0].meta["label"] == "True"


def test_multirc_errors(tmp_path: Path) -> None:
    shutil.copy(MULTIRC / "docs.jsonl", tmp_path / "docs.jsonl")
    val = tmp_path / "val.jsonl"
    rows = [json.loads(x) for x in (MULTIRC / "val.jsonl").read_text(encoding="utf-8").splitlines()]
    _write(val, [rows[0], rows[2], rows[1]])  # question 0's options split by question 1's
    with pytest.raises(DataError, match=r"val\.jsonl:3: field 'annotation_id': the options of question "
                                        r"'News-1\.txt:0' are not on consecutive lines \(it began at line 1\)"):
        list(convert_eraser(val))
    _write(val, [rows[0], dict(rows[1], annotation_id="7")])
    with pytest.raises(DataError, match=r"val\.jsonl:2: field 'annotation_id': expected a MultiRC id"):
        list(convert_eraser(val))
    _write(val, [rows[0], dict(rows[1], query="no separator")])
    with pytest.raises(DataError, match=r"val\.jsonl:2: field 'query': expected a MultiRC query"):
        list(convert_eraser(val))
    _write(val, [rows[0], dict(rows[1], query="Another question ? || Monday")])
    with pytest.raises(DataError, match=r"val\.jsonl:2: field 'query': question 'News-1\.txt:0' reads"):
        list(convert_eraser(val))
    # forced on a FEVER file
    with pytest.raises(DataError, match=r"val\.jsonl:1: field 'annotation_id': expected a MultiRC id"):
        list(convert_eraser(FEVER / "val.jsonl", multirc=True))


def test_multirc_missing_document_skips_the_question(tmp_path: Path) -> None:
    _write(tmp_path / "docs.jsonl", [{"docid": "Other.txt", "document": "x"}])
    shutil.copy(MULTIRC / "val.jsonl", tmp_path / "val.jsonl")
    report = ConvertReport()
    assert list(convert_eraser(tmp_path / "val.jsonl", report=report)) == []
    assert report.reasons == Counter({"document missing": 2})  # two questions, four lines
    with pytest.raises(DataError, match=r"val\.jsonl:1: .*document 'News-1\.txt' not found"):
        list(convert_eraser(tmp_path / "val.jsonl", strict=True))


def test_shuffle_is_seeded_and_per_problem() -> None:
    a = list(convert_eraser(FEVER / "val.jsonl", seed=0))
    b = list(convert_eraser(FEVER / "val.jsonl", seed=0))
    plain = list(convert_eraser(FEVER / "val.jsonl", shuffle=False))
    assert a == b
    assert plain[0].candidates == PARIS and plain[0].gold == [[2]]
    assert plain[1].gold == [[0], [1, 3]]
