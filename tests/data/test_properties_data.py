"""Property-based tests of the data layer and the text features.

Random records (unicode, lone surrogates from JSON escapes, very long sentences, empty
candidate lists, duplicate candidates, missing and wrong-typed fields) go through the
selection-JSONL reader and writer, the FM2 / WiCE / CLIMATE-FEVER / FEVER adapters and
the tokenizer and claim-sentence features. A valid input must give a result with the
documented invariants; an invalid one a DataError (or DgnUserError) naming the line and
the field: never another exception type, never a silently wrong result.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dgn.data import (
    ConvertReport,
    Prediction,
    Problem,
    WikiStore,
    candidate_permutation,
    convert_climate_fever,
    convert_fever,
    convert_fm2,
    convert_wice,
    read_predictions,
    read_problems,
    shuffle_problem,
    write_predictions,
    write_problems,
)
from dgn.data.wikistore import unescape
from dgn.errors import DataError, DgnUserError
from dgn.features import WordVectors, claim_sentence_features, cosine_scores, tokenize

FAST = settings(max_examples=25, deadline=None)
FEW = settings(max_examples=15, deadline=None)
EACH = settings(max_examples=3, deadline=None)  # per parametrized case
EACH_WIKI = settings(max_examples=3, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ---------------------------------------------------------------- text strategies

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
CHARS = st.one_of(
    st.characters(),  # any code point but a surrogate
    st.characters(max_codepoint=0x2FF),
    st.sampled_from(list("aé Ωß\u0301\u200b\t\n\"\\{}[]:,-_İﬁ１")),
    SURROGATES,  # what a "\ud800" escape in a JSON file turns into
)


def _text(min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    # Joined from characters: st.text() would drop the lone surrogates.
    return st.lists(CHARS, min_size=min_size, max_size=max_size).map("".join)


SHORT = _text()
LONG = st.builds(lambda piece, n: piece * n, _text(1, 6), st.integers(1_000, 8_000))
TEXT = st.one_of(SHORT, SHORT, SHORT, LONG)
IDS = st.one_of(_text(1, 8), st.integers(0, 10**20).map(str))


@contextlib.contextmanager
def _tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def _jsonl(path: Path, records: list[Any]) -> Path:
    """One JSON value per line (``ensure_ascii`` keeps lone surrogates as escapes)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _as_read(records: list[Any]) -> list[Any]:
    """The records as a JSON reader sees them (an escaped surrogate pair is one character)."""
    return json.loads(json.dumps(records))  # type: ignore[no-any-return]


def _expect_data_error(call: Callable[[], Any], line: int, field: str | None) -> DataError:
    with pytest.raises(DataError) as info:
        call()
    err = info.value
    assert err.line == line, str(err)
    assert f":{line}:" in str(err)
    if field is not None:
        assert err.field is not None and field in err.field, str(err)
        assert field in str(err)
    return err


# ---------------------------------------------------------------- selection JSONL

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False), SHORT,
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(SHORT, inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def problems(draw: st.DrawFn, pid: str | None = None) -> Problem:
    pool = draw(st.lists(TEXT, min_size=1, max_size=4))
    candidates = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))  # duplicates
    n = len(candidates)
    gold = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True),
                         max_size=3))
    relevance = draw(st.one_of(
        st.none(),
        st.lists(st.one_of(st.integers(0, 5), st.floats(0, 1e300)), min_size=n, max_size=n),
    ))
    return Problem(
        id=pid if pid is not None else draw(IDS),
        query=draw(TEXT),
        candidates=candidates,
        gold=gold,
        relevance=relevance,
        meta=draw(st.dictionaries(SHORT, JSON, max_size=3)),
    )


def _json_can_hold(record: Problem | Prediction) -> bool:
    """False when a high surrogate precedes a low one: JSON reads that as one character."""
    text = json.dumps(record.to_json(), ensure_ascii=False)
    return not any(
        "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff"
        for a, b in zip(text, text[1:], strict=False)
    )


def _check_round_trip(path: Path, items: list[Any], write: Callable[..., int],
                      read: Callable[..., Iterator[Any]]) -> None:
    path.write_text("old\n", encoding="utf-8")
    if all(_json_can_hold(x) for x in items):
        assert write(path, items) == len(items)
        assert list(read(path)) == items
    else:  # refused, and the old file is left as it was
        with pytest.raises(DataError, match="holds a surrogate pair as two code points, which JSON cannot keep apart"):
            write(path, items)
        assert path.read_text(encoding="utf-8") == "old\n"


