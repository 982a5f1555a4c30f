"""Tests for dgn.metrics: set metrics, graded metrics, specs, the accumulator and tables.

References: hand-computed values (arithmetic in the comments), brute-force versions written
here independently of the package (exact fractions), and ranx as an independent library
for the metrics whose conventions match ours.
"""

from __future__ import annotations

import doctest
import importlib
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dgn.metrics import (
    METRIC_NAMES,
    Metric,
    SelectionMetrics,
    average_precision,
    evaluate_rankings,
    f1_from_precision_recall,
    format_table,
    gold_relevance,
    mrr,
    ndcg_at_k,
    parse_metric,
    precision_at_k,
    recall_at_k,
    strict_at_k,
)

#: Float tolerance against ranx (float64 sums of the same terms, maybe in another order).
RANX_TOL = 1e-9
#: Tolerance between two float paths of our own (accumulated sums vs a per-problem loop).
SUM_TOL = 1e-12

LOG2_3 = math.log2(3)
LOG2_5 = math.log2(5)


# -- brute-force references (exact fractions, written from the definitions) ---------------


def bf_picks(ranking):
    return [r for r in ranking if r != -1]


def bf_recall(ranking, gold, k):
    top = bf_picks(ranking)[:k]
    fractions = [Fraction(sum(x in top for x in set(g)), len(set(g))) for g in gold if g]
    return max(fractions) if fractions else None


def bf_strict(ranking, gold, k):
    top = bf_picks(ranking)[:k]
    groups = [set(g) for g in gold if g]
    if not groups:
        return None
    return Fraction(int(any(all(x in top for x in g) for g in groups)))


def bf_precision(ranking, gold, k, empty=Fraction(0)):
    if not any(gold):
        return None
    top = bf_picks(ranking)[:k]
    if not top:
        return empty
    relevant = {x for g in gold for x in g}
    return Fraction(sum(x in relevant for x in top), len(top))


def bf_f1(p, r):
    return Fraction(0) if p + r == 0 else 2 * p * r / (p + r)


def bf_macro(values):
    values = [v for v in values if v is not None]
    return sum(values, Fraction(0)) / len(values) if values else None


# -- set metrics: hand cases ---------------------------------------------------------------


def test_recall_alternative_sets_takes_the_best_covered():
    ranking, gold = [4, 2, 9, 5], [[2, 5], [9, 7, 8]]
    assert recall_at_k(ranking, gold, 1) == 0.0  # S = {4}
    assert recall_at_k(ranking, gold, 2) == 0.5  # {2,5}: 1/2 ; {9,7,8}: 0/3
    assert recall_at_k(ranking, gold, 3) == 0.5  # {2,5}: 1/2 ; {9,7,8}: 1/3
    assert recall_at_k(ranking, gold, 4) == 1.0  # {2,5} complete


def test_strict_needs_one_complete_set():
    ranking, gold = [4, 2, 9, 5], [[2, 5], [9]]
    assert strict_at_k(ranking, gold, 2) == 0.0  # 2 without 5; 9 not yet
    assert strict_at_k(ranking, gold, 3) == 1.0  # {9} complete
    assert strict_at_k([2, 9], [[2, 5], [9, 7]], 2) == 0.0  # both sets half covered


def test_precision_uses_union_of_sets_and_actual_picks():
    gold = [[2, 5], [9]]
    assert precision_at_k([4, 2, 9], gold, 3) == pytest.approx(2 / 3)  # 2, 9 gold; 4 not
    assert precision_at_k([4, 2, 9], gold, 1) == 0.0
    # Fewer picks than k: divide by the 2 actual picks, not by k = 5 -> 1/2.
    assert precision_at_k([2, 4], gold, 5) == 0.5
    # -1 entries are not picks: picks are [2] -> 1/1.
    assert precision_at_k([2, -1, -1], gold, 3) == 1.0


def test_minus_one_entries_are_dropped_before_the_cutoff():
    # Picks are [3, 1]; with k = 2 both count, so recall of {1} is 1.
    assert recall_at_k([3, -1, 1], [[1]], 2) == 1.0


def test_no_picks():
    assert recall_at_k([], [[1]], 3) == 0.0
    assert strict_at_k([-1, -1], [[1]], 3) == 0.0
    assert precision_at_k([], [[1]], 3) == 0.0  # default: no pick earns nothing
    assert precision_at_k([-1], [[1]], 3, zero_division=1.0) == 1.0  # FEVER's convention


