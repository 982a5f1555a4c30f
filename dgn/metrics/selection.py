"""Set metrics of a selection against alternative gold sets: recall, precision, strict, F1.

A problem's gold is one or more alternative sets ``G_1 .. G_m`` of candidate indices (FEVER's
evidence groups: finding any one complete group is enough). ``S_k`` is the set of the first
``k`` picks of a ranking, after ``-1`` entries (no pick) are dropped. With these,

::

    recall@k    = max_j |G_j & S_k| / |G_j|
    strict@k    = 1 if G_j <= S_k for some j, else 0
    precision@k = |S_k & (G_1 | ... | G_m)| / |S_k|

and F1@k is the harmonic mean of the *macro-averaged* precision@k and recall@k (not the
mean of per-problem F1s), as in the evidence-selection tables of Powers et al.,
"Differentiable Greedy Networks" (2018), and FEVER's scorer (Thorne et al., "FEVER: a
Large-scale Dataset for Fact Extraction and VERification", NAACL 2018). Strict@k is the
evidence half of FEVER's strict score.

Conventions (the places where libraries differ):

* ``|S_k|`` counts the *actual* picks among the first ``k``: a ranking with 3 picks scores
  precision@5 = hits / 3, not hits / 5 (ranx and trec_eval divide by ``k``). Greedy runs out
  of candidates on small problems, and that is not a precision error.
* A problem with no pick at all scores ``zero_division`` precision (default 0.0: returning
  nothing earns nothing). FEVER's scorer gives 1.0 there; pass ``zero_division=1.0`` to
  match it. Recall and strict are 0.0 for no picks.
* A problem with no gold sentence (``gold`` empty, or only empty sets) is not scored: the
  functions return None and averages skip it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeVar

from dgn.metrics._inputs import as_gold, as_picks, check_cutoff, check_zero_division

__all__ = [
    "recall_at_k",
    "precision_at_k",
    "strict_at_k",
    "f1_from_precision_recall",
]

_H = TypeVar("_H", bound=Hashable)


# -- unchecked helpers, shared with the accumulator and the FEVER scorer ------------------
# ``picks[:None]`` is every pick, so ``k=None`` means "no cutoff".


def _recall(picks: Sequence[_H], groups: Sequence[AbstractSet[_H]], k: int | None) -> float:
    """``max_j |G_j & S_k| / |G_j|``; ``groups`` must be nonempty sets, at least one."""
    top = set(picks[:k])
    return max(len(group & top) / len(group) for group in groups)


def _strict(picks: Sequence[_H], groups: Sequence[AbstractSet[_H]], k: int | None) -> float:
    """1.0 if some gold group lies inside ``S_k``, else 0.0."""
    top = set(picks[:k])
    return 1.0 if any(group <= top for group in groups) else 0.0


def _precision(
    picks: Sequence[_H], relevant: AbstractSet[_H], k: int | None, zero_division: float
) -> float:
    """Share of the first ``k`` picks that are relevant; ``zero_division`` for no pick.

    Counts list entries, so a repeated pick counts twice (FEVER's scorer does the same).
    """
    top = picks[:k]
    if not top:
        return zero_division
    return sum(1 for pick in top if pick in relevant) / len(top)


# -- public, validated functions ----------------------------------------------------------


def recall_at_k(ranking: Sequence[int], gold: Sequence[Sequence[int]], k: int) -> float | None:
    """Recall@k of one problem against alternative gold sets.

    ``recall@k = max_j |G_j & S_k| / |G_j|``.

    With a single gold set this is the usual recall@k (Manning et al., *Introduction to
    Information Retrieval*, 2008, ch. 8); with several, the best-covered set counts, since
    any one complete set is sufficient evidence (Thorne et al., 2018).

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries (no pick) are dropped
            and the ranking may be shorter than ``k``.
        gold: Alternative gold sets of candidate indices; empty sets are ignored.
        k: The cutoff, a positive int.

    Returns:
        A value in [0, 1], or None when there is no gold sentence.

    Raises:
        ValueError: Malformed ranking or gold (non-integer, negative, repeated pick), or a
            ``k`` that is not a positive int.

    Example:
        >>> recall_at_k([4, 2, 9], [[2, 5], [9]], k=2)  # {2, 5}: 1 of 2; {9}: 0 of 1
        0.5
        >>> recall_at_k([4, 2, 9], [[2, 5], [9]], k=3)  # {9} is complete
        1.0
        >>> recall_at_k([4, 2], [], k=2) is None
        True
    """
    picks, groups, k = as_picks(ranking), as_gold(gold), check_cutoff(k)
    if not groups:
        return None
    return _recall(picks, groups, k)


def strict_at_k(ranking: Sequence[int], gold: Sequence[Sequence[int]], k: int) -> float | None:
    """Strict@k of one problem: 1.0 if some complete gold set is among the first k picks.

    ``strict@k = 1 if G_j <= S_k for some j, else 0``.

    This is the evidence condition of FEVER's strict score (Thorne et al., 2018), which
    counts a claim only when a whole evidence group was retrieved.

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
        gold: Alternative gold sets of candidate indices; empty sets are ignored.
        k: The cutoff, a positive int.

    Returns:
        1.0 or 0.0, or None when there is no gold sentence.

    Raises:
        ValueError: Malformed ranking or gold, or a bad ``k``.

    Example:
        >>> strict_at_k([4, 2, 5], [[2, 5], [9]], k=2)  # only 2 of {2, 5} in the first two
        0.0
        >>> strict_at_k([4, 2, 5], [[2, 5], [9]], k=3)
        1.0
    """
    picks, groups, k = as_picks(ranking), as_gold(gold), check_cutoff(k)
    if not groups:
        return None
    return _strict(picks, groups, k)


def precision_at_k(
    ranking: Sequence[int],
    gold: Sequence[Sequence[int]],
    k: int,
    *,
    zero_division: float = 0.0,
) -> float | None:
    """Precision@k of one problem: the share of the first k picks found in any gold set.

    ``precision@k = |S_k & (G_1 | ... | G_m)| / |S_k|``.

    ``|S_k|`` is the number of actual picks among the first ``k`` (``-1`` entries and a
    ranking shorter than ``k`` do not count), so precision measures what was picked, not
    the budget. This matches FEVER's evidence precision (Thorne et al., 2018) and differs
    from ranx/trec_eval, which divide by ``k``.

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
        gold: Alternative gold sets of candidate indices; empty sets are ignored.
        k: The cutoff, a positive int.
        zero_division: The score of a problem with no pick at all (default 0.0; FEVER's
            scorer uses 1.0).

    Returns:
        A value in [0, 1], or None when there is no gold sentence.

    Raises:
        ValueError: Malformed ranking or gold, a bad ``k``, or ``zero_division`` outside [0, 1].

    Example:
        >>> precision_at_k([4, 2, 9], [[2, 5], [9]], k=3)  # 2 and 9 are gold: 2 of 3
        0.6666666666666666
        >>> precision_at_k([2, -1], [[2, 5]], k=5)  # one actual pick, and it is gold
        1.0
        >>> precision_at_k([], [[2]], k=5), precision_at_k([], [[2]], k=5, zero_division=1.0)
        (0.0, 1.0)
    """
    picks, groups, k = as_picks(ranking), as_gold(gold), check_cutoff(k)
    zero_division = check_zero_division(zero_division)
    if not groups:
        return None
    return _precision(picks, frozenset().union(*groups), k, zero_division)


def f1_from_precision_recall(precision: float, recall: float) -> float:
    """The harmonic mean of a precision and a recall, 0.0 when both are 0.

    ``F1 = 2 P R / (P + R)``

    (van Rijsbergen, *Information Retrieval*, 1979). Feed it the macro-averaged precision@k
    and recall@k to get the F1@k of the evidence-selection tables; a NaN input (nothing
    scored) gives NaN.

    Args:
        precision: P in [0, 1] (or NaN).
        recall: R in [0, 1] (or NaN).

    Returns:
        F1 in [0, 1], 0.0 when ``P = R = 0`` (where FEVER's scorer divides by zero).

    Raises:
        ValueError: ``precision`` or ``recall`` is not a number in [0, 1] (or NaN).

    Example:
        >>> round(f1_from_precision_recall(5 / 6, 0.5), 6)  # 2 * (5/12) / (4/3) = 5/8
        0.625
        >>> f1_from_precision_recall(0.0, 0.0)
        0.0
    """
    for name, value in (("precision", precision), ("recall", recall)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isnan(value) or 0.0 <= value <= 1.0
        ):
            raise ValueError(f"{name} must be a number in [0, 1] (or NaN), got {value!r}")
    total = precision + recall
    if total == 0:
        return 0.0
    return 2.0 * precision * recall / total