@FAST
@given(items=st.lists(problems(), max_size=4, unique_by=lambda p: p.id),
       gz=st.booleans())
def test_problem_files_round_trip(items: list[Problem], gz: bool) -> None:
    with _tmp() as d:
        path = d / ("p.jsonl.gz" if gz else "p.jsonl")
        _check_round_trip(path, items, write_problems, read_problems)
        # The file is valid UTF-8 whatever the text held (lone surrogates stay escaped).
        if not gz:
            path.read_bytes().decode("utf-8")


@FAST
@given(
    items=st.lists(
        st.builds(
            Prediction,
            id=IDS,
            ranking=st.lists(st.integers(0, 10**6), unique=True, max_size=6),
        ),
        max_size=4, unique_by=lambda p: p.id,
    ),
    data=st.data(),
)
def test_prediction_files_round_trip(items: list[Prediction], data: st.DataObject) -> None:
    scored = [
        Prediction(p.id, p.ranking, data.draw(st.one_of(st.none(), st.lists(
            st.floats(allow_nan=False, allow_infinity=False),
            min_size=len(p.ranking), max_size=len(p.ranking)))))
        for p in items
    ]
    with _tmp() as d:
        _check_round_trip(d / "pred.jsonl", scored, write_predictions, read_predictions)


# (field, bad value) pairs; each must be rejected naming that field.
BAD_FIELDS: list[tuple[str, Any]] = [
    ("id", None), ("id", ""), ("id", 1.5), ("id", True), ("id", ["x"]),
    ("query", None), ("query", 3), ("query", ["q"]),
    ("candidates", []), ("candidates", "abc"), ("candidates", None), ("candidates", ["a", 2]),
    ("candidates", [None]), ("candidates", {"a": 1}),
    ("gold", None), ("gold", [0]), ("gold", [[]]), ("gold", [[99]]), ("gold", [[-1]]),
    ("gold", [[True]]), ("gold", [[0.0]]), ("gold", [[0, 0]]), ("gold", "0"), ("gold", [["0"]]),
    ("relevance", [1.0]), ("relevance", "1"), ("relevance", {"0": 1}),
    ("relevance", [-1.0, 0.0, 0.0]), ("relevance", [10**400, 0, 0]),
    ("relevance", [True, 0, 0]), ("relevance", [None, 0, 0]),
    ("meta", []), ("meta", "m"), ("meta", 3),
]


@pytest.mark.parametrize("bad", BAD_FIELDS + [
    ("id", "__missing__"), ("query", "__missing__"), ("candidates", "__missing__"),
    ("gold", "__missing__"),
])
@EACH
@given(
    good=st.lists(problems(), min_size=1, max_size=4, unique_by=lambda p: p.id),
    position=st.integers(0, 4),
)
def test_invalid_problem_lines_name_the_line_and_field(
    good: list[Problem], bad: tuple[str, Any], position: int
) -> None:
    field, value = bad
    record = {"id": "bad-one", "query": "q", "candidates": ["a", "b", "c"], "gold": [[0]]}
    if value == "__missing__":
        del record[field]
    else:
        record[field] = value
    lines = [p.to_json() for p in good if p.id != "bad-one"]
    position = min(position, len(lines))
    lines.insert(position, record)
    with _tmp() as d:
        path = _jsonl(d / "p.jsonl", lines)
        _expect_data_error(lambda: list(read_problems(path)), position + 1, field)


@pytest.mark.parametrize("kind", ["truncated", "not_object", "unknown_field", "duplicate_id",
                                  "bad_utf8", "huge_int", "deep", "nan_literal"])
