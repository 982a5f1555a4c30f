"""Metric specs (``"recall@5"``), the accumulating :class:`SelectionMetrics` and
:func:`evaluate_rankings`.

Every metric here is a per-problem function from :mod:`dgn.metrics.selection` or
:mod:`dgn.metrics.graded`, averaged over the problems that have at least one gold sentence
(macro average). F1@k is the exception: the harmonic mean of the averaged precision@k and
recall@k, as in the evidence-selection tables of Powers et al., "Differentiable Greedy
Networks" (2018).

Gold decides which problems count, for every metric: a problem whose gold is empty is
skipped, so all the numbers of one report average over the same problems. The graded
metrics (``ndcg``, ``ndcg_exp``, ``mrr``, ``map``) use the problem's graded ``relevance``
when given and binary relevance from the gold sets otherwise; a gold problem whose given
relevance is all zero is skipped by those metrics alone.

``max_evidence`` applies FEVER's rule (Thorne et al., 2018) that only the first 5 predicted
sentences count: the effective cutoff of every metric is ``min(k, max_evidence)``, while the
keys keep the requested ``k`` (``"recall@7"`` is then recall@5).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dgn.metrics._inputs import (
    as_gold,
    as_picks,
    as_relevance,
    check_cutoff,
    check_zero_division,
)
from dgn.metrics.graded import _average_precision, _check_range, _ndcg, _reciprocal_rank
from dgn.metrics.selection import _precision, _recall, _strict, f1_from_precision_recall

__all__ = [
    "METRIC_NAMES",
    "Metric",
    "parse_metric",
    "SelectionMetrics",
    "evaluate_rankings",
]

#: Set metrics against gold sets; they need a cutoff (``"recall@5"``).
SET_METRICS: tuple[str, ...] = ("recall", "precision", "f1", "strict")
#: Rank metrics from graded relevance; the cutoff is optional (``"mrr"`` or ``"mrr@10"``).
GRADED_METRICS: tuple[str, ...] = ("ndcg", "ndcg_exp", "mrr", "map")
#: Every metric name a spec may use.
METRIC_NAMES: tuple[str, ...] = SET_METRICS + GRADED_METRICS


class _Problem:
    """One problem, validated: picks (``-1`` dropped), nonempty gold groups, relevance."""

    def __init__(
        self,
        picks: list[int],
        groups: tuple[frozenset[int], ...],
        relevance: list[float] | None,
    ) -> None:
        self.picks = picks
        self.groups = groups
        self.relevance = relevance
        self.union: frozenset[int] = frozenset().union(*groups)

    @cached_property
    def graded(self) -> list[float]:
        """The given relevance, or binary relevance from the gold sets."""
        if self.relevance is not None:
            return self.relevance
        size = max(max(self.union), max(self.picks, default=-1)) + 1
        return [1.0 if v in self.union else 0.0 for v in range(size)]


def _prepare(ranking: Any, gold: Any, relevance: Any) -> _Problem | None:
    """Validate one problem; None when it has no gold sentence (not scored)."""
    picks, groups = as_picks(ranking), as_gold(gold)
    rel = None
    if relevance is not None:
        rel = as_relevance(relevance)
        _check_range(picks, len(rel))
    if not groups:
        return None
    return _Problem(picks, groups, rel)


def _score(name: str, problem: _Problem, k: int | None, zero_division: float) -> float | None:
    """The per-problem value of metric ``name`` at effective cutoff ``k``."""
    if name == "recall":
        return _recall(problem.picks, problem.groups, k)
    if name == "precision":
        return _precision(problem.picks, problem.union, k, zero_division)
    if name == "strict":
        return _strict(problem.picks, problem.groups, k)
    if name == "f1":  # F1 of a one-problem corpus; averaging these is NOT the F1@k of a corpus
        return f1_from_precision_recall(
            _precision(problem.picks, problem.union, k, zero_division),
            _recall(problem.picks, problem.groups, k),
        )
    if name in ("ndcg", "ndcg_exp"):
        return _ndcg(problem.picks, problem.graded, k, "linear" if name == "ndcg" else "exp")
    if name == "mrr":
        return _reciprocal_rank(problem.picks, problem.graded, k)
    if name == "map":
        return _average_precision(problem.picks, problem.graded, k)
    raise AssertionError(f"unhandled metric name {name!r}")  # parse_metric rejects these


def _effective_k(k: int | None, max_evidence: int | None) -> int | None:
    if max_evidence is None:
        return k
    return max_evidence if k is None else min(k, max_evidence)


def _check_max_evidence(max_evidence: Any) -> int | None:
    return check_cutoff(max_evidence, name="max_evidence", optional=True)


@dataclass(frozen=True)
class Metric:
    """One metric at one cutoff, as named by a spec such as ``"recall@5"``.

    Build it with :func:`parse_metric`. Calling it scores a whole corpus; :meth:`score`
    scores one problem.

    Attributes:
        name: One of :data:`METRIC_NAMES`.
        k: The cutoff, or None for every pick (graded metrics only).
    """

    name: str
    k: int | None = None

    def __post_init__(self) -> None:
        if self.name not in METRIC_NAMES:
            raise ValueError(
                f"unknown metric {self.name!r}; known metrics: {', '.join(METRIC_NAMES)}"
            )
        if self.name in SET_METRICS and self.k is None:
            raise ValueError(f"{self.name} needs a cutoff, e.g. '{self.name}@5'")
        check_cutoff(self.k, name=f"the cutoff of {self.name}", optional=True)

    @property
    def spec(self) -> str:
        """The canonical spec: ``"recall@5"``, ``"mrr"``."""
        return self.name if self.k is None else f"{self.name}@{self.k}"

    def score(
        self,
        ranking: Sequence[int],
        gold: Sequence[Sequence[int]],
        relevance: Sequence[float] | None = None,
        *,
        max_evidence: int | None = None,
        zero_division: float = 0.0,
    ) -> float | None:
        """The metric on one problem; None when the problem is not scored.

        For ``f1`` this is the F1 of that one problem's precision and recall; the F1@k of a
        corpus is not the mean of these (call the metric on the corpus instead).

        Args:
            ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
            gold: Alternative gold sets of candidate indices.
            relevance: Graded relevance per candidate, for the graded metrics; None uses
                binary relevance from ``gold``.
            max_evidence: Only the first ``max_evidence`` picks count (FEVER: 5), or None.
            zero_division: Precision of a problem with no pick.

        Returns:
            The value, or None when gold is empty (or, for graded metrics, no candidate has
            positive relevance).

        Example:
            >>> parse_metric("recall@2").score([4, 2, 9], [[2, 5], [9]])
            0.5
        """
        zero_division = check_zero_division(zero_division)
        k = _effective_k(self.k, _check_max_evidence(max_evidence))
        problem = _prepare(ranking, gold, relevance)
        if problem is None:
            return None
        return _score(self.name, problem, k, zero_division)

    def __call__(
        self,
        rankings: Iterable[Sequence[int]],
        golds: Iterable[Sequence[Sequence[int]]],
        relevances: Iterable[Sequence[float] | None] | None = None,
        *,
        max_evidence: int | None = None,
        zero_division: float = 0.0,
    ) -> float:
        """The metric over a corpus: the mean over scored problems (F1: from the means).

        Args:
            rankings: One ranking per problem.
            golds: One list of alternative gold sets per problem.
            relevances: One graded relevance list (or None) per problem, or None.
            max_evidence: Only the first ``max_evidence`` picks count, or None.
            zero_division: Precision of a problem with no pick.

        Returns:
            The corpus value; NaN when no problem was scored.

        Example:
            >>> f1 = parse_metric("f1@2")
            >>> # P@2 = (1/2 + 1/2) / 2 = 0.5; R@2 = (1 + 1/2) / 2 = 0.75; F1 = 0.75 / 1.25
            >>> round(f1([[3, 1], [2, 0]], [[[1]], [[0, 4]]]), 6)
            0.6
        """
        acc = SelectionMetrics._of((self,), max_evidence=max_evidence, zero_division=zero_division)
        acc.update_all(rankings, golds, relevances)
        return float(acc.compute()[self.spec])


def parse_metric(spec: str) -> Metric:
    """Parse a metric spec: ``"name"`` or ``"name@k"``.

    Names (:data:`METRIC_NAMES`): ``recall``, ``precision``, ``f1``, ``strict`` (set metrics,
    ``@k`` required) and ``ndcg`` (linear gain), ``ndcg_exp`` (``2**rel - 1`` gain), ``mrr``,
    ``map`` (graded metrics, ``@k`` optional). Case and surrounding spaces are ignored.

    Args:
        spec: The spec, e.g. ``"recall@5"``, ``"ndcg@10"``, ``"mrr"``.

    Returns:
        The :class:`Metric`: call it on a corpus, or use :meth:`Metric.score` per problem.

    Raises:
        ValueError: An unknown name (the message lists the known ones), a cutoff that is
            not a positive int, or a set metric without a cutoff.

    Example:
        >>> parse_metric("NDCG@10")
        Metric(name='ndcg', k=10)
        >>> parse_metric("mrr").spec
        'mrr'
        >>> parse_metric("recal@5")
        Traceback (most recent call last):
            ...
        ValueError: unknown metric 'recal' in spec 'recal@5'; known metrics: recall, precision, f1, strict, ndcg, ndcg_exp, mrr, map
    """
    if not isinstance(spec, str):
        raise ValueError(
            f"a metric spec must be a str such as 'recall@5', got {type(spec).__name__}"
        )
    text = spec.strip().lower()
    name, at, cutoff = text.partition("@")
    if name not in METRIC_NAMES:
        raise ValueError(
            f"unknown metric {name!r} in spec {spec!r}; known metrics: {', '.join(METRIC_NAMES)}"
        )
    k: int | None = None
    if at:
        if not (cutoff.isascii() and cutoff.isdigit()) or int(cutoff) < 1:
            raise ValueError(
                f"the cutoff in metric spec {spec!r} must be a positive int, got {cutoff!r}"
            )
        k = int(cutoff)
    return Metric(name, k)


def _expand(names: Iterable[str], ks: Iterable[int]) -> tuple[Metric, ...]:
    """Bare names times ``ks``; entries with ``@`` are taken as they are. Duplicates dropped."""
    if isinstance(names, str):
        raise ValueError(f"names must be a sequence of metric names, got the str {names!r}")
    if not isinstance(names, Iterable):
        raise ValueError(f"names must be a sequence of metric names, got {type(names).__name__}")
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise ValueError(f"ks must be a sequence of positive ints, got {type(ks).__name__}")
    ks = tuple(ks)
    for k in ks:
        check_cutoff(k, name="each of ks")
    metrics: dict[str, Metric] = {}
    for entry in names:
        if not isinstance(entry, str):
            raise ValueError(f"metric names must be str, got {type(entry).__name__} {entry!r}")
        if "@" in entry:
            found = [parse_metric(entry)]
        else:
            if not ks:
                raise ValueError(f"metric {entry!r} needs a cutoff but ks is empty")
            found = [parse_metric(f"{entry}@{k}") for k in ks]
        for metric in found:
            metrics.setdefault(metric.spec, metric)
    if not metrics:
        raise ValueError("no metric requested: names is empty")
    return tuple(metrics.values())


class SelectionMetrics:
    """Accumulate selection metrics problem by problem; :meth:`compute` averages them.

    Each bare name in ``names`` is computed at every cutoff in ``ks`` (a name written as a
    spec, ``"mrr@10"``, is taken as it is), giving keys such as ``"recall@5"``. Problems
    whose gold is empty are skipped; ``"count"`` is the number of problems scored. F1@k is
    the harmonic mean of the averaged precision@k and recall@k. See the module docstring
    for ``max_evidence`` and :mod:`dgn.metrics.selection` for the conventions.

    Args:
        ks: Cutoffs, positive ints (default: the paper's 1, 3, 5, 7).
        names: Metric names from :data:`METRIC_NAMES`, or full specs.
        max_evidence: If set, only the first ``max_evidence`` picks count (FEVER: 5): the
            effective cutoff is ``min(k, max_evidence)``.
        zero_division: Precision of a problem with no pick (FEVER's scorer: 1.0).

    Raises:
        ValueError: Unknown names, bad cutoffs, bad ``max_evidence`` or ``zero_division``.

    Example:
        >>> m = SelectionMetrics(ks=(1, 2), names=("recall", "precision", "f1"))
        >>> m.update([3, 1, 0], [[1]])      # R@1 = 0, R@2 = 1,   P@1 = 0, P@2 = 1/2
        >>> m.update([2, 0], [[0, 4]])      # R@1 = 0, R@2 = 1/2, P@1 = 0, P@2 = 1/2
        >>> m.update([1], [])               # no gold: not scored
        >>> {key: round(value, 4) for key, value in m.compute().items()}
        {'recall@1': 0.0, 'recall@2': 0.75, 'precision@1': 0.0, 'precision@2': 0.5, 'f1@1': 0.0, 'f1@2': 0.6, 'count': 2}
    """

    def __init__(
        self,
        ks: Sequence[int] = (1, 3, 5, 7),
        names: Sequence[str] = ("recall", "precision", "f1", "strict"),
        max_evidence: int | None = None,
        *,
        zero_division: float = 0.0,
    ) -> None:
        self._init(_expand(names, ks), max_evidence, zero_division)

    @classmethod
    def _of(
        cls, metrics: tuple[Metric, ...], *, max_evidence: int | None, zero_division: float
    ) -> SelectionMetrics:
        self = cls.__new__(cls)
        self._init(metrics, max_evidence, zero_division)
        return self

    def _init(self, metrics: tuple[Metric, ...], max_evidence: Any, zero_division: Any) -> None:
        self.metrics: tuple[Metric, ...] = metrics
        self.max_evidence: int | None = _check_max_evidence(max_evidence)
        self.zero_division: float = check_zero_division(zero_division)
        # F1@k is computed from the sums of precision@k and recall@k, so track those.
        tracked: dict[str, Metric] = {}
        for metric in metrics:
            parts = [metric]
            if metric.name == "f1":
                parts = [Metric("precision", metric.k), Metric("recall", metric.k)]
            for part in parts:
                tracked.setdefault(part.spec, part)
        self._tracked: tuple[Metric, ...] = tuple(tracked.values())
        self.reset()

    @property
    def keys(self) -> tuple[str, ...]:
        """The metric keys of :meth:`compute`, in order (``"count"`` comes last)."""
        return tuple(metric.spec for metric in self.metrics)

    @property
    def count(self) -> int:
        """The number of problems scored so far."""
        return self._count

    def reset(self) -> None:
        """Forget every problem seen."""
        self._count = 0
        self._sums: dict[str, float] = {metric.spec: 0.0 for metric in self._tracked}
        self._counts: dict[str, int] = {metric.spec: 0 for metric in self._tracked}

    def update(
        self,
        ranking: Sequence[int],
        gold: Sequence[Sequence[int]],
        relevance: Sequence[float] | None = None,
    ) -> None:
        """Add one problem.

        Args:
            ranking: Candidate indices in the order picked; ``-1`` entries are dropped.
            gold: Alternative gold sets of candidate indices (may be empty: skipped).
            relevance: Graded relevance per candidate for the graded metrics, or None.

        Raises:
            ValueError: Malformed ranking, gold or relevance.
        """
        problem = _prepare(ranking, gold, relevance)
        if problem is None:
            return
        self._count += 1
        for metric in self._tracked:
            k = _effective_k(metric.k, self.max_evidence)
            value = _score(metric.name, problem, k, self.zero_division)
            if value is not None:
                self._sums[metric.spec] += value
                self._counts[metric.spec] += 1

    def update_all(
        self,
        rankings: Iterable[Sequence[int]],
        golds: Iterable[Sequence[Sequence[int]]],
        relevances: Iterable[Sequence[float] | None] | None = None,
    ) -> None:
        """Add many problems; the iterables must have the same length.

        Raises:
            ValueError: Lengths differ, or a problem is malformed (the message gives its
                position).
        """
        for i, (ranking, gold, relevance) in enumerate(_zip_problems(rankings, golds, relevances)):
            try:
                self.update(ranking, gold, relevance)
            except ValueError as error:
                raise ValueError(f"problem {i}: {error}") from None

    def merge(self, other: SelectionMetrics) -> SelectionMetrics:
        """Add another accumulator's problems to this one (e.g. from other workers).

        Raises:
            ValueError: The two were built with different metrics or settings.

        Returns:
            ``self``.
        """
        if (self.metrics, self.max_evidence, self.zero_division) != (
            other.metrics,
            other.max_evidence,
            other.zero_division,
        ):
            raise ValueError("can only merge SelectionMetrics built with the same settings")
        self._count += other._count
        for key in self._sums:
            self._sums[key] += other._sums[key]
            self._counts[key] += other._counts[key]
        return self

    def _mean(self, spec: str) -> float:
        n = self._counts[spec]
        return self._sums[spec] / n if n else math.nan

    def compute(self) -> dict[str, float]:
        """The averages so far, keyed like ``"recall@5"``, and ``"count"``.

        Returns:
            One value per key of :attr:`keys` (NaN where no problem was scored), then
            ``"count"``: the number of problems scored.
        """
        results: dict[str, float] = {}
        for metric in self.metrics:
            if metric.name == "f1":
                precision = self._mean(Metric("precision", metric.k).spec)
                recall = self._mean(Metric("recall", metric.k).spec)
                results[metric.spec] = f1_from_precision_recall(precision, recall)
            else:
                results[metric.spec] = self._mean(metric.spec)
        results["count"] = self._count
        return results

    def __repr__(self) -> str:
        return (
            f"SelectionMetrics(metrics={list(self.keys)}, max_evidence={self.max_evidence}, "
            f"zero_division={self.zero_division}, count={self._count})"
        )


def _zip_problems(
    rankings: Iterable[Any], golds: Iterable[Any], relevances: Iterable[Any] | None
) -> Iterator[tuple[Any, Any, Any]]:
    """Zip rankings, golds and relevances, raising ValueError when the lengths differ."""
    for name, value in (("rankings", rankings), ("golds", golds), ("relevances", relevances)):
        if isinstance(value, (str, bytes)) or not (
            isinstance(value, Iterable) or (value is None and name == "relevances")
        ):
            raise ValueError(f"{name} must be an iterable with one entry per problem, "
                             f"got {type(value).__name__}")
    gold_iter = iter(golds)
    rel_iter = None if relevances is None else iter(relevances)
    done = object()
    n = 0
    for ranking in rankings:
        gold = next(gold_iter, done)
        if gold is done:
            raise ValueError(f"golds has {n} entries but rankings has more")
        relevance = None
        if rel_iter is not None:
            relevance = next(rel_iter, done)
            if relevance is done:
                raise ValueError(f"relevances has {n} entries but rankings has more")
        yield ranking, gold, relevance
        n += 1
    if next(gold_iter, done) is not done:
        raise ValueError(f"golds has more entries than rankings ({n})")
    if rel_iter is not None and next(rel_iter, done) is not done:
        raise ValueError(f"relevances has more entries than rankings ({n})")


def evaluate_rankings(
    rankings: Iterable[Sequence[int]],
    golds: Iterable[Sequence[Sequence[int]]],
    relevances: Iterable[Sequence[float] | None] | None = None,
    ks: Sequence[int] = (1, 3, 5, 7),
    names: Sequence[str] = ("recall", "precision", "f1", "strict"),
    *,
    max_evidence: int | None = None,
    zero_division: float = 0.0,
) -> dict[str, float]:
    """Score a corpus of rankings in one call (a :class:`SelectionMetrics` fed every problem).

    Streams: the iterables are consumed once, problem by problem.

    Args:
        rankings: One ranking per problem (candidate indices in the order picked).
        golds: One list of alternative gold sets per problem.
        relevances: One graded relevance list (or None) per problem, or None.
        ks: Cutoffs.
        names: Metric names (each at every ``k``) or full specs.
        max_evidence: Only the first ``max_evidence`` picks count (FEVER: 5), or None.
        zero_division: Precision of a problem with no pick.

    Returns:
        ``{"recall@1": ..., ..., "count": n}`` as :meth:`SelectionMetrics.compute`.

    Raises:
        ValueError: Lengths differ, a problem is malformed, or a bad setting.

    Example:
        >>> scores = evaluate_rankings([[3, 1], [2, 0]], [[[1]], [[0, 4]]], ks=(2,), names=("recall", "strict"))
        >>> scores  # recall@2 = (1 + 1/2) / 2; strict@2 = (1 + 0) / 2
        {'recall@2': 0.75, 'strict@2': 0.5, 'count': 2}
    """
    metrics = SelectionMetrics(ks, names, max_evidence, zero_division=zero_division)
    metrics.update_all(rankings, golds, relevances)
    return metrics.compute()
