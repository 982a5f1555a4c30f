"""``dgn evaluate``: score predictions JSONL against the gold sets of selection JSONL."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register"]


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


def _finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a metric no problem could score prints as null (a dash in tables)."""
    import math

    return None if math.isnan(value) else value


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from dgn.commands._common import format_metrics, require_file
    from dgn.metrics.files import DEFAULT_KS, DEFAULT_NAMES, evaluate_files

    require_file(args.predictions, "--predictions")
    require_file(args.data, "--data")
    ks = tuple(args.k) if args.k is not None else DEFAULT_KS
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
        print(format_metrics(results, DEFAULT_NAMES))
    if results["missing"]:
        print(f"{results['missing']} problems had no prediction (scored as empty rankings)")
    return 0