@EACH
@given(good=st.lists(problems(), min_size=1, max_size=3, unique_by=lambda p: p.id))
def test_malformed_lines_name_the_line(good: list[Problem], kind: str) -> None:
    lines = [json.dumps(p.to_json()) for p in good]
    first = json.dumps(good[0].to_json())
    extra = {
        "truncated": first[: len(first) // 2],
        "not_object": json.dumps([1, 2, 3]),
        "unknown_field": json.dumps({**good[0].to_json(), "id": "\x00new", "labels": []}),
        "duplicate_id": first,
        "bad_utf8": None,
        "huge_int": '{"id": "n", "query": "q", "candidates": ["a"], "gold": [], "meta": {"x": '
                    + "9" * 5000 + "}}",
        "deep": '{"id": "n", "query": "q", "candidates": ["a"], "gold": [], "meta": {"x": '
                + "[" * 100_000 + "]" * 100_000 + "}}",
        "nan_literal": '{"id": "n", "query": "q", "candidates": ["a"], "gold": [], '
                       '"relevance": [NaN]}',
    }[kind]
    with _tmp() as d:
        path = d / "p.jsonl"
        text = "".join(line + "\n" for line in lines).encode("utf-8")
        text += b'{"id": "\xff"}\n' if extra is None else (extra + "\n").encode("utf-8")
        path.write_bytes(text)
        field = {"duplicate_id": "id", "nan_literal": "relevance"}.get(kind)
        _expect_data_error(lambda: list(read_problems(path)), len(lines) + 1, field)


# ---------------------------------------------------------------- shuffling


@FAST
@given(problem=problems(), seed=st.integers(-(10**9), 10**9))
def test_shuffle_is_a_seeded_permutation_that_keeps_the_problem(problem: Problem, seed: int) -> None:
    out = shuffle_problem(problem, seed)
    perm = out.meta["original_index"]
    assert sorted(perm) == list(range(problem.num_candidates))
    assert perm == candidate_permutation(seed, problem.id, problem.num_candidates)
    assert shuffle_problem(problem, seed) == out  # deterministic
    assert out.candidates == [problem.candidates[o] for o in perm]
    assert {frozenset(perm[i] for i in g) for g in out.gold} == {frozenset(g) for g in problem.gold}
    assert all(g == sorted(g) for g in out.gold) and len(out.gold) == len(set(map(tuple, out.gold)))
    if problem.relevance is not None:
        assert out.relevance == [problem.relevance[o] for o in perm]


# ---------------------------------------------------------------- FM2


@st.composite
def fm2_records(draw: st.DrawFn, pid: str) -> dict[str, Any]:
    pool = draw(st.lists(TEXT, min_size=1, max_size=4))
    retrieved = [
        {"text": t, **({"section_header": draw(st.one_of(SHORT, st.none(), st.integers()))}
                       if draw(st.booleans()) else {})}
        for t in draw(st.lists(st.sampled_from(pool), max_size=6))
    ]
    gold = [{"text": t} for t in draw(st.lists(st.one_of(st.sampled_from(pool), SHORT),
                                               max_size=3))]
    return {"id": draw(st.sampled_from([pid, int(pid)])), "text": draw(TEXT),
            "retrieved_evidence": retrieved, "gold_evidence": gold,
            "label": draw(st.sampled_from(["SUPPORTS", "REFUTES", None]))}


@FAST
@given(data=st.data(), count=st.integers(1, 4), seed=st.integers(0, 5))
def test_fm2_adapter_maps_every_record(data: st.DataObject, count: int, seed: int) -> None:
    records = _as_read([data.draw(fm2_records(str(i))) for i in range(count)])
    with _tmp() as d:
        report = ConvertReport()
        out = list(convert_fm2(_jsonl(d / "fm2.jsonl", records), seed=seed, report=report))
        kept = [r for r in records if r["retrieved_evidence"]]
        assert report.skipped == count - len(kept) and len(out) == len(kept)
        dropped = 0
        for rec, p in zip(kept, out, strict=True):
            texts = [item["text"] for item in rec["retrieved_evidence"]]
            perm = p.meta["original_index"]
            assert p.id == str(rec["id"]) and p.query == rec["text"]
            assert sorted(perm) == list(range(len(texts)))
            assert p.candidates == [texts[o] for o in perm]
            wanted = {g["text"] for g in rec["gold_evidence"]}
            gold = [i for i, c in enumerate(p.candidates) if c in wanted]
            assert p.gold == ([gold] if gold else [])
            missing = [t for t in dict.fromkeys(g["text"] for g in rec["gold_evidence"])
                       if t not in texts]
            assert p.meta.get("missing_gold", []) == missing
            dropped += len(missing)
            headers = [h if isinstance(h := item.get("section_header"), str) else ""
                       for item in rec["retrieved_evidence"]]
            assert p.meta["section_headers"] == [headers[o] for o in perm]
        assert sum(report.dropped.values()) == dropped
        # Order-independent shuffle, and the output survives a write/read round trip.
        again = {p.id: p for p in convert_fm2(_jsonl(d / "rev.jsonl", records[::-1]), seed=seed)}
        assert all(again[p.id] == p for p in out)
        # Text read from JSON never holds a pair that JSON would merge: it always writes.
        assert write_problems(d / "out.jsonl", out) == len(out)
        assert list(read_problems(d / "out.jsonl")) == out


def _break(record: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    """A deep copy of ``record`` with ``path`` set to ``value`` (or deleted for _MISSING)."""
    out = json.loads(json.dumps(record))
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_MISSING = object()


@pytest.mark.parametrize("bad", [
        (["id"], None, "id"), (["id"], True, "id"), (["id"], 1.5, "id"), (["id"], [1], "id"),
        (["id"], "", "id"), (["id"], _MISSING, "id"),
        (["text"], None, "text"), (["text"], 3, "text"), (["text"], _MISSING, "text"),
        (["retrieved_evidence"], "abc", "retrieved_evidence"),
        (["retrieved_evidence"], {"text": "a"}, "retrieved_evidence"),
        (["retrieved_evidence"], _MISSING, "retrieved_evidence"),
        (["retrieved_evidence", 0], "a", "retrieved_evidence"),
        (["retrieved_evidence", 0], {"title": "a"}, "retrieved_evidence"),
        (["retrieved_evidence", 0, "text"], 1, "retrieved_evidence"),
        (["retrieved_evidence", 0, "text"], None, "retrieved_evidence"),
        (["gold_evidence"], None, "gold_evidence"),
        (["gold_evidence", 0], ["a"], "gold_evidence"),
        (["gold_evidence", 0, "text"], {"a": 1}, "gold_evidence"),
])
@EACH
@given(data=st.data(), position=st.integers(0, 2))
def test_fm2_adapter_rejects_bad_fields(
    data: st.DataObject, bad: tuple[list[Any], Any, str], position: int
) -> None:
    path, value, field = bad
    good = [data.draw(fm2_records(str(i))) for i in range(2)]
    base = {"id": "x", "text": "c", "retrieved_evidence": [{"text": "a"}],
            "gold_evidence": [{"text": "a"}]}
    records = good[:position] + [_break(base, path, value)] + good[position:]
    with _tmp() as d:
        src = _jsonl(d / "fm2.jsonl", records)
        _expect_data_error(lambda: list(convert_fm2(src)), position + 1, field)


# ---------------------------------------------------------------- WiCE


@st.composite
def wice_records(draw: st.DrawFn, pid: str) -> dict[str, Any]:
    pool = draw(st.lists(st.one_of(TEXT, st.just("")), min_size=1, max_size=3))
    evidence = draw(st.lists(st.sampled_from(pool), max_size=6))
    n = len(evidence)
    sets = draw(st.lists(
        st.lists(st.integers(0, n - 1), unique=True, max_size=n) if n else st.just([]),
        max_size=4,
    ))
    if sets and draw(st.booleans()):
        sets.append(list(reversed(sets[0])))  # a repeated set
    return {"label": draw(st.sampled_from(["supported", "not_supported"])),
            "supporting_sentences": sets, "claim": draw(TEXT), "evidence": evidence,
            "meta": {"id": pid, "claim_title": draw(SHORT)}}


@FAST
@given(data=st.data(), count=st.integers(1, 4), seed=st.integers(0, 5))
def test_wice_adapter_maps_every_record(data: st.DataObject, count: int, seed: int) -> None:
    records = _as_read([data.draw(wice_records(f"w{i}")) for i in range(count)])
    with _tmp() as d:
        report = ConvertReport()
        out = list(convert_wice(_jsonl(d / "wice.jsonl", records), seed=seed, report=report))
        kept = [r for r in records if r["evidence"]]
        assert report.skipped == count - len(kept) and len(out) == len(kept)
        empty = 0
        for rec, p in zip(kept, out, strict=True):
            perm = p.meta["original_index"]
            assert p.candidates == [rec["evidence"][o] for o in perm]
            want = {frozenset(s) for s in rec["supporting_sentences"] if s}
            assert {frozenset(perm[i] for i in g) for g in p.gold} == want
            assert len(p.gold) == len(want) and all(g == sorted(g) for g in p.gold)
            empty += sum(1 for s in rec["supporting_sentences"] if not s)
        assert report.dropped.get("empty gold set", 0) == empty


@pytest.mark.parametrize("bad", [
        (["supporting_sentences", 0], [5], "supporting_sentences"),
        (["supporting_sentences", 0], [-1], "supporting_sentences"),
        (["supporting_sentences", 0], [True], "supporting_sentences"),
        (["supporting_sentences", 0], [0.0], "supporting_sentences"),
        (["supporting_sentences", 0], [1, 1], "supporting_sentences"),
        (["supporting_sentences", 0], 1, "supporting_sentences"),
        (["supporting_sentences"], {"0": [1]}, "supporting_sentences"),
        (["evidence", 1], 7, "evidence"), (["evidence"], "ab", "evidence"),
        (["claim"], None, "claim"), (["meta"], [], "meta"), (["meta", "id"], None, "id"),
        (["meta", "id"], "", "id"), (["meta", "id"], _MISSING, "id"),
        (["claim"], _MISSING, "claim"),
])
@EACH
@given(data=st.data(), position=st.integers(0, 2))
def test_wice_adapter_rejects_bad_fields(
    data: st.DataObject, bad: tuple[list[Any], Any, str], position: int
) -> None:
    path, value, field = bad
    good = [data.draw(wice_records(f"g{i}")) for i in range(2)]
    base = {"label": "supported", "supporting_sentences": [[0]], "claim": "c",
            "evidence": ["a", "b"], "meta": {"id": "x"}}
    records = good[:position] + [_break(base, path, value)] + good[position:]
    with _tmp() as d:
        src = _jsonl(d / "wice.jsonl", records)
        _expect_data_error(lambda: list(convert_wice(src)), position + 1, field)


# ---------------------------------------------------------------- CLIMATE-FEVER

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


@st.composite
def climate_records(draw: st.DrawFn, pid: str) -> dict[str, Any]:
    evidences = [
        {"evidence_id": draw(SHORT), "evidence_label": draw(st.sampled_from(LABELS)),
         "evidence": draw(TEXT),
         "votes": draw(st.lists(st.sampled_from(LABELS[:3] + [None]), max_size=5))}
        for _ in range(draw(st.integers(0, 6)))
    ]
    return {"claim_id": pid, "claim": draw(TEXT), "claim_label": "SUPPORTS",
            "evidences": evidences}


@FAST
@given(data=st.data(), count=st.integers(1, 4), seed=st.integers(0, 5))
def test_climate_fever_adapter_maps_every_record(
    data: st.DataObject, count: int, seed: int
) -> None:
    records = _as_read([data.draw(climate_records(f"c{i}")) for i in range(count)])
    with _tmp() as d:
        report = ConvertReport()
        src = _jsonl(d / "cf.jsonl", records)
        out = list(convert_climate_fever(src, seed=seed, report=report))
        kept = [r for r in records if r["evidences"]]
        assert report.skipped == count - len(kept) and len(out) == len(kept)
        for rec, p in zip(kept, out, strict=True):
            perm = p.meta["original_index"]
            evs = [rec["evidences"][o] for o in perm]
            assert p.candidates == [e["evidence"] for e in evs]
            assert p.relevance == [
                float(sum(v in ("SUPPORTS", "REFUTES") for v in e["votes"])) for e in evs
            ]
            gold = [i for i, e in enumerate(evs) if e["evidence_label"] != "NOT_ENOUGH_INFO"]
            assert p.gold == ([gold] if gold else [])
            assert p.meta["evidence_labels"] == [e["evidence_label"] for e in evs]


@pytest.mark.parametrize("bad", [
        (["evidences", 0, "votes", 0], ["SUPPORTS"], "votes"),
        (["evidences", 0, "votes", 0], {"v": 1}, "votes"),
        (["evidences", 0, "votes", 0], 3, "votes"),
        (["evidences", 0, "votes"], None, "votes"),
        (["evidences", 0, "votes"], _MISSING, "votes"),
        (["evidences", 0, "evidence"], 1.5, "evidence"),
        (["evidences", 0, "evidence_label"], None, "evidence_label"),
        (["evidences", 0], "text", "evidences[0]"),
        (["evidences"], {"a": 1}, "evidences"),
        (["claim_id"], "", "claim_id"), (["claim_id"], 2.5, "claim_id"),
        (["claim_id"], _MISSING, "claim_id"), (["claim"], ["x"], "claim"),
])
@EACH
@given(data=st.data(), position=st.integers(0, 2))
def test_climate_fever_adapter_rejects_bad_fields(
    data: st.DataObject, bad: tuple[list[Any], Any, str], position: int
) -> None:
    path, value, field = bad
    good = [data.draw(climate_records(f"g{i}")) for i in range(2)]
    base = {"claim_id": "x", "claim": "c", "evidences": [
        {"evidence_id": "e", "evidence_label": "SUPPORTS", "evidence": "s", "votes": ["REFUTES"]}
    ]}
    records = good[:position] + [_break(base, path, value)] + good[position:]
    with _tmp() as d:
        src = _jsonl(d / "cf.jsonl", records)
        _expect_data_error(lambda: list(convert_climate_fever(src)), position + 1, field)


# ---------------------------------------------------------------- FEVER

# A small dump: unicode titles, escapes, empty and duplicate sentences, a long sentence.
WIKI_PAGES: dict[str, dict[int, str]] = {
    "Paris": {0: "Paris is a city .", 1: "", 2: "It has -LRB- many -RRB- museums .",
              3: "Paris is a city ."},
    "Café_Müller": {0: "A ballet -COLON- by Pina Bausch .", 2: "Dancers\u0301 move ."},
    "Ωmega": {0: "Ω " * 3000 + "."},
    "Empty_Page": {0: "", 1: "   "},
    "Savages_-LRB-2012_film-RRB-": {0: "A film .", 1: "It stars Blake Lively ."},
}
PAGE_NAMES = [*WIKI_PAGES, "Missing_Page", unicodedata.normalize("NFD", "Café_Müller"),
              "Bad\ud800Title"]


@pytest.fixture(scope="module")
def wiki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WikiStore]:
    root = tmp_path_factory.mktemp("wiki")
    (root / "wiki-pages").mkdir()
    rows = [{"id": title, "text": "", "lines": "\n".join(f"{i}\t{s}\tlink" for i, s in lines.items())}
            for title, lines in WIKI_PAGES.items()]
    _jsonl(root / "wiki-pages" / "wiki-001.jsonl", rows)
    with WikiStore.build(root / "wiki-pages", root / "wiki.sqlite") as store:
        yield store


def _sentence(page: str | None, line: int | None) -> str | None:
    """The candidate text of a (page, line), or None if the converter cannot use it."""
    if page is None or line is None:
        return None
    lines = WIKI_PAGES.get(unicodedata.normalize("NFC", page)) if "\ud800" not in page else None
    if lines is None:
        return None
    text = unescape(lines.get(line, "")).strip()
    return text or None


@st.composite
def fever_records(draw: st.DrawFn, pid: int) -> dict[str, Any]:
    entry = st.tuples(st.one_of(st.sampled_from(PAGE_NAMES), st.none()),
                      st.one_of(st.integers(-1, 4), st.none()))
    groups = draw(st.lists(st.lists(entry, min_size=1, max_size=3), max_size=3))
    label = draw(st.sampled_from(["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]))
    return {"id": draw(st.sampled_from([pid, str(pid)])),
            "verifiable": "NOT VERIFIABLE" if label == "NOT ENOUGH INFO" else "VERIFIABLE",
            "label": label, "claim": draw(TEXT),
            "evidence": [[[1, 2, page, line] for page, line in g] for g in groups]}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), count=st.integers(1, 4), seed=st.integers(0, 3))
def test_fever_adapter_maps_every_claim(
    wiki: WikiStore, data: st.DataObject, count: int, seed: int
) -> None:
    records = _as_read([data.draw(fever_records(i)) for i in range(count)])
    with _tmp() as d:
        report = ConvertReport()
        out = {p.id: p for p in convert_fever(_jsonl(d / "claims.jsonl", records), wiki=wiki,
                                                 seed=seed, report=report)}
        for rec in records:
            groups = [[(e[2], e[3]) for e in g] for g in rec["evidence"]]
            complete = {frozenset(g) for g in groups
                        if all(_sentence(page, line) is not None for page, line in g)}
            if rec["label"] == "NOT ENOUGH INFO" or not complete:
                assert str(rec["id"]) not in out
                continue
            p = out[str(rec["id"])]
            ids = [tuple(x) for x in p.meta["sentence_ids"]]
            assert sorted(p.meta["original_index"]) == list(range(len(p.candidates)))
            # Every candidate is its sentence; every usable sentence of the named pages is one.
            assert p.candidates == [_sentence(page, line) for page, line in ids]
            named = {unicodedata.normalize("NFC", page) for g in groups for page, _ in g
                     if page is not None}
            usable = {(page, line) for page in named for line in WIKI_PAGES.get(page, {})
                      if _sentence(page, line) is not None}
            assert {(unicodedata.normalize("NFC", a), b) for a, b in ids} == usable
            gold = {frozenset((unicodedata.normalize("NFC", ids[i][0]), ids[i][1]) for i in g)
                    for g in p.gold}
            assert gold == {frozenset((unicodedata.normalize("NFC", a), b) for a, b in g)
                            for g in complete}
        assert report.written == 0 and len(out) + report.skipped == count


@pytest.mark.parametrize("bad", [
        (["evidence"], "Paris", "evidence"), (["evidence"], {"a": 1}, "evidence"),
        (["evidence", 0], "Paris", "evidence"), (["evidence", 0, 0], ["Paris", 0], "evidence"),
        (["evidence", 0, 0, 2], 7, "evidence"), (["evidence", 0, 0, 3], "0", "evidence"),
        (["evidence", 0, 0, 3], True, "evidence"), (["claim"], 5, "claim"),
        (["claim"], _MISSING, "claim"), (["id"], 1.5, "id"), (["id"], _MISSING, "id"),
        (["id"], "", "id"),
])
@EACH_WIKI
@given(data=st.data(), position=st.integers(0, 2))
def test_fever_adapter_rejects_bad_fields(
    wiki: WikiStore, data: st.DataObject, bad: tuple[list[Any], Any, str], position: int
) -> None:
    path, value, field = bad
    good = [data.draw(fever_records(i)) for i in range(2)]
    base = {"id": 99, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "c",
            "evidence": [[[1, 2, "Paris", 0]]]}
    records = good[:position] + [_break(base, path, value)] + good[position:]
    with _tmp() as d:
        src = _jsonl(d / "claims.jsonl", records)
        _expect_data_error(lambda: list(convert_fever(src, wiki=wiki)), position + 1, field)


# ---------------------------------------------------------------- text features


@settings(max_examples=40, deadline=None)
@given(text=TEXT)
def test_tokenize_gives_stable_word_tokens(text: str) -> None:
    tokens = tokenize(text)
    assert tokenize(text) == tokens  # deterministic
    for token in tokens:
        assert token and all(c.isalnum() or unicodedata.category(c)[0] == "M" for c in token)
    # Tokens are fixed points: joining and re-tokenising changes nothing.
    assert tokenize(" ".join(tokens)) == tokens
    assert tokenize(" -LRB- ".join(tokens)) == tokens  # escapes never become tokens


@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(max_codepoint=127), max_size=60))
def test_tokenize_ascii_fast_path_agrees_with_the_unicode_path(text: str) -> None:
    # Appending a non-ASCII word sends the same ASCII text through the Unicode pattern.
    assert tokenize(text + " é") == tokenize(text) + ["é"]


