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
    p.add_argument(
        "--k", type=types["ks"], default=None,
        help="comma-separated cutoffs (default: 1,3,5,7)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--fever", action="store_true",
        help="FEVER scorer rules: only the first 5 picks count, a problem without picks has "
        "precision 1, NOT ENOUGH INFO problems are skipped",
    )
    p.set_defaults(handler=_evaluate)


def evaluate_files(
    predictions: str,
    data: str,
    ks: tuple[int, ...] | list[int] = _DEFAULT_KS,
    *,
    fever: bool = False,
) -> dict[str, float]:
    """Score a predictions file against a selection JSONL file.

    Args:
        predictions: Predictions JSONL (``{"id", "ranking", "scores"}``).
        data: Selection JSONL with gold sets.
        ks: Cutoffs.
        fever: FEVER's rules (``max_evidence=5``, precision 1 for no picks, NEI skipped).

    Returns:
        ``{"recall@1": ..., ..., "count": scored problems, "missing": problems without a
        prediction}``.

    Raises:
        DataError: A malformed line, a duplicate id, an index out of range (file, line and
            field ``ranking``), or a prediction whose id is not in ``data``.
        DgnUserError: No problem has gold evidence.
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

    metrics = SelectionMetrics(
        ks=tuple(ks),
        names=_NAMES,
        max_evidence=FEVER_MAX_EVIDENCE if fever else None,
        zero_division=1.0 if fever else 0.0,
    )
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
        metrics.update(ranking, problem.gold)
    for pid, (_, line) in preds.items():
        if pid not in seen:
            raise DataError(
                f"prediction for id {pid!r}, which is not a problem in {data}",
                path=str(predictions), line=line, field="id",
            )
    if metrics.count == 0:
        raise DgnUserError(f"{data}: no problem has gold evidence; nothing to evaluate")
    results = metrics.compute()
    results["missing"] = missing
    return results


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from dgn.commands._common import format_metrics, require_file

    require_file(args.predictions, "--predictions")
    require_file(args.data, "--data")
    ks = tuple(args.k) if args.k is not None else _DEFAULT_KS
    results = evaluate_files(args.predictions, args.data, ks, fever=args.fever)
    if args.json:
        print(json.dumps(results))
        return 0
    title = "FEVER rules (first 5 picks, NEI skipped)" if args.fever else "selection"
    print(f"{title}: {results['count']} problems with gold")
    print(format_metrics(results, _NAMES))
    if results["missing"]:
        print(f"{results['missing']} problems had no prediction (scored as empty rankings)")
    return 0
