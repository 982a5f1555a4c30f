"""``dgn finetune``: continue training a saved model (frozen-feature or end-to-end) on (graded) data.

The flag names are the FGA-NDCG model card's; the work is :func:`dgn.tune.finetune_checkpoint`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register"]


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    from dgn.tune import CARD_LOSSES

    p = sub.add_parser(
        "finetune",
        help="continue training a saved model on graded relevance (soft CE, ApproxNDCG, mixed)",
        description=(
            "Fine-tune a checkpoint written by `dgn train` on selection JSONL whose `relevance` field "
            "grades the candidates (binary gold where absent). The loss is the dense one (soft_ce or "
            "approx_ndcg) plus --sparse_weight times the sparse one (sparse_ce), as in the FGA-NDCG "
            "model card. A model trained end to end (dgn train's default: the sentence encoder under a "
            "DGN or listwise head) is trained through the transformer, the dense loss taken per greedy "
            "layer and the sparse one being the head's own loss on the gold; its settings are the "
            "recorded ones. A frozen-feature DGN or encoder scorer gets its features rebuilt as the "
            "checkpoint records them and its training state saved after every epoch, so an "
            "interrupted run continues with the same command and --resume. The best epoch by dev "
            "recall is saved to --output_dir."
        ),
    )
    p.add_argument("--model_name_or_path", "--model-name-or-path", dest="model_name_or_path", required=True,
                   help="model directory written by `dgn train` or `dgn finetune`")
    p.add_argument("--train", required=True, help="training problems (selection JSONL, graded `relevance`)")
    p.add_argument("--dev", default=None, help="dev problems for early stopping (default: keep the last epoch)")
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", required=True,
                   help="model directory to write (not the source directory)")
    p.add_argument("--loss", choices=tuple(CARD_LOSSES), default="soft_ce",
                   help="soft_ce (the model card's name of soft_label: soft-label cross entropy on the grades, "
                   "default), soft_label (the same), approx_ndcg, or sparse_ce "
                   "(cross entropy on the binary gold)")
    p.add_argument("--sparse_weight", "--sparse-weight", dest="sparse_weight", type=types["nonnegative_float"],
                   default=0.0, help="add this times sparse_ce to a dense loss (default 0)")
    p.add_argument("--learning_rate", "--learning-rate", dest="learning_rate", type=types["positive_float"],
                   default=None, help="Adam learning rate; of an end-to-end model, the transformer's "
                   "(default: the checkpoint's)")
    p.add_argument("--head_learning_rate", "--head-learning-rate", dest="head_learning_rate",
                   type=types["positive_float"], default=None,
                   help="an end-to-end model's head learning rate (default: the checkpoint's)")
    p.add_argument("--num_train_epochs", "--num-train-epochs", dest="num_train_epochs",
                   type=types["positive_int"], default=None, help="maximum epochs (default: the checkpoint's)")
    p.add_argument("--seed", type=types["nonnegative_int"], default=None, help="batch-order seed")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --output_dir (frozen-feature checkpoints)")
    p.add_argument("--vectors", default=None,
                   help="word vectors (default: the file recorded in a frozen-feature checkpoint)")
    p.add_argument("--cache-dir", default=None,
                   help="feature cache of a frozen-feature checkpoint (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_finetune)


def _finetune(args: argparse.Namespace) -> int:
    from dgn.commands._common import format_metrics, require_dir
    from dgn.tune import finetune_checkpoint

    require_dir(args.model_name_or_path, "--model_name_or_path", "model directory")
    result = finetune_checkpoint(
        args.model_name_or_path, args.train, args.output_dir,
        dev=args.dev, loss=args.loss, sparse_weight=args.sparse_weight, learning_rate=args.learning_rate,
        head_learning_rate=args.head_learning_rate, num_train_epochs=args.num_train_epochs, seed=args.seed, resume=args.resume,
        vectors=args.vectors, cache_dir=args.cache_dir, progress=not args.quiet,
    )
    if result.best_metrics:
        print(f"best epoch {result.best_epoch} of {len(result.history)} (dev mean recall {result.best_score:.4f}):")
        print(format_metrics(result.best_metrics))
    else:
        print(f"no dev set: kept the last epoch ({result.best_epoch})")
    print(f"model saved to {args.output_dir} ({result.seconds:.1f} s)")
    return 0
