"""Scoring files: a predictions JSONL file against the gold sets of a selection JSONL file,
as ``dgn evaluate`` reports it (:func:`evaluate_files`)."""

from __future__ import annotations

import os

from dgn.metrics.fever import FEVER_MAX_EVIDENCE, NOT_ENOUGH_INFO

__all__ = ["evaluate_files", "DEFAULT_KS", "DEFAULT_NAMES", "FEVER_MAX_EVIDENCE", "NOT_ENOUGH_INFO"]

#: The default cutoffs: the paper's table's.
DEFAULT_KS = (1, 3, 5, 7)
#: The default metrics at each cutoff.
DEFAULT_NAMES = ("recall", "precision", "f1", "strict")


def evaluate_files(
    predictions: str | os.PathLike[str],
    data: str | os.PathLike[str],
    ks: tuple[int, ...] | list[int] = DEFAULT_KS,
    *,
    fever: bool = False,
    metrics: list[str] | tuple[str, ...] | None = None,
) -> dict[str, float]:
    """Score a predictions file against a selection JSONL file.

    Args:
        predictions: Predictions JSONL (``{"id", "ranking", "scores"}``).
        data: Selection JSONL with gold sets (and, optionally, graded ``relevance``).
        ks: Cutoffs of the default metrics (recall, precision, F1, strict).
        fever: FEVER's rules (``max_evidence=5``, precision 1 for no picks, NEI skipped).
        metrics: Metric specs of :func:`dgn.metrics.parse_metric` (``"ndcg@10"``,
            ``"mrr"``, ``"recall@5"``) to compute instead of the defaults; ``ks`` is then
            ignored. ``ndcg``, ``ndcg_exp``, ``mrr`` and ``map`` use a problem's graded
            ``relevance`` where the data has it, else binary relevance from its gold sets.

    Returns:
        ``{"recall@1": ..., ..., "count": n, "missing": m}``, ``n`` the problems scored
        and ``m`` those without a prediction; with ``metrics``, one key per spec exactly as given (a metric no
        problem could score, e.g. nDCG where every relevance is zero, is NaN).

    Raises:
        DataError: A malformed line, a duplicate id, an index out of range (file, line and
            field ``ranking``), or a prediction whose id is not in ``data``.
        DgnUserError: No problem has gold evidence, or a spec in ``metrics`` is not a
            metric (the message names it and lists the known ones).
    """
    from dgn.data import PredictionReader, read_problems
    from dgn.errors import DataError, DgnUserError
    from dgn.metrics.evaluation import SelectionMetrics, parse_metric

    # The reader validates each line and refuses a repeated id.
    preds = {pred.id: (pred.ranking, line) for line, pred in PredictionReader(predictions).numbered()}

    settings = {
        "max_evidence": FEVER_MAX_EVIDENCE if fever else None,
        "zero_division": 1.0 if fever else 0.0,
    }
    specs: dict[str, str] = {}  # as given -> canonical key of SelectionMetrics.compute
    if metrics is not None:
        if isinstance(metrics, str) or not metrics:
            raise DgnUserError("metrics must be a nonempty list of specs such as ['ndcg@10']")
        parsed = {}
        for spec in metrics:
            try:
                metric = parse_metric(spec)
            except ValueError as error:
                raise DgnUserError(f"metrics: {error}") from None
            specs[spec] = metric.spec
            parsed.setdefault(metric.spec, metric)
        acc = SelectionMetrics._of(tuple(parsed.values()), **settings)
    else:
        acc = SelectionMetrics(ks=tuple(ks), names=DEFAULT_NAMES, **settings)
    missing = 0
    seen: set[str] = set()
    for problem in read_problems(data):
        seen.add(problem.id)
        entry = preds.get(problem.id)
        if entry is None:
            missing += 1
            ranking: list[int] = []
        else:
            ranking, line = entry
            n = problem.num_candidates
            for idx in ranking:
                if idx >= n:
                    raise DataError(
                        f"index {idx} out of range for problem {problem.id!r} with {n} candidates "
                        f"(in {data})",
                        path=str(predictions), line=line, field="ranking",
                    )
        if fever and str(problem.meta.get("label", "")).upper() == NOT_ENOUGH_INFO:
            continue
        acc.update(ranking, problem.gold, problem.relevance)
    for pid, (_, line) in preds.items():
        if pid not in seen:
            raise DataError(
                f"prediction for id {pid!r}, which is not a problem in {data}",
                path=str(predictions), line=line, field="id",
            )
    if acc.count == 0:
        raise DgnUserError(f"{data}: no problem has gold evidence; nothing to evaluate")
    results = acc.compute()
    if specs:
        results = {
            **{given: results[key] for given, key in specs.items()},
            "count": results["count"],
        }
    results["missing"] = missing
    return results