@FEW
@given(value=st.one_of(st.none(), st.integers(), st.binary(max_size=4), st.lists(SHORT)))
def test_tokenize_rejects_non_strings(value: Any) -> None:
    with pytest.raises(TypeError, match=f"^tokenize expects a str, got {type(value).__name__}$"):
        tokenize(value)


VOCAB = ["the", "cat", "sat", "é", "ωmega", "1999", "naïve", "ﬁ"]


@st.composite
def sentences(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.one_of(st.sampled_from(VOCAB), SHORT), max_size=8))
    text = " ".join(words)
    if draw(st.integers(0, 5)) == 0:
        text = text * draw(st.integers(100, 1000))
    return text


def _mean_vector(text: str, table: dict[str, np.ndarray], dim: int) -> np.ndarray:
    rows = [table[t] for t in tokenize(text) if t in table]
    return np.mean(rows, axis=0) if rows else np.zeros(dim)


@FAST
@given(
    query=sentences(),
    candidates=st.lists(sentences(), max_size=5).map(lambda c: c + c[:1]),  # a duplicate
    dim=st.integers(1, 4), data=st.data(),
)
def test_claim_sentence_features_match_the_reference(
    query: str, candidates: list[str], dim: int, data: st.DataObject
) -> None:
    coordinate = st.integers(-30, 30).map(lambda i: i / 10)
    matrix = data.draw(st.lists(st.lists(coordinate, min_size=dim, max_size=dim),
                                min_size=len(VOCAB), max_size=len(VOCAB)))
    vectors = WordVectors(VOCAB, np.array(matrix))
    table = {w: np.asarray(vectors.get(w), dtype=np.float64) for w in VOCAB}
    X = claim_sentence_features(query, candidates, vectors)
    assert X.shape == (len(candidates), dim) and X.dtype == np.float32
    q = _mean_vector(query, table, dim)
    for row, cand in zip(X, candidates, strict=True):
        np.testing.assert_allclose(row, q * _mean_vector(cand, table, dim), rtol=1e-4, atol=1e-5)
    scores = cosine_scores(query, candidates, vectors)
    assert scores.shape == (len(candidates),)
    assert bool(np.all((scores >= -1) & (scores <= 1)))
    for score, cand in zip(scores, candidates, strict=True):
        s = _mean_vector(cand, table, dim)
        denom = np.linalg.norm(q) * np.linalg.norm(s)
        assert math.isclose(score, float(q @ s / denom) if denom > 0 else 0.0,
                            rel_tol=1e-4, abs_tol=1e-5)


