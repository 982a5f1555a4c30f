"""RRF, CombSUM, CombMNZ and Borda: against ranx on random runs, and small cases by hand."""

from __future__ import annotations

import random

import pytest

from dgn.fusion import fuse
from dgn.fusion.classic import normalise


def _random_runs(seed: int, n_runs: int = 3, queries: int = 12) -> list[dict[str, dict[str, float]]]:
    rng = random.Random(seed)
    return [
        {
            f"q{q}": {f"d{d}": rng.random() for d in rng.sample(range(25), rng.randint(2, 12))}
            for q in range(queries)
        }
        for _ in range(n_runs)
    ]


@pytest.mark.reference
@pytest.mark.parametrize(("ours", "theirs"), [
    ("rrf", "rrf"), ("combsum", "sum"), ("combmnz", "mnz"), ("borda", "bordafuse"),
])
def test_matches_ranx_on_random_runs(ours: str, theirs: str) -> None:
    ranx = pytest.importorskip("ranx")
    runs = _random_runs(seed=7)
    expected = ranx.fuse([ranx.Run(r) for r in runs], method=theirs, norm="min-max").to_dict()
    got = fuse(runs, method=ours)
    assert set(got) == set(expected)
    for query, items in expected.items():
        assert set(got[query]) == set(items), query
        for item, score in items.items():
            assert got[query][item] == pytest.approx(score, rel=1e-9, abs=1e-12), (query, item)
        # and the result is in descending order of score
        values = list(got[query].values())
        assert values == sorted(values, reverse=True)


def test_rrf_by_hand() -> None:
    runs = [
        {"q": {"a": 3.0, "b": 2.0, "c": 1.0}},
        {"q": {"b": 0.9, "d": 0.5}},
    ]
    got = fuse(runs, method="rrf", k=1)
    assert got == {"q": pytest.approx({"b": 1 / 3 + 1 / 2, "a": 1 / 2, "d": 1 / 3, "c": 1 / 4})}
    assert list(got["q"]) == ["b", "a", "d", "c"]


def test_comb_by_hand() -> None:
    runs = [
        {"q": {"a": 4.0, "b": 2.0, "c": 0.0}},   # min-max: 1, 0.5, 0
        {"q": {"b": 10.0, "c": 5.0}},            # min-max: 1, 0
    ]
    assert fuse(runs, method="combsum") == {"q": pytest.approx({"b": 1.5, "a": 1.0, "c": 0.0})}
    assert fuse(runs, method="combmnz") == {"q": pytest.approx({"b": 3.0, "a": 1.0, "c": 0.0})}
    assert fuse(runs, method="combsum", norm="none") == {
        "q": pytest.approx({"b": 12.0, "c": 5.0, "a": 4.0})
    }


def test_borda_by_hand() -> None:
    # candidates a, b, c (3 of them). Run 1 ranks a, b: 3, 2 points; c missing gets
    # (3 - 2 + 1) / 2 = 1. Run 2 ranks c: 3 points; a, b missing get (3 - 1 + 1) / 2 = 1.5.
    runs = [{"q": {"a": 2.0, "b": 1.0}}, {"q": {"c": 9.0}}]
    got = fuse(runs, method="borda")
    assert got == {"q": pytest.approx({"a": 3 + 1.5, "c": 1 + 3, "b": 2 + 1.5})}
    assert list(got["q"]) == ["a", "c", "b"]


def test_queries_missing_from_some_runs_and_ties() -> None:
    runs = [{"q1": {"a": 1.0, "b": 1.0}}, {"q2": {"x": 0.5}}]
    got = fuse(runs, method="rrf", k=0)
    assert got == {"q1": {"a": 1.0, "b": 0.5}, "q2": {"x": 1.0}}  # a tie keeps the given order


def test_normalise_conventions() -> None:
    assert normalise([2.0, 2.0], "min-max") == [1.0, 1.0]  # ranx gives 0 here: documented
    assert normalise([1.0, 3.0], "sum") == [0.25, 0.75]
    assert normalise([1.0, 3.0], "max") == [1 / 3, 1.0]
    assert normalise([1.0, 3.0], "zmuv") == [-1.0, 1.0]


@pytest.mark.parametrize(("runs", "kwargs", "needle"), [
    ({"q": {"a": 1.0}}, {}, "sequence of runs"),
    ([], {}, "runs is empty"),
    ([{"q": {"a": float("nan")}}], {}, "run 0, query 'q', item 'a'"),
    ([{"q": {"a": "1"}}], {}, "finite number"),
    ([{"q": ["a"]}], {}, "expected {item: score}"),
    ([{1: {"a": 1.0}}], {}, "query ids must be str"),
    ([{"q": {"a": 1.0}}], {"method": "comb"}, "unknown fusion method 'comb'"),
    ([{"q": {"a": 1.0}}], {"method": "combsum", "norm": "l2"}, "unknown norm 'l2'"),
    ([{"q": {"a": 1.0}}], {"method": "rrf", "k": -1}, "k must be"),
    ([{"q": {"a": 1.0}}], {"method": "rrf", "kk": 3}, "unexpected parameter"),
])
def test_bad_input(runs, kwargs, needle) -> None:
    with pytest.raises(ValueError, match=needle.replace("{", r"\{").replace("}", r"\}").replace("(", r"\(")):
        fuse(runs, **kwargs)