@pytest.mark.parametrize("gold", [[], [[]], [[], []]])
def test_no_gold_is_not_scored(gold):
    assert recall_at_k([1, 2], gold, 2) is None
    assert strict_at_k([1, 2], gold, 2) is None
    assert precision_at_k([1, 2], gold, 2) is None


def test_empty_group_beside_a_real_one_is_ignored():
    # [[], [3]]: only {3} counts (an empty set would make recall 0/0).
    assert recall_at_k([3], [[], [3]], 1) == 1.0


def test_f1_from_precision_recall():
    assert f1_from_precision_recall(0.0, 0.0) == 0.0
    assert f1_from_precision_recall(1.0, 0.0) == 0.0
    assert f1_from_precision_recall(0.5, 0.5) == 0.5
    # 2 * 0.8 * 0.4 / 1.2 = 0.64 / 1.2 = 0.5333...
    assert f1_from_precision_recall(0.8, 0.4) == pytest.approx(0.64 / 1.2)
    assert math.isnan(f1_from_precision_recall(math.nan, math.nan))


def test_array_and_tensor_inputs():
    gold = [[1, 4]]
    expected = recall_at_k([3, 1, -1], gold, 2)  # {1, 4}: 1 of 2 -> 0.5
    assert expected == 0.5
    assert recall_at_k(np.array([3, 1, -1]), gold, 2) == expected
    assert recall_at_k(torch.tensor([3, 1, -1]), gold, 2) == expected
    assert recall_at_k([np.int64(3), np.int64(1)], np.array([[1, 4]]), 2) == expected
    assert ndcg_at_k(torch.tensor([1]), np.array([0.0, 2.0])) == 1.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: recall_at_k([1, 1], [[1]], 2), "repeats candidate 1"),
        (lambda: recall_at_k([1, -2], [[1]], 2), r"ranking\[1\].*>= 0"),
        (lambda: recall_at_k([1.0], [[1]], 2), r"ranking\[0\].*integer.*float"),
        (lambda: recall_at_k([True], [[1]], 2), "bool"),
        (lambda: recall_at_k("12", [[1]], 2), "sequence"),
        (lambda: recall_at_k([1], [1, 2], 2), r"gold\[0\].*alternative sets"),
        (lambda: recall_at_k([1], [[-1]], 2), r"gold\[0\]\[0\]"),
        (lambda: recall_at_k([1], [[1]], 0), "k must be a positive int, got 0"),
        (lambda: recall_at_k([1], [[1]], 2.0), "k must be a positive int"),
        (lambda: precision_at_k([1], [[1]], 1, zero_division=2), "zero_division"),
        (lambda: ndcg_at_k([3], [0, 1]), "picks candidate 3 but relevance has only 2"),
        (lambda: ndcg_at_k([0], [0, -1]), r"relevance\[1\] must be finite and >= 0"),
        (lambda: ndcg_at_k([0], [math.nan]), "finite"),
        (lambda: ndcg_at_k([0], [1], gain="log"), "gain must be one of"),
        (lambda: mrr([0], [1], k=0), "positive int or None"),
        (lambda: gold_relevance([[5]], num_candidates=3), "out of range for 3"),
    ],
)
def test_input_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- graded metrics: hand cases --------------------------------------------------------------


def test_ndcg_linear_and_exp_gain_by_hand():
    relevance = [0, 1, 0, 2, 3]
    ranking = [3, 0, 1]
    # linear: DCG@3 = 2/1 + 0/log2(3) + 1/2 = 2.5 ; IDCG@3 = 3/1 + 2/log2(3) + 1/2
    idcg = 3 + 2 / LOG2_3 + 1 / 2
    assert ndcg_at_k(ranking, relevance, 3) == pytest.approx(2.5 / idcg)
    # exp: gains 2^r - 1 -> DCG@3 = 3/1 + 0 + 1/2 ; IDCG@3 = 7/1 + 3/log2(3) + 1/2
    idcg_exp = 7 + 3 / LOG2_3 + 1 / 2
    assert ndcg_at_k(ranking, relevance, 3, gain="exp") == pytest.approx(3.5 / idcg_exp)
    # k = 1: DCG = 2, IDCG = 3.
    assert ndcg_at_k(ranking, relevance, 1) == pytest.approx(2 / 3)
    # No cutoff: DCG over the 3 picks, IDCG over all 3 relevant grades (same as k = 3 here).
    assert ndcg_at_k(ranking, relevance) == pytest.approx(2.5 / idcg)


