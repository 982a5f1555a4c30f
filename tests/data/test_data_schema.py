"""Selection JSONL and predictions JSONL: validation, reading, atomic writing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dgn.data.schema import (
    Prediction,
    PredictionReader,
    Problem,
    ProblemReader,
    read_predictions,
    read_problems,
    write_predictions,
    write_problems,
)
from dgn.errors import DataError, DgnUserError

GOOD: dict[str, Any] = {
    "id": "c1",
    "query": "Paris is the capital of France.",
    "candidates": ["s0", "s1", "s2", "s3"],
    "gold": [[2, 0], [3]],
    "relevance": [1, 0, 2.5, 1],
    "meta": {"label": "SUPPORTS"},
}


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _with(**changes: Any) -> dict[str, Any]:
    obj = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is _DELETE:
            del obj[key]
        else:
            obj[key] = value
    return obj


_DELETE = object()


def test_good_problem_round_trip() -> None:
    p = Problem.from_json(GOOD)
    assert p.id == "c1" and p.relevance == [1.0, 0.0, 2.5, 1.0]
    assert p.gold_union == {0, 2, 3}
    assert p.num_candidates == 4
    assert Problem.from_json(p.to_json()) == p
    assert p.to_json()["gold"] == [[2, 0], [3]]


def test_int_id_becomes_string_and_optional_fields() -> None:
    p = Problem.from_json({"id": 75397, "query": "q", "candidates": ["a", "b"], "gold": []})
    assert p.id == "75397" and p.relevance is None and p.meta == {}
    assert p.relevance_or_binary() == [0.0, 0.0]
    assert "relevance" not in p.to_json()
    q = Problem.from_json(_with(relevance=None, meta=None))
    assert q.relevance is None and q.meta == {}


def test_relevance_or_binary() -> None:
    p = Problem("x", "q", ["a", "b", "c"], [[0], [0, 2]])
    assert p.relevance_or_binary() == [1.0, 0.0, 1.0]
    r = Problem("x", "q", ["a", "b", "c"], [[0]], relevance=[0, 3, 1])
    assert r.relevance_or_binary() == [0.0, 3.0, 1.0]


def test_problem_copies_caller_lists() -> None:
    cands = ["a", "b"]
    p = Problem("x", "q", cands, [[1]])
    cands.append("c")
    assert p.candidates == ["a", "b"]


BAD_PROBLEMS = [
    (_with(id=_DELETE), "id", "missing required field"),
    (_with(query=_DELETE), "query", "missing required field"),
    (_with(candidates=_DELETE), "candidates", "missing required field"),
    (_with(gold=_DELETE), "gold", "missing required field"),
    (_with(id=True), "id", "must be a string"),
    (_with(id=1.5), "id", "must be a string"),
    (_with(id=""), "id", "non-empty"),
    (_with(query=3), "query", "must be a string"),
    (_with(candidates="s0 s1"), "candidates", "list of strings"),
    (_with(candidates=[], gold=[], relevance=[]), "candidates", "empty candidate list"),
    (_with(candidates=["a", 2, "c", "d"]), "candidates", "candidate 1"),
    (_with(gold=[2, 0]), "gold", "gold set 0 must be a list"),
    (_with(gold={"0": [1]}), "gold", "list of lists"),
    (_with(gold=[[0], []]), "gold", "gold set 1 is empty"),
    (_with(gold=[[0, True]]), "gold", "expected an integer index"),
    (_with(gold=[[0, 1.0]]), "gold", "expected an integer index"),
    (_with(gold=[["1"]]), "gold", "expected an integer index"),
    (_with(gold=[[0], [12]]), "gold", "index 12 out of range for 4 candidates"),
    (_with(gold=[[-1]]), "gold", "index -1 out of range for 4 candidates"),
    (_with(gold=[[1, 1]]), "gold", "repeats an index"),
    (_with(relevance=[1, 0, 2]), "relevance", "has 3 values but there are 4 candidates"),
    (_with(relevance=[1, 0, -2, 0]), "relevance", "negative"),
    (_with(relevance=[1, 0, "2", 0]), "relevance", "must be a number"),
    (_with(relevance=[1, 0, False, 0]), "relevance", "must be a number"),
    (_with(relevance="high"), "relevance", "list of numbers"),
    (_with(meta=[1]), "meta", "must be an object"),
]


@pytest.mark.parametrize(("obj", "field", "message"), BAD_PROBLEMS)
def test_bad_problem_fields(obj: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(DataError) as info:
        Problem.from_json(obj, path="dev.jsonl", line=7)
    err = info.value
    assert err.field == field
    assert message in err.message
    assert str(err).startswith(f"dev.jsonl:7: field {field!r}: ")
    assert isinstance(err, DgnUserError)


def test_non_finite_relevance_and_unknown_fields() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(DataError, match="not finite"):
            Problem("x", "q", ["a"], [], relevance=[bad])
    with pytest.raises(DataError, match="unknown field.*'relevence'.*meta"):
        Problem.from_json(_with(relevence=[0, 0, 0, 0]))
    with pytest.raises(DataError, match="JSON object"):
        Problem.from_json([1, 2], path="a.jsonl", line=1)


def test_read_problems_plain_gz_and_blank_lines(tmp_path: Path) -> None:
    lines = [json.dumps(_with(id=f"p{i}")) for i in range(3)]
    plain = _write_lines(tmp_path / "p.jsonl", [lines[0], "", "  ", lines[1], lines[2], ""])
    packed = tmp_path / "p.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    for path in (plain, packed):
        assert [p.id for p in read_problems(path)] == ["p0", "p1", "p2"]


def test_read_problems_malformed_json_names_line(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "p.jsonl", [json.dumps(GOOD), "", '{"id": "c2", "query": '])
    with pytest.raises(DataError) as info:
        list(read_problems(path))
    err = info.value
    assert (err.path, err.line) == (str(path), 3)
    assert "malformed JSON" in err.message and "\n" not in str(err)


def test_read_problems_bad_field_names_line(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "p.jsonl", [json.dumps(GOOD), json.dumps(_with(id="c2", gold=[[9]]))]
    )
    with pytest.raises(DataError, match=r"p\.jsonl:2: field 'gold': .*index 9 out of range"):
        list(read_problems(path))


def test_duplicate_id(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "p.jsonl",
        [json.dumps(_with(id=5)), json.dumps(_with(id="6")), json.dumps(_with(id="5"))],
    )
    with pytest.raises(DataError, match="duplicate id '5' \\(first seen on line 1\\)") as info:
        list(read_problems(path))
    assert info.value.line == 3 and info.value.field == "id"


def test_skip_invalid_counts(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps(_with(id="a")),
            "{oops",
            json.dumps(_with(id="b", candidates=[])),
            json.dumps(_with(id="a")),
            json.dumps(_with(id="c")),
        ],
    )
    reader = ProblemReader(path, skip_invalid=True)
    assert [p.id for p in reader] == ["a", "c"]
    assert (reader.read, reader.skipped) == (2, 3)
    assert [e.line for e in reader.errors] == [2, 3, 4]
    assert [p.id for p in read_problems(path, skip_invalid=True)] == ["a", "c"]


def test_missing_file_is_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read file"):
        list(read_problems(tmp_path / "missing.jsonl"))
    # even with skip_invalid: an unreadable file is not a bad line
    with pytest.raises(DataError, match="cannot read file"):
        list(read_problems(tmp_path / "missing.jsonl", skip_invalid=True))


def test_write_problems_round_trip_plain_and_gz(tmp_path: Path) -> None:
    problems = [Problem.from_json(_with(id=f"p{i}", query=f"ünïcode {i}")) for i in range(4)]
    for name in ("out.jsonl", "out.jsonl.gz"):
        path = tmp_path / name
        assert write_problems(path, iter(problems)) == 4
        assert list(read_problems(path)) == problems
    assert (tmp_path / "out.jsonl.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert "ünïcode 0" in (tmp_path / "out.jsonl").read_text(encoding="utf-8")


def test_write_problems_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_problems(path, [Problem("old", "q", ["a"], [])])
    before = path.read_bytes()

    def broken() -> Any:
        for i in range(1000):
            yield Problem(f"p{i}", "q" * 100, ["a"], [[0]])
        raise RuntimeError("source failed midway")

    with pytest.raises(RuntimeError, match="midway"):
        write_problems(path, broken())
    assert path.read_bytes() == before
    with pytest.raises(DataError, match="duplicate id 'x'"):
        write_problems(path, [Problem("x", "q", ["a"], []), Problem("x", "q", ["b"], [])])
    with pytest.raises(DataError, match="not JSON-serialisable"):
        write_problems(path, [Problem("x", "q", ["a"], [], meta={"bad": object()})])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


# ---- predictions -----------------------------------------------------------------


def test_prediction_round_trip(tmp_path: Path) -> None:
    preds = [
        Prediction("a", [5, 2, 9], [0.9, 0.5, -1.0]),
        Prediction("b", []),
        Prediction("c", [0]),
    ]
    path = tmp_path / "preds.jsonl"
    assert write_predictions(path, preds) == 3
    assert list(read_predictions(path)) == preds
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"id": "a", "ranking": [5, 2, 9], "scores": [0.9, 0.5, -1.0]}


BAD_PREDICTIONS = [
    ({"ranking": [1]}, "id", "missing required field"),
    ({"id": "a"}, "ranking", "missing required field"),
    ({"id": "a", "ranking": "1 2"}, "ranking", "list of candidate indices"),
    ({"id": "a", "ranking": [1, -2]}, "ranking", "entry 1 is negative"),
    ({"id": "a", "ranking": [1, 2.0]}, "ranking", "integer index"),
    ({"id": "a", "ranking": [True]}, "ranking", "integer index"),
    ({"id": "a", "ranking": [3, 1, 3]}, "ranking", "index 3 appears more than once"),
    ({"id": "a", "ranking": [3, 1], "scores": [0.5]}, "scores", "has 1 values but ranking has 2"),
    ({"id": "a", "ranking": [3], "scores": ["x"]}, "scores", "must be a number"),
    ({"id": "a", "ranking": [3], "scores": [float("nan")]}, "scores", "not finite"),
]


@pytest.mark.parametrize(("obj", "field", "message"), BAD_PREDICTIONS)
def test_bad_predictions(tmp_path: Path, obj: dict[str, Any], field: str, message: str) -> None:
    path = _write_lines(tmp_path / "preds.jsonl", ['{"id": "ok", "ranking": [0]}', json.dumps(obj)])
    with pytest.raises(DataError) as info:
        list(read_predictions(path))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 2, field)
    assert message in err.message


def test_prediction_reader_duplicates_and_skips(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "preds.jsonl",
        [
            '{"id": 1, "ranking": [0]}',
            '{"id": "1", "ranking": [1]}',
            "nope",
            '{"id": 2, "ranking": []}',
        ],
    )
    with pytest.raises(DataError, match="duplicate id '1'"):
        list(read_predictions(path))
    reader = PredictionReader(path, skip_invalid=True)
    assert [p.id for p in reader] == ["1", "2"] and reader.skipped == 2


# ---- property: anything valid survives a write/read round trip ---------------------

_text = st.text(max_size=20)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 8))
    cands = draw(st.lists(_text, min_size=n, max_size=n))
    gold = draw(
        st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True), max_size=3)
    )
    rel = draw(
        st.none()
        | st.lists(st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=n, max_size=n)
    )
    meta = draw(st.dictionaries(st.text(max_size=5), st.integers() | _text, max_size=3))
    return Problem(draw(st.text(min_size=1, max_size=10)), draw(_text), cands, gold, rel, meta)


@settings(max_examples=60, deadline=None)
@given(st.lists(problems(), max_size=5, unique_by=lambda p: p.id))
def test_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory, items: list[Problem]
) -> None:
    path = tmp_path_factory.mktemp("rt") / "p.jsonl"
    assert write_problems(path, items) == len(items)
    assert list(read_problems(path)) == items
