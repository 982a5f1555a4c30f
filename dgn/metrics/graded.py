"""Rank metrics from graded relevance: nDCG@k, reciprocal rank (MRR) and average precision.

Each candidate ``v`` of a problem has a relevance ``rel[v] >= 0`` (annotator votes, say;
binary gold is ``rel = 1`` on the gold sentences). ``p_1, p_2, ...`` are the picks of a
ranking in order, after ``-1`` entries (no pick) are dropped, and ``k`` is an optional
cutoff (None: every pick). A candidate is *relevant* when ``rel > 0``.

A problem without any relevant candidate is not scored: the functions return None (ranx
and trec_eval return 0.0 there, which drags averages down for problems no system could
solve).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from dgn.metrics._inputs import as_gold, as_picks, as_relevance, check_cutoff

__all__ = ["Gain", "GAINS", "ndcg_at_k", "mrr", "average_precision", "gold_relevance"]

#: How nDCG turns a relevance grade into a gain: ``"linear"`` is ``rel`` (Järvelin and
#: Kekäläinen, 2002); ``"exp"`` is ``2**rel - 1`` (Burges et al., 2005).
Gain = Literal["linear", "exp"]
GAINS: tuple[str, ...] = ("linear", "exp")


# -- unchecked helpers, shared with the accumulator --------------------------------------


_LN2 = math.log(2.0)
# Above these top grades the gains are rescaled so that no gain or DCG sum overflows.
_LINEAR_SCALE_ABOVE = 1e290
_EXP_SCALE_ABOVE = 1000.0


def _gains(relevance: Sequence[float], gain: str) -> list[float]:
    """The gain of every candidate, all multiplied by one positive factor where needed.

    nDCG is a ratio, so a common factor cancels: huge grades are scaled down (``2**r``
    overflows near ``r = 1024``) instead of turning nDCG into NaN or an OverflowError, and
    ``2**r - 1`` is taken as ``expm1(r ln 2)`` so that a tiny positive grade keeps a
    positive gain.
    """
    top = max(relevance, default=0.0)
    if gain == "linear":
        return [r / top for r in relevance] if top > _LINEAR_SCALE_ABOVE else list(relevance)
    if top > _EXP_SCALE_ABOVE:  # scaled by 2**-top; the "- 1" is far below rounding there
        return [0.0 if r == 0 else 2.0 ** (r - top) for r in relevance]
    return [2.0**r - 1.0 if r >= 1.0 else math.expm1(r * _LN2) for r in relevance]


def _dcg(gains: Iterable[float], k: int | None) -> float:
    """``sum_{i=1}^{k} gains_i / log2(i + 1)`` over the first ``k`` gains (all for None)."""
    total = 0.0
    for i, value in enumerate(gains):
        if k is not None and i >= k:
            break
        total += value / math.log2(i + 2)
    return total


def _ndcg(
    picks: Sequence[int], relevance: Sequence[float], k: int | None, gain: str
) -> float | None:
    gains = _gains(relevance, gain)
    ideal = _dcg(sorted(gains, reverse=True), k)
    if ideal == 0:
        return None
    return min(1.0, _dcg((gains[p] for p in picks), k) / ideal)  # rounding never above 1


def _reciprocal_rank(
    picks: Sequence[int], relevance: Sequence[float], k: int | None
) -> float | None:
    if not any(r > 0 for r in relevance):
        return None
    for i, pick in enumerate(picks[:k]):
        if relevance[pick] > 0:
            return 1.0 / (i + 1)
    return 0.0


def _average_precision(
    picks: Sequence[int], relevance: Sequence[float], k: int | None
) -> float | None:
    relevant = sum(1 for r in relevance if r > 0)
    if relevant == 0:
        return None
    hits, total = 0, 0.0
    for i, pick in enumerate(picks[:k]):
        if relevance[pick] > 0:
            hits += 1
            total += hits / (i + 1)
    return total / relevant


def _check_range(picks: Sequence[int], size: int, name: str = "ranking") -> None:
    for pick in picks:
        if pick >= size:
            raise ValueError(
                f"{name} picks candidate {pick} but relevance has only {size} entries "
                f"(one per candidate)"
            )


def _check_gain(gain: str) -> None:
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {GAINS}, got {gain!r}")


# -- public, validated functions ----------------------------------------------------------


def ndcg_at_k(
    ranking: Sequence[int],
    relevance: Sequence[float],
    k: int | None = None,
    *,
    gain: Gain = "linear",
) -> float | None:
    """Normalised discounted cumulative gain of one ranking, at an optional cutoff.

    ::

        DCG@k  = sum_{i=1}^{min(k, n)} g(rel[p_i]) / log2(i + 1)
        IDCG@k = the same sum over the relevance grades sorted in decreasing order
        nDCG@k = DCG@k / IDCG@k

    where ``n`` is the number of picks and ``g`` the gain: ``g(r) = r`` by default
    (Järvelin and Kekäläinen, "Cumulated gain-based evaluation of IR techniques", ACM TOIS
    20(4), 2002), or ``g(r) = 2**r - 1`` with ``gain="exp"`` (Burges et al., "Learning to
    rank using gradient descent", ICML 2005), which stresses the top grades more. For
    binary relevance the two agree. The ideal ranking is taken over all candidates, so a
    ranking shorter than ``k`` is not rewarded for stopping early.

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
        relevance: Graded relevance per candidate (finite, >= 0), indexed like the
            candidates; :func:`gold_relevance` makes a binary one from gold sets.
        k: The cutoff (a positive int), or None for every pick.
        gain: ``"linear"`` (default) or ``"exp"``.

    Returns:
        A value in [0, 1], or None when no candidate has positive relevance.

    Raises:
        ValueError: Malformed ranking or relevance, a pick beyond the relevance list, a bad
            ``k`` or an unknown ``gain``.

    Example:
        >>> # DCG = 1/log2(2) + 0/log2(3) = 1; IDCG = 2/log2(2) + 1/log2(3) = 2.6309...
        >>> round(ndcg_at_k([1, 2], [0, 1, 0, 2], k=2), 4)
        0.3801
        >>> ndcg_at_k([3, 1], [0, 1, 0, 2])  # the ideal order
        1.0
    """
    picks, rel = as_picks(ranking), as_relevance(relevance)
    k = check_cutoff(k, optional=True)
    _check_gain(gain)
    _check_range(picks, len(rel))
    return _ndcg(picks, rel, k, gain)


def mrr(ranking: Sequence[int], relevance: Sequence[float], k: int | None = None) -> float | None:
    """Reciprocal rank of the first relevant pick (its mean over problems is the MRR).

    ::

        RR@k = 1 / min{ i <= k : rel[p_i] > 0 }     (0 when no relevant pick in the top k)

    (Voorhees, "The TREC-8 Question Answering Track Report", 1999).

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
        relevance: Relevance per candidate; relevant means ``> 0``.
        k: The cutoff (a positive int), or None for every pick.

    Returns:
        A value in [0, 1], or None when no candidate is relevant.

    Raises:
        ValueError: Malformed ranking or relevance, a pick beyond the relevance list, or a
            bad ``k``.

    Example:
        >>> mrr([0, 3, 1], [0, 1, 0, 2])  # first relevant pick at rank 2
        0.5
        >>> mrr([0, 3, 1], [0, 1, 0, 2], k=1)
        0.0
    """
    picks, rel = as_picks(ranking), as_relevance(relevance)
    k = check_cutoff(k, optional=True)
    _check_range(picks, len(rel))
    return _reciprocal_rank(picks, rel, k)


def average_precision(
    ranking: Sequence[int], relevance: Sequence[float], k: int | None = None
) -> float | None:
    """Average precision of one ranking (its mean over problems is MAP).

    ::

        AP@k = (1 / R) * sum_{i <= k, rel[p_i] > 0} precision@i,   R = #{v : rel[v] > 0}

    the TREC definition (Manning et al., *Introduction to Information Retrieval*, 2008,
    section 8.4): relevant candidates never picked contribute 0, and ``R`` counts every
    relevant candidate, not ``min(k, R)``.

    Args:
        ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
        relevance: Relevance per candidate; relevant means ``> 0``.
        k: The cutoff (a positive int), or None for every pick.

    Returns:
        A value in [0, 1], or None when no candidate is relevant.

    Raises:
        ValueError: Malformed ranking or relevance, a pick beyond the relevance list, or a
            bad ``k``.

    Example:
        >>> # relevant at ranks 2 and 3: (1/2 + 2/3) / 2 relevant candidates
        >>> round(average_precision([0, 3, 1], [0, 1, 0, 2]), 6)
        0.583333
    """
    picks, rel = as_picks(ranking), as_relevance(relevance)
    k = check_cutoff(k, optional=True)
    _check_range(picks, len(rel))
    return _average_precision(picks, rel, k)


def gold_relevance(gold: Sequence[Sequence[int]], num_candidates: int | None = None) -> list[float]:
    """Binary relevance from alternative gold sets: 1.0 on any gold candidate, else 0.0.

    Args:
        gold: Alternative gold sets of candidate indices.
        num_candidates: The length of the result; None means ``max gold index + 1``.

    Returns:
        A list of ``num_candidates`` floats.

    Raises:
        ValueError: Malformed gold, or a gold index ``>= num_candidates``.

    Example:
        >>> gold_relevance([[2, 5], [1]], num_candidates=6)
        [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    """
    union = frozenset().union(*as_gold(gold))
    size = max(union, default=-1) + 1
    if num_candidates is not None:
        if (
            isinstance(num_candidates, bool)
            or not isinstance(num_candidates, int)
            or num_candidates < 0
        ):
            raise ValueError(f"num_candidates must be an int >= 0, got {num_candidates!r}")
        if size > num_candidates:
            raise ValueError(f"gold index {size - 1} out of range for {num_candidates} candidates")
        size = num_candidates
    return [1.0 if v in union else 0.0 for v in range(size)]
