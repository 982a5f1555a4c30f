"""FEVER's official scoring rules, reimplemented: strict score, label accuracy and
evidence precision, recall and F1.

Thorne et al., "FEVER: a Large-scale Dataset for Fact Extraction and VERification"
(NAACL 2018), and the rules of the shared task's scorer (release 1.2, ``max_evidence=5``):

* only the first ``max_evidence`` predicted ``[page, line]`` pairs of a claim count;
* strict score: the share of claims whose label is right and, unless the gold label is NOT
  ENOUGH INFO, one complete gold evidence group lies among those first pairs;
* label accuracy: the share of claims whose label is right (case-insensitive);
* evidence precision: the macro average over claims whose gold label is not NOT ENOUGH
  INFO of the share of their first pairs found in any gold group; a claim with no
  predicted pair scores 1.0;
* evidence recall: the macro average over the same claims of 1 if a complete gold group
  is covered by the first pairs, else 0;
* F1: the harmonic mean of that global precision and recall.

Where the official code has known faults, this one does what its rules say instead:

* F1 is 0.0 when precision = recall = 0 (the official code divides by zero);
* pairs given as tuples or lists match alike (the official code compares lists with
  ``in``, so tuple evidence never matches); every pair is normalised to ``(page, line)``;
* the caller's dicts are never written to (the official blind mode copies the gold label
  and evidence into the prediction dicts).

Edge cases, stated: a SUPPORTS/REFUTES claim without any gold sentence counts as fully
recalled (as in the official code) and as strictly correct when its label is right (the
official code says so for an empty group ``[[]]`` but not for no group ``[]``); gold entries
whose sentence id is None (the NOT ENOUGH INFO placeholder) are ignored; with no
SUPPORTS/REFUTES claim at all, precision is 1.0 and recall 0.0, as in the official code.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from dgn.metrics._inputs import check_cutoff
from dgn.metrics.selection import _precision, _strict, f1_from_precision_recall

__all__ = ["FeverScore", "fever_score", "NOT_ENOUGH_INFO", "FEVER_MAX_EVIDENCE"]

#: The label whose evidence is not scored.
NOT_ENOUGH_INFO = "NOT ENOUGH INFO"
#: FEVER's official scorer counts the first 5 predicted sentences of a claim.
FEVER_MAX_EVIDENCE = 5

_Pair = tuple[str, int]


class FeverScore(NamedTuple):
    """The five numbers of FEVER's scorer, in its order (unpacks like its tuple)."""

    strict_score: float
    label_accuracy: float
    precision: float
    recall: float
    f1: float


def _pair(page: Any, line: Any, where: str) -> _Pair:
    if not isinstance(page, str):
        raise ValueError(f"{where}: the page must be a str, got {type(page).__name__} {page!r}")
    if isinstance(line, bool):
        raise ValueError(f"{where}: the line must be an int, got bool {line!r}")
    try:
        return page, operator.index(line)
    except TypeError:
        raise ValueError(
            f"{where}: the line must be an int, got {type(line).__name__} {line!r}"
        ) from None


