"""The classic unsupervised fusions: RRF, CombSUM, CombMNZ and Borda.

A *run* maps a query id to ``{item id: score}`` (higher is better), the shape ranx and
TREC tools use. Each fusion takes several runs over the same queries and returns one run.
Within a run's list, items are ranked by score, descending; equal scores keep the order
of the mapping (so a list given already sorted keeps its order).

* RRF (Cormack, Clarke and Buettcher, 2009): ``sum_r 1 / (k + rank_r(d))`` over the runs
  that rank ``d`` (rank from 1; ``k = 60``).
* CombSUM and CombMNZ (Fox and Shaw, 1994): the sum of the item's normalised scores over
  the runs that hold it; CombMNZ multiplies that by the number of those runs.
* Borda (Aslam and Montague, 2001): with ``c`` candidates for the query (the union of its
  lists), the item at rank i of a list gets ``c − i + 1`` points from that list and an
  item missing from a list gets ``(c − len + 1) / 2``, the mean of the points left.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Run = Mapping[str, Mapping[str, float]]
FusedRun = dict[str, dict[str, float]]

#: Score normalisations for CombSUM and CombMNZ.
NORMS: tuple[str, ...] = ("min-max", "max", "sum", "zmuv", "none")


def check_runs(runs: Sequence[Run]) -> list[dict[str, list[tuple[str, float]]]]:
    """Validate runs and turn each into ``{query: [(item, score), ...] by score desc}``.

    Raises:
        ValueError: Not a nonempty sequence of mappings, a query or item id that is not a
            str, a score that is not a finite number (the message names run, query, item).
    """
    if isinstance(runs, Mapping) or isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
        raise ValueError(
            f"runs must be a sequence of runs ({{query: {{item: score}}}}), got {type(runs).__name__}"
        )
    if not runs:
        raise ValueError("runs is empty: give at least one run")
    out = []
    for r, run in enumerate(runs):
        if not isinstance(run, Mapping):
            raise ValueError(f"run {r} must map query ids to {{item: score}}, got {type(run).__name__}")
        lists: dict[str, list[tuple[str, float]]] = {}
        for query, items in run.items():
            if not isinstance(query, str):
                raise ValueError(f"run {r}: query ids must be str, got {type(query).__name__} {query!r}")
            if not isinstance(items, Mapping):
                raise ValueError(
                    f"run {r}, query {query!r}: expected {{item: score}}, got {type(items).__name__}"
                )
            pairs = []
            for item, score in items.items():
                if not isinstance(item, str):
                    raise ValueError(
                        f"run {r}, query {query!r}: item ids must be str, got {type(item).__name__} {item!r}"
                    )
                if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                    raise ValueError(
                        f"run {r}, query {query!r}, item {item!r}: score must be a finite number, got {score!r}"
                    )
                pairs.append((item, float(score)))
            pairs.sort(key=lambda pair: -pair[1])  # stable: ties keep the mapping's order
            lists[query] = pairs
        out.append(lists)
    return out


def queries_of(lists: list[dict[str, list[tuple[str, float]]]]) -> list[str]:
    """Every query of any run, in first-seen order."""
    return list(dict.fromkeys(q for run in lists for q in run))


def normalise(scores: list[float], norm: str) -> list[float]:
    """One list's scores under ``norm`` (see :data:`NORMS`).

    ``min-max``: ``(s − min) / (max − min)``, all 1 when every score is equal; ``max``:
    ``s / max``; ``sum``: ``s / sum``; ``zmuv``: zero mean, unit variance (0 when the
    variance is 0); ``none``: unchanged.
    """
    if not scores or norm == "none":
        return list(scores)
    if norm == "min-max":
        low, high = min(scores), max(scores)
        if high == low:
            return [1.0] * len(scores)
        return [(s - low) / (high - low) for s in scores]
    if norm == "max":
        high = max(scores)
        return [s / high if high else 0.0 for s in scores]
    if norm == "sum":
        total = sum(scores)
        return [s / total if total else 0.0 for s in scores]
    if norm == "zmuv":
        mean = sum(scores) / len(scores)
        sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
        return [(s - mean) / sd if sd else 0.0 for s in scores]
    raise ValueError(f"unknown norm {norm!r}; choose from {', '.join(NORMS)}")


def _check_norm(norm: str) -> str:
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; choose from {', '.join(NORMS)}")
    return norm


def rrf(runs: Sequence[Run], k: float = 60) -> FusedRun:
    """Reciprocal rank fusion: ``sum_r 1 / (k + rank_r(d))``.

    Raises:
        ValueError: Bad runs, or ``k`` not a number >= 0.
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
        raise ValueError(f"k must be a finite number >= 0, got {k!r}")
    lists = check_runs(runs)
    fused: FusedRun = {}
    for query in queries_of(lists):
        scores: dict[str, float] = {}
        for run in lists:
            for rank, (item, _) in enumerate(run.get(query, ()), start=1):
                scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
        fused[query] = _sorted(scores)
    return fused


def combsum(runs: Sequence[Run], norm: str = "min-max") -> FusedRun:
    """CombSUM: the sum of the item's normalised scores over the runs that hold it."""
    return _comb(runs, _check_norm(norm), mnz=False)


def combmnz(runs: Sequence[Run], norm: str = "min-max") -> FusedRun:
    """CombMNZ: CombSUM times the number of runs that hold the item."""
    return _comb(runs, _check_norm(norm), mnz=True)


def _comb(runs: Sequence[Run], norm: str, mnz: bool) -> FusedRun:
    lists = check_runs(runs)
    fused: FusedRun = {}
    for query in queries_of(lists):
        scores: dict[str, float] = {}
        hits: dict[str, int] = {}
        for run in lists:
            pairs = run.get(query, [])
            for (item, _), value in zip(pairs, normalise([s for _, s in pairs], norm), strict=True):
                scores[item] = scores.get(item, 0.0) + value
                hits[item] = hits.get(item, 0) + 1
        if mnz:
            scores = {item: value * hits[item] for item, value in scores.items()}
        fused[query] = _sorted(scores)
    return fused


def borda(runs: Sequence[Run]) -> FusedRun:
    """Borda count over the union of the query's lists (see the module docstring)."""
    lists = check_runs(runs)
    fused: FusedRun = {}
    for query in queries_of(lists):
        candidates = list(dict.fromkeys(item for run in lists for item, _ in run.get(query, ())))
        c = len(candidates)
        scores = dict.fromkeys(candidates, 0.0)
        for run in lists:
            pairs = run.get(query, [])
            ranked = {item for item, _ in pairs}
            for i, (item, _) in enumerate(pairs):
                scores[item] += c - i
            missing_points = (c - len(pairs) + 1) / 2
            for item in candidates:
                if item not in ranked:
                    scores[item] += missing_points
        fused[query] = _sorted(scores)
    return fused


def _sorted(scores: dict[str, float]) -> dict[str, float]:
    """The scores as a dict in descending order of score (ties: first seen first)."""
    return dict(sorted(scores.items(), key=lambda pair: -pair[1]))