def test_ndcg_short_ranking_is_not_rewarded():
    # One pick of grade 1 out of grades [1, 1]: DCG@5 = 1, IDCG@5 = 1 + 1/log2(3).
    assert ndcg_at_k([0], [1, 1], 5) == pytest.approx(1 / (1 + 1 / LOG2_3))


def test_graded_metrics_without_relevant_candidates_are_none():
    assert ndcg_at_k([0, 1], [0, 0]) is None
    assert mrr([0, 1], [0, 0]) is None
    assert average_precision([0, 1], [0, 0]) is None


def test_mrr_and_average_precision_by_hand():
    relevance = [0, 1, 0, 2, 0]
    assert mrr([0, 2, 3, 1], relevance) == pytest.approx(1 / 3)  # first relevant at rank 3
    assert mrr([0, 2, 3, 1], relevance, k=2) == 0.0
    assert mrr([-1, 3], relevance) == 1.0  # -1 is not a rank
    # Relevant at ranks 3 and 4: (1/3 + 2/4) / 2 relevant candidates.
    assert average_precision([0, 2, 3, 1], relevance) == pytest.approx((1 / 3 + 2 / 4) / 2)
    # Cut at 3: only rank 3 counts, still divided by R = 2.
    assert average_precision([0, 2, 3, 1], relevance, k=3) == pytest.approx((1 / 3) / 2)


def test_gold_relevance():
    assert gold_relevance([[2, 5], [1]], 7) == [0, 1, 1, 0, 0, 1, 0]
    assert gold_relevance([[2]]) == [0, 0, 1]
    assert gold_relevance([]) == []


# -- ranx as an independent reference ----------------------------------------------------------


def _random_graded_problems(rng: random.Random, count: int):
    """Problems with integer grades 0..3, at least one relevant, and a nonempty ranking."""
    problems = []
    for _ in range(count):
        n = rng.randint(1, 15)
        relevance = [rng.choice([0, 0, 0, 1, 2, 3]) for _ in range(n)]
        if not any(relevance):
            relevance[rng.randrange(n)] = rng.randint(1, 3)
        ranking = rng.sample(range(n), rng.randint(1, n))
        if rng.random() < 0.3:  # greedy pads with -1 when it runs out of candidates
            ranking = ranking + [-1] * rng.randint(1, 3)
        problems.append((ranking, relevance))
    return problems


RANX_KS = (1, 3, 5, 10)


@pytest.fixture(scope="module")
def ranx_scores():
    """One ranx evaluation of every compared metric (numba start-up is paid once)."""
    ranx = pytest.importorskip("ranx")
    problems = _random_graded_problems(random.Random(1234), 300)
    qrels, run = {}, {}
    for q, (ranking, relevance) in enumerate(problems):
        qid = f"q{q:04d}"
        qrels[qid] = {f"d{v}": int(r) for v, r in enumerate(relevance) if r > 0}
        picks = [v for v in ranking if v != -1]
        # Distinct, decreasing scores so that ranx's sort reproduces our order.
        run[qid] = {f"d{v}": float(len(picks) - i) for i, v in enumerate(picks)}
    # ranx conventions (checked in ranx/metrics/*.py, v0.3): "ndcg" is the Järvelin
    # linear gain (our default), "ndcg_burges" the 2^rel - 1 gain (our gain="exp"); both
    # take the ideal from all judged documents. "recall" = hits / #relevant, "map" divides
    # by #relevant, "mrr" is 1/rank of the first relevant: all as ours. "precision@k"
    # divides by k, ours by the number of actual picks: compared only where they agree.
    names = ["ndcg", "ndcg_burges", "mrr", "map"]
    metrics = names + [f"{m}@{k}" for m in [*names, "recall", "precision"] for k in RANX_KS]
    qrels_obj, run_obj = ranx.Qrels(qrels), ranx.Run(run)
    ranx.evaluate(qrels_obj, run_obj, metrics, return_mean=False)
    scores = {m: {qid: float(v) for qid, v in run_obj.scores[m].items()} for m in metrics}
    return problems, scores


@pytest.mark.reference
@pytest.mark.parametrize("k", [None, *RANX_KS])
def test_graded_metrics_match_ranx(ranx_scores, k):
    problems, scores = ranx_scores
    suffix = "" if k is None else f"@{k}"
    for q, (ranking, relevance) in enumerate(problems):
        qid = f"q{q:04d}"
        ours = {
            "ndcg": ndcg_at_k(ranking, relevance, k),
            "ndcg_burges": ndcg_at_k(ranking, relevance, k, gain="exp"),
            "mrr": mrr(ranking, relevance, k),
            "map": average_precision(ranking, relevance, k),
        }
        for name, value in ours.items():
            assert value == pytest.approx(scores[name + suffix][qid], abs=RANX_TOL), (
                name + suffix,
                ranking,
                relevance,
            )


