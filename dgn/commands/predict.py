"""``dgn predict``: rank each problem's candidates with a trained DGN (hard greedy)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dgn._choices import COMPILE_MODES
from dgn.predict import COMPILE_MIN_PROBLEMS

__all__ = ["register"]


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "predict",
        help="write a trained model's picks for every problem (predictions JSONL)",
        description=(
            "Run the trained DGN's exact hard greedy on every problem and write predictions "
            'JSONL {"id", "ranking", "scores"}; scores are the marginal gains of the picks. '
            "Features are built with the settings recorded in the checkpoint."
        ),
    )
    p.add_argument("--model", required=True, help="model directory written by `dgn train`")
    p.add_argument("--data", required=True, help="problems (selection JSONL)")
    p.add_argument("--k", type=types["positive_int"], default=None, help="picks per problem (default: the model's K)")
    p.add_argument("--output", required=True, help="predictions JSONL to write (.gz: gzip)")
    p.add_argument("--vectors", default=None, help="word vectors (default: the file recorded in the checkpoint)")
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--batch-size", type=types["positive_int"], default=64, help="problems per batch")
    from dgn.commands._common import add_candidate_stage_options

    add_candidate_stage_options(
        p, types,
        "cut each problem to its L best candidates by the candidate stage first "
        "(default: the stage the model was trained with, if any)",
    )
    p.add_argument("--compile", choices=COMPILE_MODES, default="auto",
                   help="DGN only: hard greedy with the compiled SCMM kernel (same picks up to rounding ties, "
                   "about 6x faster per batch, but the first batch compiles it for seconds and it needs a "
                   f"C++ compiler); auto: on for at least {COMPILE_MIN_PROBLEMS:,} problems (default: auto)")
    p.add_argument("--device", default=None,
                   help="where the model runs: cpu (default) or cuda (cuda:N); an end-to-end model's encoder too")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_predict)


def _predict(args: argparse.Namespace) -> int:
    from dgn.commands._common import (
        require_dir,
        require_file,
        require_output_dir,
        validate_problems,
    )
    from dgn.predict import predict_file

    # Everything that can be checked without torch, the model or the vectors, first
    # (predict_file checks --output before it loads the model).
    require_dir(args.model, "--model", "model directory")
    require_output_dir(args.cache_dir, "--cache-dir")
    if args.vectors is not None:
        require_file(args.vectors, "--vectors")
    validate_problems(args.data, "--data")
    n, k = predict_file(
        args.model, args.data, args.output, k=args.k, batch_size=args.batch_size, compile=args.compile,
        top_l=args.top_l, rankers=args.rankers, fusion=args.fusion, vectors=args.vectors,
        cache_dir=args.cache_dir, device=args.device, progress=not args.quiet,
    )
    print(f"{args.output}: {n} predictions (k = {k})")
    return 0
