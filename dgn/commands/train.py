"""``dgn train``: train a DGN on selection JSONL and save the best epoch's checkpoint.

Defaults are those of :class:`dgn.model.DGNConfig` and :class:`dgn.train.TrainConfig` (the
settings ``dgn benchmark`` uses): an option the user does not pass leaves its field alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register", "MODEL_OPTIONS", "TRAIN_OPTIONS"]

#: DGNConfig field -> option.
MODEL_OPTIONS = {
    "steps": "--steps",
    "tau": "--tau",
    "encoded_features": "--encoded-features",
    "hidden_features": "--hidden-features",
    "relaxation": "--relaxation",
    "concave": "--concave",
    "deep": "--deep",
    "dropout": "--dropout",
    "modular": "--no-modular",
}
#: TrainConfig field -> option.
TRAIN_OPTIONS = {
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "weight_decay": "--weight-decay",
    "seed": "--seed",
    "patience": "--patience",
    "loss": "--loss",
    "tau_decay": "--tau-decay",
    "max_candidates": "--max-candidates",
}
#: train_fasttext_vectors keyword -> option (only without --vectors).
FASTTEXT_OPTIONS = {"dim": "--fasttext-dim", "epoch": "--fasttext-epochs", "bucket": "--fasttext-bucket"}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    pos_int, pos_float = types["positive_int"], types["positive_float"]
    nonneg_int = types["nonnegative_int"]
    p = sub.add_parser(
        "train",
        help="train a DGN and save the best epoch (by dev recall)",
        description=(
            "Train a Differentiable Greedy Network on selection JSONL. Features are the paper's "
            "q * s_v from word vectors; the checkpoint of the epoch with the best mean dev "
            "recall@{1,3,5,7} is written to --output with the featurizer settings, so "
            "`dgn predict` featurizes exactly as training did. Options left out keep the "
            "defaults of dgn.model.DGNConfig and dgn.train.TrainConfig."
        ),
    )
    p.add_argument("--train", required=True, help="training problems (selection JSONL)")
    p.add_argument("--dev", default=None, help="dev problems for early stopping (default: none; keep the last epoch)")
    p.add_argument(
        "--vectors", default=None,
        help="word vectors, fastText .vec(.gz) or .bin (default: train fastText vectors on the "
        "training text and save them as OUTPUT/vectors.bin)",
    )
    p.add_argument("--output", required=True, help="model directory to write")
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--quiet", action="store_true", help="no progress output")

    m = p.add_argument_group("model (defaults: dgn.model.DGNConfig)")
    m.add_argument("--steps", type=pos_int, default=None, help="K, greedy layers")
    m.add_argument("--tau", type=pos_float, default=None, help="softmax temperature of the relaxed argmax")
    m.add_argument("--encoded-features", type=pos_int, default=None, help="E, encoded features per candidate")
    m.add_argument("--hidden-features", type=pos_int, default=None, help="encoder hidden width")
    m.add_argument("--relaxation", default=None, help="soft or straight_through")
    m.add_argument("--concave", default=None, help="concave function of the SCMM: sqrt, log1p, exp, saturate, pow")
    m.add_argument("--deep", action="store_true", default=None, help="three-layer encoder")
    m.add_argument("--dropout", type=_float, default=None, help="encoder dropout in [0, 1)")
    m.add_argument(
        "--no-modular", dest="modular", action="store_const", const=False, default=None,
        help="no learned modular term beside the SCMM (the paper's pure SCMM objective)",
    )

    t = p.add_argument_group("optimisation (defaults: dgn.train.TrainConfig)")
    t.add_argument("--epochs", type=pos_int, default=None, help="maximum epochs")
    t.add_argument("--batch-size", type=pos_int, default=None, help="problems per step")
    t.add_argument("--lr", type=pos_float, default=None, help="Adam learning rate")
    t.add_argument("--weight-decay", type=_float, default=None, help="Adam weight decay")
    t.add_argument("--seed", type=nonneg_int, default=None, help="initialisation and batch order seed")
    t.add_argument("--patience", type=nonneg_int, default=None, help="early-stopping patience in epochs (0: never stop)")
    t.add_argument("--loss", default=None, help="layerwise (the paper's) or soft_label (graded relevance)")
    t.add_argument("--tau-decay", type=pos_float, default=None, help="multiply tau by this after each epoch, in (0, 1]")
    t.add_argument("--max-candidates", type=pos_int, default=None, help="truncate training problems to this many candidates")

    f = p.add_argument_group("fastText vectors (only without --vectors; defaults: dgn.features.train_fasttext_vectors)")
    f.add_argument("--fasttext-dim", type=pos_int, default=None, help="vector dimension")
    f.add_argument("--fasttext-epochs", type=pos_int, default=None, help="passes over the training text")
    f.add_argument("--fasttext-bucket", type=nonneg_int, default=None, help="subword hash buckets (smaller: smaller model)")
    p.set_defaults(handler=_train)


#: Options whose argparse dest is not the config field's name.
_DESTS = {"modular": "modular", "dim": "fasttext_dim", "epoch": "fasttext_epochs", "bucket": "fasttext_bucket"}


def _overrides(args: argparse.Namespace, options: dict[str, str]) -> dict[str, Any]:
    """The config fields whose options the user passed (argparse default None = not passed)."""
    values = {
        field: getattr(args, _DESTS.get(field, option[2:].replace("-", "_")))
        for field, option in options.items()
    }
    return {field: value for field, value in values.items() if value is not None}


def _train(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict, replace
    from pathlib import Path

    from dgn.commands._common import build_config, format_metrics
    from dgn.data import atomic_write, read_problems
    from dgn.errors import DgnUserError
    from dgn.model import DGNConfig
    from dgn.train import TrainConfig

    progress = not args.quiet
    model_over = _overrides(args, MODEL_OPTIONS)
    train_over = _overrides(args, TRAIN_OPTIONS)
    ft_over = _overrides(args, FASTTEXT_OPTIONS)
    if args.vectors is not None and ft_over:
        given = ", ".join(FASTTEXT_OPTIONS[k] for k in ft_over)
        raise DgnUserError(f"{given}: only used without --vectors (to train fastText vectors)")
    # Fail on bad options before any slow step.
    build_config(lambda **kw: replace(DGNConfig(), **kw), model_over, MODEL_OPTIONS)
    config = build_config(lambda **kw: replace(TrainConfig(), **kw), train_over, TRAIN_OPTIONS)
    for path, option in ((args.train, "--train"), (args.dev, "--dev")):
        if path is not None and not Path(path).is_file():
            raise DgnUserError(f"{option} {path}: file not found")

    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DgnUserError(f"cannot create the model directory {out}: {exc.strerror or exc}") from None

    import torch

    from dgn.model import DGN
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import train_model

    vectors = args.vectors
    if vectors is None:
        from dgn.features import train_fasttext_vectors

        vectors = out / "vectors.bin"
        if progress:
            print(f"training fastText vectors on {args.train} -> {vectors}", flush=True)
        texts = (t for p in read_problems(args.train) for t in (p.query, *p.candidates))
        train_fasttext_vectors(texts, vectors, seed=config.seed, **ft_over)

    featurizer = Featurizer(vectors, cache_dir=args.cache_dir, progress=progress)
    featurizer.fit_scaler(args.train)
    train = SelectionDataset(args.train, featurizer, max_candidates=config.max_candidates)
    if not any(any(info.gold) for info in train.infos):
        raise DgnUserError(f"--train {args.train}: no problem has gold evidence; nothing to train on")
    dev = SelectionDataset(args.dev, featurizer) if args.dev is not None else None
    if dev is not None and not any(any(info.gold) for info in dev.infos):
        raise DgnUserError(f"--dev {args.dev}: no problem has gold evidence; cannot select epochs")
    model_config = build_config(
        lambda **kw: replace(DGNConfig(in_features=featurizer.dim), **kw), model_over, MODEL_OPTIONS
    )
    torch.manual_seed(config.seed)
    model = DGN(model_config)
    if progress:
        print(f"training DGN ({model.num_parameters():,} parameters) on {len(train)} problems", flush=True)

    def save(m: Any, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(
            out,
            extra={
                "featurizer": featurizer.settings(),
                "train_config": asdict(config),
                "dev_metrics": metrics,
                "epoch": epoch,
            },
        )

    result = train_model(model, train, dev, config, on_best=save, progress=progress)
    history = {
        **result.to_dict(),
        "model_config": model_config.to_dict(),
        "train_config": asdict(config),
        "train": str(Path(args.train).resolve()),
        "dev": None if args.dev is None else str(Path(args.dev).resolve()),
        "vectors": str(Path(vectors).resolve()),
    }
    with atomic_write(out / "train_history.json") as fh:
        json.dump(_finite(history), fh, indent=2, sort_keys=True, allow_nan=False)
        fh.write("\n")
    if result.best_metrics:
        print(
            f"best epoch {result.best_epoch} of {len(result.history)} "
            f"(dev mean recall {result.best_score:.4f}, {result.best_metrics.get('count', 0)} dev problems):"
        )
        print(format_metrics(result.best_metrics))
    else:
        print(f"no dev set: kept the last epoch ({result.best_epoch})")
    print(f"model saved to {out} ({result.seconds:.1f} s)")
    return 0


def _finite(value: Any) -> Any:
    """JSON-ready copy: tuples as lists, NaN and infinities as None."""
    import math

    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