@pytest.mark.reference
@pytest.mark.parametrize("k", RANX_KS)
def test_recall_and_precision_match_ranx(ranx_scores, k):
    problems, scores = ranx_scores
    compared = 0
    for q, (ranking, relevance) in enumerate(problems):
        qid = f"q{q:04d}"
        gold = [[v for v, r in enumerate(relevance) if r > 0]]  # one gold set
        assert recall_at_k(ranking, gold, k) == pytest.approx(
            scores[f"recall@{k}"][qid], abs=RANX_TOL
        )
        if len(bf_picks(ranking)) >= k:  # ranx divides by k: same only with >= k picks
            compared += 1
            assert precision_at_k(ranking, gold, k) == pytest.approx(
                scores[f"precision@{k}"][qid], abs=RANX_TOL
            )
    assert compared > 10  # the comparison did happen


# -- brute force: alternative gold sets, short rankings, -1 entries ------------------------------


@st.composite
def problems(draw, max_candidates: int = 9):
    """(ranking, gold) with alternative sets, -1 entries anywhere, possibly empty gold."""
    n = draw(st.integers(0, max_candidates))
    indices = st.integers(0, max(n - 1, 0))
    gold = draw(st.lists(st.lists(indices, max_size=4), max_size=3)) if n else []
    picks = draw(st.permutations(range(n)))[: draw(st.integers(0, n))]
    ranking = list(picks)
    for _ in range(draw(st.integers(0, 2))):
        ranking.insert(draw(st.integers(0, len(ranking))), -1)
    return ranking, gold


@settings(max_examples=300, deadline=None)
@given(problem=problems(), k=st.integers(1, 10))
def test_set_metrics_match_brute_force(problem, k):
    ranking, gold = problem
    for ours, reference in [
        (recall_at_k(ranking, gold, k), bf_recall(ranking, gold, k)),
        (strict_at_k(ranking, gold, k), bf_strict(ranking, gold, k)),
        (precision_at_k(ranking, gold, k), bf_precision(ranking, gold, k)),
        (
            precision_at_k(ranking, gold, k, zero_division=1.0),
            bf_precision(ranking, gold, k, empty=Fraction(1)),
        ),
    ]:
        if reference is None:
            assert ours is None
        else:
            assert ours == pytest.approx(float(reference), abs=SUM_TOL)


@settings(max_examples=100, deadline=None)
@given(corpus=st.lists(problems(), max_size=12), k=st.integers(1, 8))
def test_corpus_f1_is_harmonic_mean_of_macro_averages(corpus, k):
    rankings = [r for r, _ in corpus]
    golds = [g for _, g in corpus]
    p = bf_macro([bf_precision(r, g, k) for r, g in corpus])
    r = bf_macro([bf_recall(r, g, k) for r, g in corpus])
    result = evaluate_rankings(rankings, golds, ks=(k,), names=("f1", "precision", "recall"))
    assert result["count"] == sum(1 for g in golds if any(g))
    if p is None:
        assert math.isnan(result[f"f1@{k}"]) and math.isnan(result[f"precision@{k}"])
    else:
        assert result[f"f1@{k}"] == pytest.approx(float(bf_f1(p, r)), abs=SUM_TOL)
        assert parse_metric(f"f1@{k}")(rankings, golds) == pytest.approx(
            float(bf_f1(p, r)), abs=SUM_TOL
        )


# -- specs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "k"),
    [
        ("recall@5", "recall", 5),
        ("precision@3", "precision", 3),
        ("f1@7", "f1", 7),
        ("strict@5", "strict", 5),
        ("ndcg@10", "ndcg", 10),
        ("ndcg_exp@3", "ndcg_exp", 3),
        ("mrr", "mrr", None),
        ("mrr@10", "mrr", 10),
        ("map", "map", None),
        (" Recall@5 ", "recall", 5),
    ],
)
def test_parse_metric(spec, name, k):
    metric = parse_metric(spec)
    assert (metric.name, metric.k) == (name, k)
    assert metric == Metric(name, k)
    assert parse_metric(metric.spec) == metric


