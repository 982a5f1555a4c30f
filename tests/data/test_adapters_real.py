"""FM2, WiCE and CLIMATE-FEVER adapters on the real files in ../shared/data."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dgn.data.climate_fever import convert_climate_fever
from dgn.data.fm2 import convert_fm2
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
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
