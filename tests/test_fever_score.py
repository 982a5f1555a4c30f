"""Tests for dgn.metrics.fever_score: FEVER's official scoring rules, without its faults.

Hand cases carry their arithmetic in comments; a reference written here from the rules
(exact fractions, plain loops over lists) checks random corpora.
"""

from __future__ import annotations

import copy
import random
from fractions import Fraction

import numpy as np
import pytest

from dgn.metrics import FeverScore, fever_score

#: Tolerance for float results against exact fractions.
TOL = 1e-12

NEI = "NOT ENOUGH INFO"


def ev(*pairs):
    """One FEVER evidence group from (page, line) pairs: [[ann_id, ev_id, page, line], ...]."""
    return [[None, None, page, line] for page, line in pairs]


def claim(label, groups, predicted_label, predicted):
    prediction = {"predicted_label": predicted_label, "predicted_evidence": predicted}
    actual = {"label": label, "evidence": groups}
    return prediction, actual


def score(claims, **kwargs):
    predictions = [p for p, _ in claims]
    actual = [a for _, a in claims]
    return fever_score(predictions, actual, **kwargs)


def approx(*values):
    return pytest.approx(list(values), abs=TOL)


# -- the scorer README example -------------------------------------------------------------------

README_GOLD = [ev(("p1", 1), ("p2", 2))]
README_CLAIMS = [
    claim("REFUTES", README_GOLD, "REFUTES", [["p1", 1]]),  # misses (p2, 2)
    claim("REFUTES", README_GOLD, "REFUTES", [["p1", 1], ["p2", 2], ["p3", 3]]),
]


def test_readme_example():
    result = score(README_CLAIMS)
    assert isinstance(result, FeverScore)
    # strict: claim 2 only -> 1/2. accuracy: 2/2.
    # precision: claim 1 1/1, claim 2 2/3 -> (1 + 2/3) / 2 = 5/6.
    # recall: claim 1 0, claim 2 1 -> 1/2. F1 = 2 * (5/6) * (1/2) / (5/6 + 1/2) = (5/6) / (4/3) = 5/8.
    assert list(result) == approx(0.5, 1.0, 5 / 6, 0.5, 0.625)
    strict, accuracy, precision, recall, f1 = result  # unpacks like the official tuple
    assert (result.strict_score, result.f1) == (strict, f1)


def test_readme_example_blind_mode_gives_the_same():
    predictions = [{**p, **a} for p, a in README_CLAIMS]  # gold inside the predictions
    assert list(fever_score(predictions)) == approx(0.5, 1.0, 5 / 6, 0.5, 0.625)


def test_inputs_are_not_mutated():
    predictions = [p for p, _ in README_CLAIMS]
    actual = [a for _, a in README_CLAIMS]
    before = copy.deepcopy((predictions, actual))
    fever_score(predictions, actual)
    assert (predictions, actual) == before
    # In particular the official blind mode's copy of label/evidence into predictions:
    assert all("label" not in p and "evidence" not in p for p in predictions)
    blind = [{**p, **a} for p, a in README_CLAIMS]
    before = copy.deepcopy(blind)
    fever_score(blind)
    assert blind == before


# -- max_evidence ---------------------------------------------------------------------------------


def test_gold_at_rank_six_is_excluded():
    predicted = [["x", i] for i in range(5)] + [["gold", 0]]
    claims = [claim("SUPPORTS", [ev(("gold", 0))], "SUPPORTS", predicted)]
    # First 5 pairs hold no gold: precision 0/5, recall 0, strict 0; F1 with P = R = 0 is 0
    # (the official code divides by zero here).
    assert list(score(claims)) == approx(0.0, 1.0, 0.0, 0.0, 0.0)
    # Counting 6 (or all): precision 1/6, recall 1, strict 1, F1 = 2 * (1/6) / (7/6) = 2/7.
    assert list(score(claims, max_evidence=6)) == approx(1.0, 1.0, 1 / 6, 1.0, 2 / 7)
    assert list(score(claims, max_evidence=None)) == approx(1.0, 1.0, 1 / 6, 1.0, 2 / 7)


def test_max_evidence_matches_official_partial_cases():
    groups = [ev(("page", 0), ("page", 1))]
    claims = [claim("SUPPORTS", groups, "SUPPORTS", [["page", 0], ["page", 1]])]
    assert score(claims, max_evidence=1).recall == 0.0  # (page, 1) cut off
    assert score(claims, max_evidence=1).strict_score == 0.0
    assert score(claims, max_evidence=2).recall == 1.0
    assert score(claims, max_evidence=2).strict_score == 1.0
    with pytest.raises(ValueError, match="max_evidence"):
        score(claims, max_evidence=0)


# -- groups ---------------------------------------------------------------------------------------