def test_parse_metric_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown metric 'recal'") as info:
        parse_metric("recal@5")
    for name in METRIC_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("spec", ["recall@0", "recall@-1", "recall@x", "recall@1.5", "mrr@"])
def test_parse_metric_bad_cutoff(spec):
    with pytest.raises(ValueError, match="must be a positive int"):
        parse_metric(spec)


def test_parse_metric_set_metric_needs_cutoff_and_str():
    with pytest.raises(ValueError, match="recall needs a cutoff"):
        parse_metric("recall")
    with pytest.raises(ValueError, match="must be a str"):
        parse_metric(5)  # type: ignore[arg-type]


def test_metric_callables_by_hand():
    rankings, golds = [[3, 1], [2, 0], [4]], [[[1]], [[0, 4]], []]
    # Problem 3 has no gold. recall@2 = (1 + 1/2) / 2 ; precision@2 = (1/2 + 1/2) / 2.
    assert parse_metric("recall@2")(rankings, golds) == 0.75
    assert parse_metric("precision@2")(rankings, golds) == 0.5
    assert parse_metric("strict@2")(rankings, golds) == 0.5
    assert parse_metric("recall@2").score([4], []) is None
    # Binary relevance from gold: problem 1 relevant {1} at rank 2; problem 2 {0, 4}, 0 at rank 2.
    assert parse_metric("mrr")(rankings, golds) == 0.5
    # With graded relevance given, it is used instead: problem 1 grades 1 at rank 1.
    assert parse_metric("mrr").score([3, 1], [[1]], relevance=[0, 0, 0, 1]) == 1.0
    assert math.isnan(parse_metric("recall@2")([], []))


# -- accumulator --------------------------------------------------------------------------------


def test_max_evidence_drops_gold_at_rank_six():
    ranking, gold = [0, 1, 2, 3, 4, 5], [[5]]
    plain = evaluate_rankings([ranking], [gold], ks=(7,), names=("recall", "precision", "strict"))
    capped = evaluate_rankings(
        [ranking], [gold], ks=(7,), names=("recall", "precision", "strict"), max_evidence=5
    )
    assert plain == {"recall@7": 1.0, "precision@7": 1 / 6, "strict@7": 1.0, "count": 1}
    # Only picks 0..4 count: no gold among them, precision 0/5.
    assert capped == {"recall@7": 0.0, "precision@7": 0.0, "strict@7": 0.0, "count": 1}


def test_max_evidence_caps_graded_cutoffs():
    # ndcg@7 with max_evidence=2 is ndcg@2: DCG = 0 + 1/log2(3); IDCG@2 = 1 + 1/log2(3).
    result = evaluate_rankings([[0, 1, 2]], [[[1, 2]]], ks=(7,), names=("ndcg",), max_evidence=2)
    assert result["ndcg@7"] == pytest.approx((1 / LOG2_3) / (1 + 1 / LOG2_3))


def test_selection_metrics_keys_defaults_and_reset():
    m = SelectionMetrics()
    assert m.keys == tuple(
        f"{n}@{k}" for n in ("recall", "precision", "f1", "strict") for k in (1, 3, 5, 7)
    )
    m.update([1], [[1]])
    assert m.count == 1
    m.reset()
    assert m.count == 0
    assert all(math.isnan(v) for key, v in m.compute().items() if key != "count")
    with pytest.raises(ValueError, match="unknown metric 'bogus'"):
        SelectionMetrics(names=("bogus",))
    with pytest.raises(ValueError, match="each of ks"):
        SelectionMetrics(ks=(0,))
    with pytest.raises(ValueError, match="max_evidence"):
        SelectionMetrics(max_evidence=0)
    assert SelectionMetrics(ks=(3,), names=("recall", "mrr@10")).keys == ("recall@3", "mrr@10")


def test_evaluate_rankings_length_mismatch_and_bad_problem():
    with pytest.raises(ValueError, match="golds has 1 entries but rankings has more"):
        evaluate_rankings([[0], [1]], [[[0]]])
    with pytest.raises(ValueError, match="golds has more entries"):
        evaluate_rankings([[0]], [[[0]], [[1]]])
    with pytest.raises(ValueError, match="relevances has more entries"):
        evaluate_rankings([[0]], [[[0]]], [[1], [1]])
    with pytest.raises(ValueError, match="problem 1: .*repeats candidate 2"):
        evaluate_rankings([[0], [2, 2]], [[[0]], [[2]]])