def _is_sequence(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def _predicted_pairs(value: Any, where: str) -> list[_Pair]:
    """``[[page, line], ...]`` (lists or tuples) -> list of ``(page, line)`` tuples."""
    if not _is_sequence(value):
        raise ValueError(
            f"{where}: predicted_evidence must be a list of [page, line] pairs, "
            f"got {type(value).__name__}"
        )
    pairs = []
    for j, item in enumerate(value):
        if not _is_sequence(item) or len(item) != 2:
            raise ValueError(
                f"{where}: predicted_evidence[{j}] must be a [page, line] pair, got {item!r}"
            )
        pairs.append(_pair(item[0], item[1], f"{where}: predicted_evidence[{j}]"))
    return pairs


def _gold_groups(value: Any, where: str) -> list[frozenset[_Pair]]:
    """FEVER evidence groups ``[[[ann_id, ev_id, page, line], ...], ...]`` -> sets of pairs.

    Entries without a sentence (line None) are dropped, and so are the groups they empty.
    """
    if not _is_sequence(value):
        raise ValueError(
            f"{where}: evidence must be a list of evidence groups, got {type(value).__name__}"
        )
    groups = []
    for g, group in enumerate(value):
        if not _is_sequence(group):
            raise ValueError(f"{where}: evidence[{g}] must be a list of entries, got {group!r}")
        pairs = set()
        for e, entry in enumerate(group):
            if not _is_sequence(entry) or len(entry) != 4:
                raise ValueError(
                    f"{where}: evidence[{g}][{e}] must be [annotation_id, evidence_id, page, "
                    f"line], got {entry!r}"
                )
            if entry[3] is None:
                continue
            pairs.add(_pair(entry[2], entry[3], f"{where}: evidence[{g}][{e}]"))
        if pairs:
            groups.append(frozenset(pairs))
    return groups


def _field(record: Any, key: str, where: str) -> Any:
    if not isinstance(record, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(record).__name__}")
    if key not in record:
        raise ValueError(f"{where} has no {key!r} field")
    return record[key]


def _label(record: Any, key: str, where: str) -> str:
    label = _field(record, key, where)
    if not isinstance(label, str):
        raise ValueError(f"{where}: {key} must be a str, got {type(label).__name__} {label!r}")
    return label.upper()


def _pairs_of_claims(
    predictions: Iterable[Any], actual: Iterable[Any] | None
) -> Iterator[tuple[int, Any, Any]]:
    """Yield ``(index, prediction, gold record)``; gold is the prediction in blind mode."""
    if actual is None:
        for i, prediction in enumerate(predictions):
            yield i, prediction, prediction
        return
    actual_iter = iter(actual)
    done = object()
    n = 0
    for i, prediction in enumerate(predictions):
        gold = next(actual_iter, done)
        if gold is done:
            raise ValueError(f"actual has {i} claims but predictions has more")
        yield i, prediction, gold
        n = i + 1
    if next(actual_iter, done) is not done:
        raise ValueError(f"actual has more claims than predictions ({n})")


def fever_score(
    predictions: Iterable[Mapping[str, Any]],
    actual: Iterable[Mapping[str, Any]] | None = None,
    max_evidence: int | None = 5,
) -> FeverScore:
    """Score FEVER predictions with the official scorer's rules (see the module docstring).

    Args:
        predictions: One dict per claim with ``predicted_label`` (str) and
            ``predicted_evidence`` (a list of ``[page, line]`` pairs, lists or tuples).
            When ``actual`` is None, each dict must also hold the gold ``label`` and
            ``evidence``.
        actual: One gold dict per claim, in the same order, with ``label`` and
            ``evidence`` (FEVER groups of ``[annotation_id, evidence_id, page, line]``;
            may be left out for NOT ENOUGH INFO). When given, it is the only source of
            gold, even if the predictions carry ``label``/``evidence`` too.
        max_evidence: How many predicted pairs count (FEVER: 5); None counts all.

    Returns:
        ``FeverScore(strict_score, label_accuracy, precision, recall, f1)``, a tuple.

    Raises:
        ValueError: No claim, different numbers of predictions and gold claims, a missing
            field, malformed evidence (the message names the claim), or a ``max_evidence``
            that is not a positive int or None.

    Example:
        The scorer's README example: both claims have the single gold group
        ``{(p1, 1), (p2, 2)}``; the first prediction misses ``(p2, 2)``.

        >>> gold = [[[None, None, "p1", 1], [None, None, "p2", 2]]]
        >>> actual = [{"label": "REFUTES", "evidence": gold}] * 2
        >>> predictions = [
        ...     {"predicted_label": "REFUTES", "predicted_evidence": [["p1", 1]]},
        ...     {"predicted_label": "REFUTES",
        ...      "predicted_evidence": [["p1", 1], ["p2", 2], ["p3", 3]]},
        ... ]
        >>> score = fever_score(predictions, actual)
        >>> # strict (0 + 1) / 2; P (1 + 2/3) / 2 = 5/6; R (0 + 1) / 2; F1 = 2 * 5/12 / (4/3)
        >>> [round(x, 4) for x in score]
        [0.5, 1.0, 0.8333, 0.5, 0.625]
    """
    max_evidence = check_cutoff(max_evidence, name="max_evidence", optional=True)
    claims = correct = strict = 0
    precision_sum = recall_sum = 0.0
    evidence_claims = 0  # claims whose gold label is not NOT ENOUGH INFO
    for i, prediction, gold in _pairs_of_claims(predictions, actual):
        where = f"claim {i}"
        claims += 1
        predicted_label = _label(prediction, "predicted_label", f"{where} (prediction)")
        pairs = _predicted_pairs(
            _field(prediction, "predicted_evidence", f"{where} (prediction)"), where
        )
        source = f"{where} (gold)" if actual is not None else f"{where} (prediction)"
        label = _label(gold, "label", source)
        label_right = predicted_label == label
        correct += label_right
        if label == NOT_ENOUGH_INFO:
            strict += label_right
            continue
        groups = _gold_groups(_field(gold, "evidence", source), where)
        first = pairs[:max_evidence]
        union: frozenset[_Pair] = frozenset().union(*groups)
        covered = 1.0 if not groups else _strict(first, groups, None)
        evidence_claims += 1
        precision_sum += _precision(first, union, None, zero_division=1.0)
        recall_sum += covered
        strict += label_right and covered == 1.0
    if claims == 0:
        raise ValueError("fever_score needs at least one prediction, got none")
    precision = precision_sum / evidence_claims if evidence_claims else 1.0
    recall = recall_sum / evidence_claims if evidence_claims else 0.0
    return FeverScore(
        strict_score=strict / claims,
        label_accuracy=correct / claims,
        precision=precision,
        recall=recall,
        f1=f1_from_precision_recall(precision, recall),
    )
