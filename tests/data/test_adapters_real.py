"""FM2, WiCE, CLIMATE-FEVER, ERASER (FEVER, MultiRC), SciFact and EntailmentBank adapters on
the real files in ../shared/data."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dgn.data.climate_fever import convert_climate_fever
from dgn.data.entailmentbank import convert_entailmentbank
from dgn.data.eraser import convert_eraser
from dgn.data.fm2 import convert_fm2
from dgn.data.registry import DATASETS
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.scifact import convert_scifact
from dgn.data.wice import convert_wice
from dgn.errors import DataError


def _raw(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _last_is_gold(problems: list[Problem]) -> float:
    return sum(p.num_candidates - 1 in p.gold_union for p in problems) / len(problems)


# ---- FM2 -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fm2_pair(fm2_dev: Path) -> tuple[Path, list[Problem]]:
    return fm2_dev, list(convert_fm2(fm2_dev, seed=0))


def test_fm2_dev_counts_and_gold(fm2_pair: tuple[Path, list[Problem]]) -> None:
    path, problems = fm2_pair
    raw = {r["id"]: r for r in _raw(path)}
    assert len(problems) == 1169
    assert all(len(p.gold) == 1 and p.gold[0] for p in problems)
    sizes = Counter(len(p.gold[0]) for p in problems)
    assert sizes[1] >= 866 - 10 and sizes[2] >= 1  # duplicates may widen a set
    for p in problems:
        r = raw[p.id]
        gold_texts = {g["text"] for g in r["gold_evidence"]}
        chosen = {p.candidates[i] for i in p.gold[0]}
        assert chosen == gold_texts  # every gold text found, nothing else marked
        assert all(
            p.candidates[i] not in gold_texts for i in range(p.num_candidates) if i not in p.gold[0]
        )
        assert p.query == r["text"]
        assert p.meta["label"] == r["label"] and p.meta["wikipedia_page"] == r["wikipedia_page"]
        orig = p.meta["original_index"]
        assert [r["retrieved_evidence"][o]["text"] for o in orig] == p.candidates
        assert p.meta["section_headers"] == [
            r["retrieved_evidence"][o]["section_header"] for o in orig
        ]
        assert "missing_gold" not in p.meta


def test_fm2_position_leak_removed(fm2_pair: tuple[Path, list[Problem]]) -> None:
    path, problems = fm2_pair
    raw = list(convert_fm2(path, shuffle=False))
    assert _last_is_gold(raw) >= 468 / 1169  # the leak SOURCE.md describes
    assert _last_is_gold(problems) < 0.2  # ~1/10 after shuffling
    for p in problems:  # positions stay a permutation
        assert sorted(p.meta["original_index"]) == list(range(p.num_candidates))


def test_fm2_deterministic_and_seed_dependent(fm2_pair: tuple[Path, list[Problem]]) -> None:
    path, problems = fm2_pair
    again = list(convert_fm2(path, seed=0))
    assert again == problems
    other = list(convert_fm2(path, seed=1))
    assert [p.id for p in other] == [p.id for p in problems]
    changed = sum(a.candidates != b.candidates for a, b in zip(problems, other, strict=True))
    assert changed > 0.9 * len(problems)


def test_fm2_shuffle_does_not_depend_on_file_order(
    fm2_pair: tuple[Path, list[Problem]], tmp_path: Path
) -> None:
    path, problems = fm2_pair
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    subset = tmp_path / "rev.jsonl"
    subset.write_text("\n".join(reversed(lines[:50])) + "\n", encoding="utf-8")
    reordered = {p.id: p for p in convert_fm2(subset, seed=0)}
    for p in problems[:50]:
        assert reordered[p.id] == p


def test_fm2_test_split(fm2_test: Path) -> None:
    problems = list(convert_fm2(fm2_test))
    assert len(problems) == 1380
    assert all(p.gold for p in problems)


def test_fm2_gold_missing_from_candidates(tmp_path: Path) -> None:
    rec = {
        "id": "x1",
        "text": "claim",
        "label": "SUPPORTS",
        "wikipedia_page": "P",
        "category": "C",
        "gold_evidence": [{"section_header": "H", "text": "gone"}, {"text": "dup"}],
        "retrieved_evidence": [
            {"section_header": "A", "text": "dup"},
            {"section_header": "B", "text": "other"},
            {"section_header": "C", "text": "dup"},
        ],
    }
    nothing = dict(rec, id="x2", gold_evidence=[{"text": "gone"}])
    path = tmp_path / "fm2.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(nothing) + "\n")
    report = ConvertReport()
    first, second = convert_fm2(path, report=report)
    assert sorted(first.candidates[i] for i in first.gold[0]) == ["dup", "dup"]  # duplicates kept
    assert first.num_candidates == 3 and first.meta["missing_gold"] == ["gone"]
    assert second.gold == []
    assert report.dropped == Counter({"gold text not among candidates": 2})


def test_fm2_bad_record_is_located(tmp_path: Path) -> None:
    path = tmp_path / "fm2.jsonl"
    path.write_text('{"id": "a", "text": "c", "gold_evidence": [], "retrieved_evidence": [1]}\n')
    with pytest.raises(DataError, match=r"fm2\.jsonl:1: field 'retrieved_evidence'"):
        list(convert_fm2(path))


# ---- WiCE ------------------------------------------------------------------------


def test_wice_dev(wice_dev: Path) -> None:
    report = ConvertReport()
    problems = list(convert_wice(wice_dev, report=report))
    raw = {r["meta"]["id"]: r for r in _raw(wice_dev)}
    assert len(problems) == 349 and set(raw) == {p.id for p in problems}
    assert report.dropped["empty gold set"] == 43 and report.skipped == 0
    assert sum(1 for p in problems if not p.gold) == 30
    assert Counter(p.meta["label"] for p in problems) == Counter(
        {"partially_supported": 191, "supported": 115, "not_supported": 43}
    )
    for p in problems:
        r = raw[p.id]
        orig = p.meta["original_index"]
        assert [r["evidence"][o] for o in orig] == p.candidates
        want = {frozenset(s) for s in r["supporting_sentences"] if s}
        got = {frozenset(orig[i] for i in g) for g in p.gold}
        assert got == want
        assert p.query == r["claim"]
    assert max(len(p.gold) for p in problems) > 10  # many alternative sets


# ---- CLIMATE-FEVER ---------------------------------------------------------------


def test_climate_fever(climate_fever_file: Path) -> None:
    problems = list(convert_climate_fever(climate_fever_file))
    raw = {r["claim_id"]: r for r in _raw(climate_fever_file)}
    assert len(problems) == 1535
    assert all(p.num_candidates == 5 for p in problems)
    sizes = Counter(len(p.gold[0]) if p.gold else 0 for p in problems)
    assert sizes == Counter({0: 474, 1: 271, 2: 282, 3: 236, 4: 158, 5: 114})
    relevance_values: Counter[float] = Counter()
    for p in problems:
        r = raw[p.id]
        assert p.relevance is not None
        orig = p.meta["original_index"]
        for pos, o in enumerate(orig):
            ev = r["evidences"][o]
            assert p.candidates[pos] == ev["evidence"]
            assert p.meta["evidence_ids"][pos] == ev["evidence_id"]
            assert p.relevance[pos] == sum(v in ("SUPPORTS", "REFUTES") for v in ev["votes"])
            assert (pos in p.gold_union) == (ev["evidence_label"] != "NOT_ENOUGH_INFO")
        relevance_values.update(p.relevance)
    assert len(relevance_values) >= 4  # graded, not binary
    assert Counter(p.meta["claim_label"] for p in problems)["DISPUTED"] == 154


# ---- ERASER: FEVER and MultiRC ------------------------------------------------------


def _docs(annotations: Path) -> dict[str, list[str]]:
    """The documents beside an ERASER file, split as ERASER splits docs.jsonl."""
    return {r["docid"]: r["document"].split("\n") for r in _raw(annotations.parent / "docs.jsonl.gz")}


def _gold_as_evidence_text(p: Problem) -> set[str]:
    """Each gold set's sentences in document order, joined as ERASER's evidence ``text``."""
    order = p.meta["original_index"]
    return {" ".join(p.candidates[i] for i in sorted(g, key=lambda v: order[v])) for g in p.gold}


def _evidence_text(groups: list[list[dict[str, Any]]]) -> set[str]:
    return {" ".join(e["text"] for e in sorted(g, key=lambda e: e["start_sentence"])) for g in groups}


@pytest.mark.parametrize(("split", "lines", "missing"), [("val", 6122, 77), ("test", 6111, 59)])
def test_eraser_fever(
    split: str, lines: int, missing: int, eraser_fever_val: Path, eraser_fever_test: Path
) -> None:
    path = eraser_fever_val if split == "val" else eraser_fever_test
    raw = _raw(path)
    docs = _docs(path)
    report = ConvertReport()
    problems = {p.id: p for p in convert_eraser(path, report=report)}
    assert len(raw) == lines
    absent = [r for r in raw if r["docids"][0] not in docs]
    assert len(absent) == missing  # SOURCE.md: 77 val and 59 test lines, 12 documents in all
    assert report.reasons == Counter({"document missing": missing}) and not report.notes
    assert len(problems) == lines - missing
    assert set(problems) == {r["annotation_id"] for r in raw} - {r["annotation_id"] for r in absent}
    for r in raw:
        p = problems.get(r["annotation_id"])
        if p is None:
            continue
        doc = docs[r["docids"][0]]
        assert p.query == r["query"]
        assert p.meta["docid"] == r["docids"][0] and p.meta["label"] == r["classification"]
        assert [doc[o] for o in p.meta["original_index"]] == p.candidates
        assert _gold_as_evidence_text(p) == _evidence_text(r["evidences"])
    if split == "val":
        assert {r["docids"][0] for r in absent} == {
            "Janelle_Monáe", "Penélope_Cruz", "Raven-Symoné", "José_Ferrer", "Édouard_Séguin",
            "Simón_Bolívar",
        }


def test_eraser_multirc(eraser_multirc_val: Path) -> None:
    raw = _raw(eraser_multirc_val)
    docs = _docs(eraser_multirc_val)
    by_question: dict[str, list[dict[str, Any]]] = {}
    for r in raw:
        by_question.setdefault(r["annotation_id"].rsplit(":", 1)[0], []).append(r)
    assert (len(raw), len(by_question)) == (3214, 631)
    # every option of a question carries the same evidence (what merging them relies on)
    for rows in by_question.values():
        assert len({json.dumps(r["evidences"], sort_keys=True) for r in rows}) == 1
    report = ConvertReport()
    problems = list(convert_eraser(eraser_multirc_val, report=report))
    assert report.skipped == 0 and not report.dropped and not report.notes
    assert [p.id for p in problems] == list(by_question)
    for p in problems:
        rows = by_question[p.id]
        question, _, _ = rows[0]["query"].partition(" || ")
        assert p.query == question
        docid = rows[0]["evidences"][0][0]["docid"]
        assert p.meta["docid"] == docid and p.meta["label"] is None
        assert [docs[docid][o] for o in p.meta["original_index"]] == p.candidates
        assert _gold_as_evidence_text(p) == _evidence_text(rows[0]["evidences"])
        assert all(len(g) >= 2 for g in p.gold)  # SOURCE.md: every question needs 2 or more
        option = {r["annotation_id"]: r for r in rows}
        assert sorted(p.meta["annotation_ids"]) == sorted(option)
        for aid, answer, label in zip(
            p.meta["annotation_ids"], p.meta["answers"], p.meta["answer_labels"], strict=True
        ):
            assert option[aid]["query"] == f"{question} || {answer}"
            assert option[aid]["classification"] == label
    assert sum(len(p.meta["answers"]) for p in problems) == 3214


# ---- SciFact ---------------------------------------------------------------------------


def test_scifact_train(scifact_train: Path) -> None:
    raw = _raw(scifact_train)
    corpus = {d["doc_id"]: d for d in _raw(scifact_train.parent / "corpus.jsonl.gz")}
    report = ConvertReport()
    problems = {p.id: p for p in convert_scifact(scifact_train, report=report)}
    with_evidence = [c for c in raw if c["evidence"]]
    assert (len(raw), len(with_evidence)) == (809, 505)
    assert report.reasons == Counter({"no evidence": 304}) and not report.dropped
    assert len(problems) == sum(len(c["evidence"]) for c in with_evidence) == 564
    assert len({p.meta["claim_id"] for p in problems.values()}) == 505
    for c in with_evidence:
        for doc_id, rationales in c["evidence"].items():
            p = problems[f"{c['id']}:{doc_id}"]
            abstract = corpus[int(doc_id)]["abstract"]
            assert p.query == c["claim"] and p.meta["title"] == corpus[int(doc_id)]["title"]
            assert (p.meta["claim_id"], p.meta["doc_id"]) == (str(c["id"]), doc_id)
            assert [abstract[o] for o in p.meta["original_index"]] == p.candidates
            want = {frozenset(abstract[i] for i in r["sentences"]) for r in rationales}
            assert {frozenset(p.candidates[i] for i in g) for g in p.gold} == want
            assert p.meta["label"] == rationales[0]["label"]
    assert Counter(p.meta["label"] for p in problems.values()) == Counter({"SUPPORT": 370, "CONTRADICT": 194})


# ---- EntailmentBank ----------------------------------------------------------------------


@pytest.mark.parametrize(("split", "count", "repeated"), [("train", 1313, 5), ("dev", 187, 0)])
def test_entailmentbank(
    split: str, count: int, repeated: int, entailmentbank_train: Path, entailmentbank_dev: Path
) -> None:
    path = entailmentbank_train if split == "train" else entailmentbank_dev
    raw = _raw(path)
    report = ConvertReport()
    problems = list(convert_entailmentbank(path, report=report))
    assert len(raw) == len(problems) == count
    assert report.skipped == 0 and sum(report.notes.values()) == repeated
    assert len({p.id for p in problems}) == count
    assert sum("#" in p.id for p in problems) == repeated
    for r, p in zip(raw, problems, strict=True):
        assert p.id.partition("#")[0] == r["id"] and p.query == r["hypothesis"]
        triples = r["meta"]["triples"]
        assert sorted(p.candidates) == sorted(triples.values())
        assert [triples[s] for s in p.meta["sent_ids"]] == p.candidates
        leaves = set(re.findall(r"\bsent\d+\b", r["proof"]))
        assert len(p.gold) == 1 and {p.meta["sent_ids"][i] for i in p.gold[0]} == leaves
        assert (p.meta["question"], p.meta["answer"]) == (r["question"], r["answer"])
    sizes = [len(p.gold[0]) for p in problems]
    assert min(sizes) >= 2 and max(sizes) <= 17  # SOURCE.md: 2 to 17 leaves


def test_data_list_verifies_the_new_datasets(
    eraser_fever_val: Path, scifact_train: Path, entailmentbank_dev: Path, eraser_multirc_val: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dgn.cli import main

    root = eraser_fever_val.parents[2]
    assert main(["data", "list", "--data-dir", str(root), "--verify"]) == 0
    out = capsys.readouterr().out
    for name, files in {
        "eraser-fever": ["eraser/fever/val.jsonl.gz", "eraser/fever/test.jsonl.gz", "eraser/fever/docs.jsonl.gz"],
        "eraser-multirc": ["eraser/multirc/val.jsonl.gz", "eraser/multirc/docs.jsonl.gz"],
        "scifact": ["scifact/claims_train.jsonl.gz", "scifact/corpus.jsonl.gz"],
        "entailmentbank": ["entailmentbank/task2_train.jsonl.gz", "entailmentbank/task2_dev.jsonl.gz"],
    }.items():
        assert f"{name} (format {DATASETS[name].format}, downloadable)" in out
        for file in files:
            assert re.search(rf"{re.escape(file)}\s+present, ok$", out, re.MULTILINE), file