@pytest.mark.parametrize("case", ["query_none", "query_bytes", "query_list", "cands_str",
                                  "cands_none", "cands_int", "cand_none", "cand_bytes",
                                  "cand_int"])
@pytest.mark.parametrize("which", [claim_sentence_features, cosine_scores])
def test_pairwise_features_reject_bad_inputs(case: str, which: Callable[..., Any]) -> None:
    vectors = WordVectors(["a", "b"], np.eye(2))
    query: Any = "a b"
    candidates: Any = ["a", "b b"]
    if case.startswith("query"):
        query = {"query_none": None, "query_bytes": b"a", "query_list": ["a"]}[case]
    elif case.startswith("cands"):
        candidates = {"cands_str": "a b", "cands_none": None, "cands_int": 3}[case]
    else:
        candidates = ["a", {"cand_none": None, "cand_bytes": b"a", "cand_int": 1}[case]]
    message = {
        "query_none": "query must be a str, got NoneType",
        "query_bytes": "query must be a str, got bytes",
        "query_list": "query must be a str, got list",
        "cands_str": "candidates must be a list of strings, got a single string",
        "cands_none": "candidates must be a list of strings, got NoneType",
        "cands_int": "candidates must be a list of strings, got int",
        "cand_none": "text 1 is NoneType, expected str",
        "cand_bytes": "text 1 is bytes, expected str",
        "cand_int": "text 1 is int, expected str",
    }[case]
    with pytest.raises(DgnUserError, match=f"^{message}$"):
        which(query, candidates, vectors)