def test_multi_sentence_group_needs_every_sentence():
    groups = [ev(("A", 0), ("B", 3))]  # a two-page group
    partial = claim("SUPPORTS", groups, "SUPPORTS", [["A", 0], ["A", 1]])
    complete = claim("SUPPORTS", groups, "SUPPORTS", [["B", 3], ["A", 1], ["A", 0]])
    # partial: precision 1/2, recall 0, strict 0.
    assert list(score([partial])) == approx(0.0, 1.0, 0.5, 0.0, 0.0)
    # complete: precision 2/3, recall 1, strict 1; F1 = 2 * (2/3) / (5/3) = 4/5.
    assert list(score([complete])) == approx(1.0, 1.0, 2 / 3, 1.0, 0.8)


def test_alternative_groups_any_one_suffices():
    groups = [ev(("A", 0), ("A", 1)), ev(("C", 5))]
    hit_second = claim("REFUTES", groups, "REFUTES", [["C", 5], ["A", 0], ["Z", 9]])
    # Group 2 complete -> recall 1, strict 1; precision counts sentences of ANY group: (C,5),
    # (A,0) of 3 -> 2/3; F1 = 4/5.
    assert list(score([hit_second])) == approx(1.0, 1.0, 2 / 3, 1.0, 0.8)


# -- labels and NOT ENOUGH INFO -------------------------------------------------------------------


def test_nei_claims_are_skipped_for_evidence():
    nei_evidence = [[[123, None, None, None]]]  # FEVER's NEI placeholder
    claims = [
        claim(NEI, nei_evidence, NEI, [["whatever", 1]]),  # right label: strict
        claim(NEI, nei_evidence, "SUPPORTS", []),  # wrong label
        claim("SUPPORTS", [ev(("A", 0))], "SUPPORTS", [["A", 0], ["B", 1]]),
    ]
    # strict: claims 1 and 3 -> 2/3; accuracy 2/3.
    # Evidence over claim 3 only: precision 1/2, recall 1, F1 = 2 * (1/2) / (3/2) = 2/3.
    assert list(score(claims)) == approx(2 / 3, 2 / 3, 0.5, 1.0, 2 / 3)


def test_nei_gold_may_omit_evidence():
    predictions = [{"predicted_label": NEI, "predicted_evidence": []}]
    # No SUPPORTS/REFUTES claim: precision 1.0 and recall 0.0 as in the official code; F1 0.
    assert list(fever_score(predictions, [{"label": NEI}])) == approx(1.0, 1.0, 1.0, 0.0, 0.0)


def test_wrong_label_is_never_strict_but_evidence_still_counts():
    claims = [claim("SUPPORTS", [ev(("A", 0))], "REFUTES", [["A", 0]])]
    assert list(score(claims)) == approx(0.0, 0.0, 1.0, 1.0, 1.0)


def test_labels_compare_case_insensitively():
    claims = [claim("supports", [ev(("A", 0))], "SUPPORTS", [["A", 0]])]
    assert score(claims).label_accuracy == 1.0


# -- predictions ----------------------------------------------------------------------------------


def test_empty_predictions_score_precision_one():
    claims = [
        claim("SUPPORTS", [ev(("A", 0))], "SUPPORTS", []),  # precision 1 (official rule), recall 0
        claim("SUPPORTS", [ev(("B", 0))], "SUPPORTS", [["B", 0], ["C", 0]]),  # 1/2, recall 1
    ]
    # precision (1 + 1/2) / 2 = 3/4; recall 1/2; F1 = 2 * (3/8) / (5/4) = 3/5; strict 1/2.
    assert list(score(claims)) == approx(0.5, 1.0, 0.75, 0.5, 0.6)


def test_tuples_and_lists_match_alike():
    as_lists = [claim("REFUTES", [ev(("A", 0), ("B", 1))], "REFUTES", [["A", 0], ["B", 1]])]
    as_tuples = [
        claim(
            "REFUTES",
            (((None, None, "A", 0), (None, None, "B", 1)),),
            "REFUTES",
            (("A", 0), ("B", 1)),
        )
    ]
    mixed = [claim("REFUTES", [ev(("A", 0), ("B", 1))], "REFUTES", [("A", np.int64(0)), ["B", 1]])]
    expected = approx(1.0, 1.0, 1.0, 1.0, 1.0)
    assert list(score(as_lists)) == expected
    assert list(score(as_tuples)) == expected
    assert list(score(mixed)) == expected


def test_precision_and_recall_zero_gives_f1_zero():
    claims = [claim("SUPPORTS", [ev(("A", 0))], "SUPPORTS", [["B", 0]])]
    assert list(score(claims)) == approx(0.0, 1.0, 0.0, 0.0, 0.0)


