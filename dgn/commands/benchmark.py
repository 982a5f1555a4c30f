"""``dgn benchmark``: the paper's Table 1 (baselines and DGN) on FM2 or WiCE."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dgn.commands import add_common_data_dir

__all__ = ["register"]


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "benchmark",
        help="train and evaluate every baseline and the DGN on a registered dataset",
        description=(
            "Convert and split a registered dataset, train Encoder, DeepEncoder and DGN with "
            "the defaults of `dgn train`, score them and the untrained baselines at k = 7, 5, "
            "3, 1, and write results.json, results.md and recall_precision.png to --output."
        ),
    )
    p.add_argument("--dataset", required=True, help="fm2 or wice")
    p.add_argument("--vectors", required=True, help="word vectors, fastText .vec(.gz) or .bin")
    p.add_argument("--output", required=True, help="directory for the data splits, models and reports")
    add_common_data_dir(p)
    p.add_argument("--seed", type=types["nonnegative_int"], default=None, help="shuffle, split and training seed (default: 0)")
    p.add_argument("--epochs", type=types["positive_int"], default=None, help="maximum epochs (default: dgn.train.TrainConfig's)")
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_benchmark)


def _benchmark(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from dgn.commands._common import require_file, require_output_dir
    from dgn.errors import DgnUserError

    # Checks that need neither torch nor the data, first.
    require_file(args.vectors, "--vectors")
    require_output_dir(args.output, "--output")
    require_output_dir(args.cache_dir, "--cache-dir")

    from dgn.benchmark import DATASET_SPLITS, BenchmarkSettings, format_results, run_benchmark

    if args.dataset not in DATASET_SPLITS:
        raise DgnUserError(
            f"--dataset {args.dataset}: unknown benchmark dataset; choose from "
            f"{', '.join(sorted(DATASET_SPLITS))}"
        )
    overrides = {k: v for k, v in (("seed", args.seed), ("epochs", args.epochs)) if v is not None}
    settings = replace(BenchmarkSettings(), **overrides)
    results = run_benchmark(
        args.dataset,
        vectors=args.vectors,
        output=args.output,
        data_dir=args.data_dir,
        settings=settings,
        cache_dir=args.cache_dir,
        progress=not args.quiet,
    )
    print(format_results(results))
    return 0
