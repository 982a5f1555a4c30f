"""``dgn benchmark``: the paper's Table 1 (baselines and DGN) on FEVER, FM2, WiCE or CLIMATE-FEVER."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dgn.commands import add_common_data_dir, add_feature_options

__all__ = ["register"]


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "benchmark",
        help="train and evaluate every baseline and the DGN on a registered dataset",
        description=(
            "Convert and split a registered dataset (or cross-validate it with --folds), build the "
            "features of --features, train Encoder, DeepEncoder and the DGN (with each objective: the "
            "DGN row is the one best on the dev split) with the defaults of "
            "`dgn train` once per training seed, score them (mean and sd over the seeds) beside "
            "TF-IDF (the configuration best on the dev split), BM25, the sentence-encoder and "
            "word-embedding cosines and untrained SCMM greedy at k = 7, 5, 3, 1, and write "
            "results.json, results.md and recall_precision.png to --output."
        ),
    )
    p.add_argument(
        "--dataset", required=True,
        help="fever (ERASER's FEVER: real claims, the sentences of their gold page), multirc, scifact, "
        "entailmentbank, fm2, wice, climate-fever, or fever-wiki (the full FEVER 1.0 release and its Wikipedia dump)",
    )
    add_feature_options(p)
    p.add_argument(
        "--vectors", default=None,
        help="word vectors, fastText .vec(.gz) or .bin: the wordvec block and the 'Embedding cosine' row",
    )
    p.add_argument("--output", required=True, help="directory for the data splits, models and reports")
    add_common_data_dir(p)
    p.add_argument("--seed", type=types["nonnegative_int"], default=None, help="shuffle and split seed (default: 0)")
    p.add_argument(
        "--seeds", default=None,
        help="training seeds, a comma list; trained rows report mean and sd over them (default: 0,1,2)",
    )
    p.add_argument(
        "--finetune-seeds", default=None,
        help="with --finetune-encoder: training seeds of the end-to-end rows, a comma list (default: the first "
        "of --seeds alone; 0,1,2 for their mean and sd)",
    )
    p.add_argument("--folds", type=types["positive_int"], default=None, help="cross-validate with this many folds")
    p.add_argument(
        "--max-claims", type=types["positive_int"], default=None,
        help="fever-wiki: read only the first N claims of train.jsonl and of paper_dev.jsonl (try the run on a slice)",
    )
    p.add_argument(
        "--finetune-encoder", action="store_true",
        help="add the end-to-end rows: the sentence encoder fine-tuned under the DGN and under a listwise "
        "loss, both heads with the lexical block too when --features includes it (about 7 minutes per "
        "seed and row on FM2 with 2 CPU cores)",
    )
    p.add_argument(
        "--ablation", action="store_true",
        help="show every DGN objective as a row: coverage + modular, coverage only (no modular term), "
        "modular only (no coverage); the DGN row is the one the dev split chose",
    )
    p.add_argument(
        "--max-train", type=types["positive_int"], default=None,
        help="train every trained row on a seeded sample of N of the training problems (the dev and test "
        "parts stay whole; default: all)",
    )
    p.add_argument("--epochs", type=types["positive_int"], default=None, help="maximum epochs (default: dgn.train.TrainConfig's)")
    from dgn.commands._common import add_candidate_stage_options

    add_candidate_stage_options(
        p, types,
        "cut every problem to its L best candidates by the candidate stage before every row "
        "(training keeps the gold beyond the cut; scores count the cut's losses)",
    )
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_benchmark)


def _benchmark(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from dgn.commands._common import require_file, require_output_dir
    from dgn.errors import DgnUserError

    # Checks that need neither torch nor the data, first.
    if args.vectors is not None:
        require_file(args.vectors, "--vectors")
    require_output_dir(args.output, "--output")
    require_output_dir(args.cache_dir, "--cache-dir")

    from dgn.benchmark import DATASET_SPLITS, BenchmarkSettings, format_results, run_benchmark

    if args.dataset not in DATASET_SPLITS:
        raise DgnUserError(
            f"--dataset {args.dataset}: unknown benchmark dataset; choose from "
            f"{', '.join(sorted(DATASET_SPLITS))}"
        )
    from dgn.benchmark import EXTRA_MODELS, MODEL_NAMES
    from dgn.features.family import parse_feature_names

    overrides: dict[str, object] = {
        k: v for k, v in (("seed", args.seed), ("epochs", args.epochs), ("folds", args.folds),
                          ("max_claims", args.max_claims)) if v is not None
    }
    if args.max_claims is not None and args.dataset != "fever-wiki":
        raise DgnUserError(f"--max-claims is for --dataset fever-wiki (the full release), not {args.dataset}")
    if args.dataset in ("fever", "fever-wiki") and args.folds is not None:
        plan = DATASET_SPLITS[args.dataset]
        raise DgnUserError(f"--folds: {args.dataset} has its own splits ({plan['train']}, {plan['test']}); "
                           f"run it without --folds")
    for option, field in (("--seeds", "seeds"), ("--finetune-seeds", "finetune_seeds")):
        given = getattr(args, field)
        if given is None:
            continue
        try:
            seeds = tuple(int(t) for t in given.split(",") if t.strip())
        except ValueError:
            raise DgnUserError(f"{option} {given}: expected a comma list of integers, e.g. 0,1,2") from None
        if not seeds or min(seeds) < 0:
            raise DgnUserError(f"{option} {given}: expected a comma list of nonnegative integers")
        overrides[field] = seeds
    if args.finetune_seeds is not None and not args.finetune_encoder:
        raise DgnUserError("--finetune-seeds: only used with --finetune-encoder")
    if args.max_train is not None:
        overrides["max_train"] = args.max_train
    if args.folds is not None and args.folds < 2:
        raise DgnUserError(f"--folds {args.folds}: cross-validation needs at least 2 folds")
    if args.features is not None:
        overrides["features"] = parse_feature_names(args.features)
        if "wordvec" in overrides["features"] and args.vectors is None:  # type: ignore[operator]
            raise DgnUserError("--features wordvec: needs --vectors PATH")
    if args.encoder_model is not None:
        overrides["encoder_model"] = args.encoder_model
    from dgn.commands._common import candidate_stage_from_options

    stage = candidate_stage_from_options(args)  # checks the names before any slow step
    if stage is not None:
        overrides["candidate_stage"] = {k: v for k, v in stage.settings().items() if k != "encoder_model"}
    models = list(MODEL_NAMES)
    if args.ablation:
        models += [m for m in EXTRA_MODELS if m.startswith("DGN (")]
    if args.finetune_encoder:
        models += ["Fine-tuned encoder", "DGN end to end"]
    overrides["models"] = tuple(models)
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
    from dgn.benchmark import format_gains

    gains = format_gains(results)
    if gains:
        print("\nrelative gain of each DGN row over the best untrained row at each k (the paper's view):")
        print(gains)
        paper = format_gains(results, "relative_gains_paper")
        if paper and paper != gains:
            print("\nthe same over the paper's untrained baselines (TF-IDF, embedding cosine, untrained SCMM greedy):")
            print(paper)
    if not args.finetune_encoder and not args.quiet:
        from dgn.features.family import encoders_available

        if encoders_available():
            print("\n(dgn train's default with the 'encoders' extra fine-tunes the sentence encoder under the "
                  "DGN; --finetune-encoder adds that row, 'DGN end to end', and the fine-tuned encoder's)")
    if results.get("graded_metrics"):
        from dgn.benchmark import format_graded

        print("\ngraded relevance (the data's relevance field):")
        print(format_graded(results))
    if results.get("fever_scorer"):
        from dgn.benchmark import format_fever

        print(f"\nFEVER's official scorer, evidence over the first {results['fever_scorer']['max_evidence']} picks "
              "(NOT ENOUGH INFO claims left out, as the scorer does):")
        print(format_fever(results))
    return 0
