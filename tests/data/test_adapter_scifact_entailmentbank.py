"""SciFact and EntailmentBank adapters, on hand-written fixtures in their release formats."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dgn.data.entailmentbank import convert_entailmentbank, proof_leaves
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.scifact import convert_scifact
from dgn.errors import DataError, DgnUserError

FIXTURES = Path(__file__).parent / "fixtures"
SCIFACT = FIXTURES / "scifact"
TASK2 = FIXTURES / "entailmentbank" / "task2.jsonl"


def _texts(p: Problem) -> list[set[str]]:
    return [{p.candidates[i] for i in g} for g in p.gold]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- SciFact -----------------------------------------------------------------------------


def test_scifact_problems_by_hand() -> None:
    report = ConvertReport()
    problems = {p.id: p for p in convert_scifact(SCIFACT / "claims.jsonl", report=report)}
    assert list(problems) == ["1:11", "2:22", "2:11"]
    assert report.reasons == Counter({"no evidence": 1}) and not report.dropped
    aspirin = problems["1:11"]
    assert aspirin.query == "Aspirin reduces stroke risk."
    assert sorted(aspirin.candidates) == sorted([
        "Background: stroke is common.", "Aspirin lowered stroke risk by 20%.",
        "The effect held in women.", "Limitations apply.",
    ])
    # three rationales, the third repeating the first: two sets
    assert _texts(aspirin) == [
        {"Aspirin lowered stroke risk by 20%."},
        {"Aspirin lowered stroke risk by 20%.", "The effect held in women."},
    ]
    assert aspirin.meta["claim_id"] == "1" and aspirin.meta["doc_id"] == "11"
    assert aspirin.meta["label"] == "SUPPORT" and aspirin.meta["title"] == "Aspirin and stroke"
    assert _texts(problems["2:22"]) == [{"Statins raised the risk of myopathy."}]
    assert _texts(problems["2:11"]) == [{"Limitations apply."}]
    assert problems["2:22"].meta["label"] == "CONTRADICT"
    assert problems["2:11"].meta["claim_id"] == "2"


def test_scifact_corpus_beside_or_given(tmp_path: Path) -> None:
    shutil.copy(SCIFACT / "claims.jsonl", tmp_path / "claims.jsonl")
    with pytest.raises(DgnUserError) as info:
        list(convert_scifact(tmp_path / "claims.jsonl"))
    assert str(info.value) == (
        f"no SciFact corpus for {tmp_path / 'claims.jsonl'}: looked for {tmp_path}/corpus.jsonl, "
        f"{tmp_path}/corpus.jsonl.gz; pass corpus=PATH (--docs PATH)"
    )
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wb") as fh:
        fh.write((SCIFACT / "corpus.jsonl").read_bytes())
    beside = list(convert_scifact(tmp_path / "claims.jsonl"))
    given = list(convert_scifact(tmp_path / "claims.jsonl", corpus=SCIFACT / "corpus.jsonl"))
    assert beside == given == list(convert_scifact(SCIFACT / "claims.jsonl"))


def test_scifact_errors_are_located(tmp_path: Path) -> None:
    shutil.copy(SCIFACT / "corpus.jsonl", tmp_path / "corpus.jsonl")
    claims = tmp_path / "claims.jsonl"
    good = _rows(SCIFACT / "claims.jsonl")[0]
    cases = [
        (dict(good, cited_doc_ids=[11, 99]), r"claims\.jsonl:2: field 'cited_doc_ids': document 99 is not in the corpus"),
        (dict(good, evidence={"99": [{"sentences": [0], "label": "SUPPORT"}]}),
         r"claims\.jsonl:2: field 'evidence\.99': document 99 is not in the corpus"),
        (dict(good, evidence={"11": [{"sentences": "1", "label": "SUPPORT"}]}),
         r"claims\.jsonl:2: field 'evidence\.11\[0\]\.sentences': expected list, got str"),
        (dict(good, evidence={"11": [{"sentences": [True], "label": "SUPPORT"}]}),
         r"field 'evidence\.11\[0\]\.sentences': expected sentence indices, got True"),
        (dict(good, evidence={"11": [{"sentences": [4], "label": "SUPPORT"}]}),
         r"claims\.jsonl:2: field 'evidence\.11': gold set 0 has index 4 out of range for 4 candidates"),
        (dict(good, evidence={"11": {"sentences": [1]}}), r"field 'evidence\.11': expected a list of rationales"),
        (dict(good, evidence=[]), r"claims\.jsonl:2: field 'evidence': expected dict, got list"),
        (dict(good, claim=None), r"claims\.jsonl:2: field 'claim': expected str, got null"),
    ]
    for row, pattern in cases:
        _write(claims, [good, row])
        with pytest.raises(DataError, match=pattern):
            list(convert_scifact(claims))
    _write(tmp_path / "corpus.jsonl", [{"doc_id": 11, "title": "t", "abstract": "one sentence"}])
    with pytest.raises(DataError, match=r"corpus\.jsonl:1: field 'abstract': expected list, got str"):
        list(convert_scifact(claims))


def test_scifact_empty_rationales(tmp_path: Path) -> None:
    shutil.copy(SCIFACT / "corpus.jsonl", tmp_path / "corpus.jsonl")
    rows = [
        {"id": 5, "claim": "c", "cited_doc_ids": [11], "evidence": {"11": []}},
        {"id": 6, "claim": "c", "cited_doc_ids": [22], "evidence": {"22": [
            {"sentences": [], "label": "SUPPORT"}, {"sentences": [0], "label": "SUPPORT"}]}},
    ]
    report = ConvertReport()
    [p] = convert_scifact(_write(tmp_path / "claims.jsonl", rows), report=report)
    assert p.id == "6:22" and _texts(p) == [{"We ran a trial."}]
    assert report.reasons == Counter({"no rationale": 1})
    assert report.dropped == Counter({"empty rationale": 1})


# ---- EntailmentBank -------------------------------------------------------------------------


def test_proof_leaves() -> None:
    assert proof_leaves("sent21 & sent3 -> int1: x; int1 & sent15 -> hypothesis; ") == [
        "sent21", "sent3", "sent15",
    ]
    assert proof_leaves("sent2 & sent2 -> int1: y;int1 & sent1 -> hypothesis") == ["sent2", "sent1"]
    with pytest.raises(ValueError, match="step 1 has no '->'"):
        proof_leaves("sent1 & sent2 -> int1: a; int1 sent3")
    with pytest.raises(ValueError, match="premise 'hypothesis' is neither sentN nor intN"):
        proof_leaves("hypothesis & sent2 -> int1: a")


def test_entailmentbank_problems_by_hand() -> None:
    report = ConvertReport()
    problems = list(convert_entailmentbank(TASK2, report=report))
    assert [p.id for p in problems] == ["Q1", "Q2", "Q1#2"]
    assert report.notes == Counter({"repeated id made unique": 1}) and report.skipped == 0
    sun, water, magnet = problems
    assert sun.query == "we can see the sun because it gives off light"
    assert sun.meta["question"] == "Why can we see the sun?" and sun.meta["answer"] == "It gives off light."
    assert _texts(sun) == [{"the sun is a star", "a star gives off light", "light lets us see"}]
    assert len(sun.gold) == 1 and sun.num_candidates == 11
    assert {sun.meta["sent_ids"][i] for i in sun.gold[0]} == {"sent10", "sent2", "sent11"}
    # each candidate keeps its sentN label through the shuffle
    triples = _rows(TASK2)[0]["meta"]["triples"]
    assert [triples[s] for s in sun.meta["sent_ids"]] == sun.candidates
    assert _texts(water) == [{"water is a liquid", "ice is frozen water", "freezing turns a liquid into a solid"}]
    assert magnet.query == "a magnet attracts a nail"
    assert _texts(magnet) == [{"a magnet attracts iron", "a nail is made of iron"}]


def test_entailmentbank_candidates_in_sent_number_order() -> None:
    [sun, _, _] = convert_entailmentbank(TASK2, shuffle=False)
    assert sun.meta["sent_ids"] == [f"sent{n}" for n in range(1, 12)]  # not sent1, sent10, sent11, sent2
    assert sun.candidates[1] == "a star gives off light" and sun.candidates[9] == "the sun is a star"
    assert sun.gold == [[1, 9, 10]]


def test_entailmentbank_repeated_ids_never_collide(tmp_path: Path) -> None:
    rows = _rows(TASK2)
    path = _write(tmp_path / "t.jsonl", [rows[0], dict(rows[1], id="Q1#2"), rows[2], rows[2]])
    report = ConvertReport()
    ids = [p.id for p in convert_entailmentbank(path, report=report)]
    assert ids == ["Q1", "Q1#2", "Q1#3", "Q1#4"]
    assert report.notes["repeated id made unique"] == 2


def test_entailmentbank_errors_are_located(tmp_path: Path) -> None:
    good = _rows(TASK2)[1]
    triples = good["meta"]["triples"]
    cases = [
        (dict(good, proof="sent1 & sent26 -> hypothesis; "),
         r"t\.jsonl:2: field 'proof': names sent26, not in meta\.triples"),
        (dict(good, proof="sent1 & sent3 hypothesis"), r"t\.jsonl:2: field 'proof': step 0 has no '->'"),
        (dict(good, proof="int1 -> hypothesis; "), r"t\.jsonl:2: field 'proof': names no sentN"),
        (dict(good, meta={"triples": {**triples, "fact4": "x"}}),
         r"t\.jsonl:2: field 'meta\.triples': key 'fact4' is not sentN"),
        (dict(good, meta={"triples": {**triples, "sent4": 4}}),
         r"t\.jsonl:2: field 'meta\.triples': sent4 must be a string, got int"),
        (dict(good, meta={"triples": list(triples.values())}),
         r"t\.jsonl:2: field 'meta\.triples': expected dict, got list"),
        (dict(good, hypothesis=None), r"t\.jsonl:2: field 'hypothesis': expected str, got null"),
        ({k: v for k, v in good.items() if k != "proof"}, r"t\.jsonl:2: field 'proof': missing required field"),
    ]
    for row, pattern in cases:
        path = _write(tmp_path / "t.jsonl", [good, row])
        with pytest.raises(DataError, match=pattern):
            list(convert_entailmentbank(path))