def _graded_corpus(rng: random.Random, count: int):
    corpus = []
    for _ in range(count):
        n = rng.randint(1, 10)
        ranking = rng.sample(range(n), rng.randint(0, n)) + [-1] * rng.randint(0, 2)
        gold = [rng.sample(range(n), rng.randint(0, min(3, n))) for _ in range(rng.randint(0, 2))]
        relevance = [float(rng.randint(0, 3)) for _ in range(n)] if rng.random() < 0.5 else None
        corpus.append((ranking, gold, relevance))
    return corpus


@pytest.mark.parametrize("max_evidence", [None, 2, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accumulator_equals_evaluate_equals_loop(seed, max_evidence):
    corpus = _graded_corpus(random.Random(seed), 60)
    rankings, golds, relevances = (list(column) for column in zip(*corpus, strict=True))
    ks = (1, 3, 5, 7)
    names = ("recall", "precision", "f1", "strict", "ndcg", "ndcg_exp", "mrr", "map")

    acc = SelectionMetrics(ks, names, max_evidence)
    for ranking, gold, relevance in corpus:
        acc.update(ranking, gold, relevance)
    from_acc = acc.compute()
    from_eval = evaluate_rankings(
        iter(rankings), iter(golds), iter(relevances), ks, names, max_evidence=max_evidence
    )
    assert from_acc == from_eval

    # Two halves merged == one pass.
    first, second = (
        SelectionMetrics(ks, names, max_evidence),
        SelectionMetrics(ks, names, max_evidence),
    )
    first.update_all(rankings[:25], golds[:25], relevances[:25])
    second.update_all(rankings[25:], golds[25:], relevances[25:])
    assert first.merge(second).compute() == pytest.approx(from_acc, abs=SUM_TOL, nan_ok=True)

    # A per-problem loop over Metric.score, averaged here; F1 from the averaged P and R.
    assert from_acc["count"] == sum(1 for g in golds if any(g))
    for key in acc.keys:
        metric = parse_metric(key)
        if metric.name == "f1":
            continue
        values = [metric.score(r, g, rel, max_evidence=max_evidence) for r, g, rel in corpus]
        values = [v for v in values if v is not None]
        assert from_acc[key] == pytest.approx(sum(values) / len(values), abs=SUM_TOL), key
    for k in ks:
        p, r = from_acc[f"precision@{k}"], from_acc[f"recall@{k}"]
        assert from_acc[f"f1@{k}"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)


def test_merge_refuses_different_settings():
    with pytest.raises(ValueError, match="same settings"):
        SelectionMetrics(ks=(1,)).merge(SelectionMetrics(ks=(3,)))


# -- report table ---------------------------------------------------------------------------------


def test_format_table_layout():
    results = {
        "DGN": {"recall@7": 0.81234, "precision@7": 0.2, "f1@7": 0.3, "recall@1": 0.5},
        "TF|IDF": {"recall@7": 0.7, "precision@7": math.nan},
    }
    lines = format_table(results, ks=(7, 1), names=("recall", "precision", "f1")).splitlines()
    assert lines[0] == "| Model | recall@7 | precision@7 | f1@7 | recall@1 | precision@1 | f1@1 |"
    assert lines[1] == "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    assert lines[2] == "| DGN | 0.812 | 0.200 | 0.300 | 0.500 | - | - |"
    assert lines[3] == "| TF\\|IDF | 0.700 | - | - | - | - | - |"
    assert len(lines) == 4
    bold = format_table(results, ks=(7,), names=("recall", "precision"), bold_best=True)
    assert bold.splitlines()[2:] == ["| DGN | **0.812** | **0.200** |", "| TF\\|IDF | 0.700 | - |"]
    # Ties at the printed precision are all bold: 0.81234 and 0.8 both print as 0.8.
    tied = {"a": {"recall@7": 0.81234}, "b": {"recall@7": 0.8}, "c": {"recall@7": 0.7}}
    lines = format_table(tied, ks=(7,), names=("recall",), digits=1, bold_best=True).splitlines()
    assert lines[2:] == ["| a | **0.8** |", "| b | **0.8** |", "| c | 0.7 |"]
    with pytest.raises(ValueError, match="unknown metric 'recal'"):
        format_table(results, ks=(1,), names=("recal",))


# -- doctests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [
        "dgn.metrics",
        "dgn.metrics.selection",
        "dgn.metrics.graded",
        "dgn.metrics.evaluation",
        "dgn.metrics.fever",
        "dgn.metrics.report",
    ],
)
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