def test_repeated_predictions_count_each_time():
    # As the official code: each listed pair counts. (A,0),(A,0),(Z,0): 2 of 3 -> 2/3.
    claims = [claim("SUPPORTS", [ev(("A", 0))], "SUPPORTS", [["A", 0], ["A", 0], ["Z", 0]])]
    assert score(claims).precision == pytest.approx(2 / 3, abs=TOL)


def test_claim_without_gold_sentence_counts_as_recalled():
    # A SUPPORTS claim whose gold has no sentence: nothing to find, recall 1 (official).
    claims = [claim("SUPPORTS", [], "SUPPORTS", [["A", 0]])]
    result = score(claims)
    assert (result.recall, result.precision, result.strict_score) == (1.0, 0.0, 1.0)


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predictions", "actual", "match"),
    [
        ([], [], "at least one prediction"),
        ([{"predicted_label": NEI, "predicted_evidence": []}], [], "actual has 0 claims"),
        (
            [{"predicted_label": NEI, "predicted_evidence": []}],
            [{"label": NEI}, {"label": NEI}],
            "actual has more claims",
        ),
        ([{"predicted_label": NEI}], [{"label": NEI}], "claim 0 .*'predicted_evidence'"),
        (
            [{"predicted_label": NEI, "predicted_evidence": [["A"]]}],
            [{"label": NEI}],
            r"predicted_evidence\[0\] must be a \[page, line\] pair",
        ),
        (
            [{"predicted_label": NEI, "predicted_evidence": [["A", "3"]]}],
            [{"label": NEI}],
            "the line must be an int",
        ),
        (
            [{"predicted_label": "SUPPORTS", "predicted_evidence": []}],
            [{"label": "SUPPORTS"}],
            "claim 0 \\(gold\\) has no 'evidence'",
        ),
        (
            [{"predicted_label": "SUPPORTS", "predicted_evidence": []}],
            [{"label": "SUPPORTS", "evidence": [[["A", 0]]]}],
            r"evidence\[0\]\[0\] must be \[annotation_id",
        ),
        ([{"predicted_label": 1, "predicted_evidence": []}], [{"label": NEI}], "must be a str"),
        (["nope"], [{"label": NEI}], "must be a dict"),
    ],
)
def test_errors(predictions, actual, match):
    with pytest.raises(ValueError, match=match):
        fever_score(predictions, actual)


# -- random corpora against a reference written from the rules ----------------------------------


def reference_fever(predictions, actual, max_evidence=5):
    """The rules, with exact fractions and list membership on normalised lists."""
    n = len(predictions)
    strict = correct = Fraction(0)
    precisions, recalls = [], []
    for prediction, gold in zip(predictions, actual, strict=True):
        right = prediction["predicted_label"].upper() == gold["label"].upper()
        correct += right
        if gold["label"].upper() == NEI:
            strict += right
            continue
        first = [[p, line] for p, line in prediction["predicted_evidence"]]
        if max_evidence is not None:
            first = first[:max_evidence]
        groups = [[[e[2], e[3]] for e in group] for group in gold["evidence"]]
        every = [pair for group in groups for pair in group]
        precisions.append(
            Fraction(sum(pair in every for pair in first), len(first)) if first else Fraction(1)
        )
        covered = any(all(pair in first for pair in group) for group in groups)
        recalls.append(Fraction(int(covered)))
        strict += right and covered
    p = sum(precisions, Fraction(0)) / len(precisions) if precisions else Fraction(1)
    r = sum(recalls, Fraction(0)) / len(recalls) if recalls else Fraction(0)
    f1 = 2 * p * r / (p + r) if p + r else Fraction(0)
    return [float(x) for x in (strict / n, correct / n, p, r, f1)]


def random_corpus(rng: random.Random, size: int):
    labels = ["SUPPORTS", "REFUTES", NEI]
    pages = ["A", "B", "C"]
    predictions, actual = [], []
    for i in range(size):
        label = rng.choice(labels)
        if label == NEI:
            groups = [[[i, None, None, None]]]
        else:
            groups = [
                ev(*{(rng.choice(pages), rng.randrange(4)) for _ in range(rng.randint(1, 3))})
                for _ in range(rng.randint(1, 3))
            ]
        pool = [(page, line) for page in pages for line in range(4)]
        predicted = [list(pair) for pair in rng.sample(pool, rng.randint(0, 8))]
        predicted_label = label if rng.random() < 0.7 else rng.choice(labels)
        predictions.append({"predicted_label": predicted_label, "predicted_evidence": predicted})
        actual.append({"label": label, "evidence": groups})
    return predictions, actual


@pytest.mark.parametrize("max_evidence", [None, 1, 3, 5])
@pytest.mark.parametrize("seed", range(5))
def test_random_corpora_match_reference(seed, max_evidence):
    predictions, actual = random_corpus(random.Random(seed), 40)
    expected = reference_fever(predictions, actual, max_evidence)
    assert list(fever_score(predictions, actual, max_evidence)) == approx(*expected)
