"""``dgn evaluate``: score predictions JSONL against the gold sets of selection JSONL."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register", "evaluate_files", "FEVER_MAX_EVIDENCE", "NOT_ENOUGH_INFO"]

#: FEVER's scorer counts only the first 5 predicted sentences.
FEVER_MAX_EVIDENCE = 5
NOT_ENOUGH_INFO = "NOT ENOUGH INFO"
_NAMES = ("recall", "precision", "f1", "strict")
_DEFAULT_KS = (1, 3, 5, 7)


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "evaluate",
        help="recall, precision, F1 and strict accuracy at k of predictions",
        description=(
            "Join predictions to problems by id and report recall@k, precision@k, F1@k and "
            "strict@k (macro over problems with gold). A problem without a prediction counts "
            "as an empty ranking (the number is reported)."
        ),
    )
    p.add_argument("--predictions", required=True, help="predictions JSONL")
    p.add_argument("--data", required=True, help="problems with gold (selection JSONL)")
    chosen = p.add_mutually_exclusive_group()
    chosen.add_argument(
        "--k", type=types["ks"], default=None,
        help="comma-separated cutoffs of the default metrics (default: 1,3,5,7)",
    )
    chosen.add_argument(
        "--metrics", type=_metric_specs, default=None, metavar="SPEC[,SPEC...]",
        help="metric specs instead of the default table, e.g. ndcg@10,mrr,map,recall@5,"
        "precision@3: names " + ", ".join(_metric_names()) + ", each with an optional @k "
        "(required for recall, precision, f1, strict). The rank metrics use the data's "
        "graded relevance where present, else binary relevance from gold",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--fever", action="store_true",
        help="FEVER scorer rules: only the first 5 picks count, a problem without picks has "
        "precision 1, NOT ENOUGH INFO problems are skipped",
    )
    p.set_defaults(handler=_evaluate)


def _metric_names() -> tuple[str, ...]:
    from dgn.metrics.evaluation import METRIC_NAMES

    return METRIC_NAMES


def _metric_specs(text: str) -> list[str]:
    """argparse type of ``--metrics``: a comma list of specs, each checked by parse_metric."""
    from dgn.metrics import parse_metric

    specs = [part.strip() for part in text.split(",")]
    if not any(specs):
        raise argparse.ArgumentTypeError("expected metric specs such as ndcg@10,mrr")
    for spec in specs:
        if not spec:
            raise argparse.ArgumentTypeError(f"empty metric spec in {text!r}")
        try:
            parse_metric(spec)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return specs


def evaluate_files(
    predictions: str,
    data: str,
    ks: tuple[int, ...] | list[int] = _DEFAULT_KS,
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
        ``{"recall@1": ..., ..., "count": scored problems, "missing": problems without a
        prediction}``; with ``metrics``, one key per spec exactly as given (a metric no
        problem could score, e.g. nDCG where every relevance is zero, is NaN).

    Raises:
        DataError: A malformed line, a duplicate id, an index out of range (file, line and
            field ``ranking``), or a prediction whose id is not in ``data``.
        DgnUserError: No problem has gold evidence, or a spec in ``metrics`` is not a
            metric (the message names it and lists the known ones).
    """
    from dgn.data import Prediction, read_problems
    from dgn.data.io import iter_jsonl
    from dgn.errors import DataError, DgnUserError
    from dgn.metrics import SelectionMetrics

    preds: dict[str, tuple[list[int], int]] = {}
    for line, obj in iter_jsonl(predictions):
        pred = Prediction.from_json(obj, path=str(predictions), line=line)
        if pred.id in preds:
            raise DataError(
                f"duplicate id {pred.id!r} (first seen on line {preds[pred.id][1]})",
                path=str(predictions), line=line, field="id",
            )
        preds[pred.id] = (pred.ranking, line)

    from dgn.metrics import parse_metric

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
        acc = SelectionMetrics(ks=tuple(ks), names=_NAMES, **settings)
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


def _finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a metric no problem could score prints as null (a dash in tables)."""
    import math

    return None if math.isnan(value) else value


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from dgn.commands._common import format_metrics, require_file

    require_file(args.predictions, "--predictions")
    require_file(args.data, "--data")
    ks = tuple(args.k) if args.k is not None else _DEFAULT_KS
    results = evaluate_files(
        args.predictions, args.data, ks, fever=args.fever, metrics=args.metrics
    )
    title = "FEVER rules (first 5 picks, NEI skipped)" if args.fever else "selection"
    if args.metrics is not None:
        values = {spec: _finite_or_none(results[spec]) for spec in args.metrics}
        if args.json:
            print(json.dumps({
                "metrics": values, "count": results["count"], "missing": results["missing"],
            }))
            return 0
        print(f"{title}: {results['count']} problems with gold")
        width = max(len(spec) for spec in values)
        for spec, value in values.items():
            print(f"{spec:<{width}}  " + ("-" if value is None else f"{value:.4f}"))
    elif args.json:
        print(json.dumps(results))
        return 0
    else:
        print(f"{title}: {results['count']} problems with gold")
        print(format_metrics(results, _NAMES))
    if results["missing"]:
        print(f"{results['missing']} problems had no prediction (scored as empty rankings)")
    return 0
