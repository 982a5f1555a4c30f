"""The benchmark's extra views: Lead-k, the DGN rows' relative gain, strict@k and redundancy, settings checks."""

from __future__ import annotations

import pytest

from dgn.benchmark import (
    BenchmarkSettings,
    format_gains,
    format_sets,
    lead_rankings,
    relative_gains,
)
from dgn.data import Problem
from dgn.errors import DgnUserError


def _row(**metrics: float) -> dict:
    return {"metrics": metrics, "sd": None, "parameters": None, "train_seconds": 0.0}


def _results() -> dict:
    return {
        "ks": [3, 1],
        "models": {
            "Lead-k": _row(**{"recall@3": 0.70, "recall@1": 0.50, "precision@3": 0.30, "precision@1": 0.60,
                              "strict@3": 0.6, "strict@1": 0.4, "redundancy@3": 0.1}),
            "TF-IDF (per-problem,1-1,raw-tf)": _row(**{"recall@3": 0.75, "recall@1": 0.40, "precision@3": 0.32,
                                                       "precision@1": 0.50, "strict@3": 0.7, "strict@1": 0.3,
                                                       "redundancy@3": 0.2}),
            "Encoder": _row(**{"recall@3": 0.90, "recall@1": 0.70, "precision@3": 0.40, "precision@1": 0.80,
                               "strict@3": 0.8, "strict@1": 0.6, "redundancy@3": 0.3}),
            "DGN (dev choice: coverage only)": _row(**{"recall@3": 0.84, "recall@1": 0.55, "precision@3": 0.36,
                                                       "precision@1": 0.66, "strict@3": 0.8, "strict@1": 0.5,
                                                       "redundancy@3": 0.05}),
        },
    }


def test_relative_gain_is_over_the_best_untrained_row_at_each_cutoff() -> None:
    view = relative_gains(_results())
    # recall@3: TF-IDF (.75) beats Lead-k (.70); recall@1: Lead-k (.50) beats TF-IDF (.40);
    # the trained Encoder (.90 / .70) is never the bar.
    assert view["baseline"] == {
        "recall@3": "TF-IDF (per-problem,1-1,raw-tf)", "recall@1": "Lead-k",
        "precision@3": "TF-IDF (per-problem,1-1,raw-tf)", "precision@1": "Lead-k",
    }
    gains = view["gains"]
    assert list(gains) == ["DGN (dev choice: coverage only)"]  # only DGN rows are compared
    dgn = gains["DGN (dev choice: coverage only)"]
    assert dgn["recall@3"] == pytest.approx(0.84 / 0.75 - 1)  # +12%
    assert dgn["recall@1"] == pytest.approx(0.55 / 0.50 - 1)  # +10%
    assert dgn["precision@3"] == pytest.approx(0.36 / 0.32 - 1)  # +12.5%
    assert dgn["precision@1"] == pytest.approx(0.66 / 0.60 - 1)  # +10%


def test_the_paper_view_compares_with_the_papers_three_untrained_baselines_only() -> None:
    from dgn.benchmark import PAPER_BASELINES

    view = relative_gains(_results(), baselines=PAPER_BASELINES)
    # Lead-k is not one of the paper's rows: TF-IDF sets every bar
    assert set(view["baseline"].values()) == {"TF-IDF (per-problem,1-1,raw-tf)"}
    assert view["gains"]["DGN (dev choice: coverage only)"]["recall@1"] == pytest.approx(0.55 / 0.40 - 1)


def test_gain_and_set_tables_print_what_they_compute() -> None:
    results = _results()
    results["relative_gains"] = relative_gains(results)
    lines = format_gains(results).splitlines()
    assert lines[0] == "| model | R@3 | R@1 | P@3 | P@1 |"
    assert lines[2] == "| DGN (dev choice: coverage only) | +12.0% | +10.0% | +12.5% | +10.0% |"
    assert lines[3] == "| *best untrained row* | TF-IDF | Lead-k | TF-IDF | Lead-k |"
    sets = format_sets(results).splitlines()
    assert sets[0] == "| model | S@3 | S@1 | red@3 |"  # no redundancy of a single pick
    assert sets[2] == "| Lead-k | 0.600 | 0.400 | 0.100 |"
    # without any DGN row (or any untrained row) there is no gain table
    del results["relative_gains"]
    results["models"].pop("DGN (dev choice: coverage only)")
    assert format_gains(results) == ""


def test_lead_rankings_follow_the_source_order_and_need_it() -> None:
    p = Problem(id="a", query="q", candidates=["s2", "s0", "s3", "s1"], gold=[[1]],
                meta={"original_index": [2, 0, 3, 1]})
    assert lead_rankings([p], 3) == [[1, 3, 0]]
    assert lead_rankings([p], 9) == [[1, 3, 0, 2]]
    bare = Problem(id="b", query="q", candidates=["x", "y"], gold=[[0]])
    with pytest.raises(DgnUserError, match=r"problem 'b': the Lead-k row needs meta\['original_index'\]"):
        lead_rankings([bare], 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"folds": 1}, "folds must be at least 2"),
        ({"models": ("TF-IDF", "Lead-k", "Oracle")}, r"unknown rows \['Oracle'\]"),
        ({"max_claims": 0}, "max_claims must be a positive int"),
        ({"max_train": 0}, "max_train must be a positive int"),
        ({"max_train": True}, "max_train must be a positive int"),
    ],
)
def test_benchmark_settings_refuse_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BenchmarkSettings(**kwargs)