# ---------------------------------------------------------------- regressions
# Minimal cases the properties above found; kept explicit so they are always checked.


def test_regression_lone_surrogates_round_trip(tmp_path: Path) -> None:
    # json.loads turns a "\ud800" escape into a lone surrogate, which UTF-8 cannot encode.
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a\\ud800", "query": "\\udfff", "candidates": ["x\\ud800y"], '
                   '"gold": [[0]], "meta": {"\\ud800": "\\udc00\\ud800"}}\n', encoding="utf-8")
    problems = list(read_problems(src))
    assert problems[0].candidates == ["x\ud800y"]
    assert write_problems(tmp_path / "out.jsonl", problems) == 1
    assert list(read_problems(tmp_path / "out.jsonl")) == problems
    shuffled = shuffle_problem(problems[0], 3)  # hashing the id must not fail either
    assert shuffled.meta["original_index"] == [0]
    with pytest.raises(DataError, match="surrogate pair"):
        write_problems(tmp_path / "pair.jsonl", [Problem("p", "\ud83d\ude00", ["x"], [])])


def test_regression_fever_titles_with_lone_surrogates(
    wiki: WikiStore, tmp_path: Path
) -> None:
    claims = _jsonl(tmp_path / "claims.jsonl", [
        {"id": 1, "label": "SUPPORTS", "claim": "c",
         "evidence": [[[1, 2, "Bad\ud800Title", 0]], [[1, 2, "Paris", 0]]]},
    ])
    report = ConvertReport()
    (problem,) = convert_fever(claims, wiki=wiki, report=report)
    assert report.dropped["missing page: Bad\ud800Title"] == 1
    assert "Bad\ud800Title" not in wiki and wiki.get_lines("Bad\ud800Title") is None
    dump = tmp_path / "wiki-pages"
    dump.mkdir()
    _jsonl(dump / "wiki-001.jsonl", [{"id": "T\ud800", "text": "", "lines": "0\tA ."}])
    with pytest.raises(DataError) as info:
        WikiStore.build(dump, tmp_path / "w.sqlite")
    assert info.value.line == 1 and info.value.field == "id"
