"""``dgn explain``: the DGN's greedy steps on one problem, with gains and runners-up."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register"]


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "explain",
        help="show each greedy step's pick, gain, f(S) and runners-up for one problem",
        description=(
            "For one problem, print each greedy step of the trained DGN: the pick, its marginal "
            "gain, f(S) so far and the best runners-up (gold candidates marked *); optionally "
            "draw every candidate's gain per step as a heatmap."
        ),
    )
    p.add_argument("--model", required=True, help="model directory written by `dgn train`")
    p.add_argument("--data", required=True, help="problems (selection JSONL)")
    p.add_argument("--id", required=True, help="the problem id")
    p.add_argument("--steps", type=types["positive_int"], default=None, help="greedy steps (default: the model's K)")
    p.add_argument("--runners-up", type=types["nonnegative_int"], default=3, help="runners-up shown per step")
    p.add_argument("--png", default=None, help="also write a heatmap of the gains to this image file")
    p.add_argument("--vectors", default=None, help="word vectors (default: the file recorded in the checkpoint)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON instead of text")
    p.set_defaults(handler=_explain)


def _find_problem(path: str, problem_id: str) -> Any:
    from dgn.commands._common import require_file
    from dgn.data import read_problems
    from dgn.errors import DgnUserError

    require_file(path, "--data")
    for problem in read_problems(path):
        if problem.id == problem_id:
            return problem
    raise DgnUserError(f"{path}: no problem with id {problem_id!r}")


def _explain(args: argparse.Namespace) -> int:
    import json

    from dgn.commands._common import require_dir, require_file, require_output_file
    from dgn.explain import explain_problem, format_explanation, load_explainable, plot_explanation

    # Everything that can be checked without torch, the model or the vectors, first.
    require_dir(args.model, "--model", "model directory")
    if args.png is not None:
        require_output_file(args.png, "--png")
    if args.vectors is not None:
        require_file(args.vectors, "--vectors")
    problem = _find_problem(args.data, args.id)
    model, featurizer = load_explainable(args.model, vectors=args.vectors)
    expl = explain_problem(model, featurizer, problem, steps=args.steps, runners_up=args.runners_up)
    if args.png is not None:
        plot_explanation(expl, args.png)
    if args.json:
        print(json.dumps(expl.to_dict()))
    else:
        print(format_explanation(expl))
        if args.png is not None:
            print(f"gains per step drawn to {args.png}")
    return 0
