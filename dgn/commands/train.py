"""``dgn train``: train a DGN on selection JSONL and save the best epoch's checkpoint.

The options are parsed here; the work is :func:`dgn.trainer.train`.

Defaults are those of :class:`dgn.model.DGNConfig` and :class:`dgn.train.TrainConfig` (the
settings ``dgn benchmark`` uses): an option the user does not pass leaves its field alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dgn._choices import END_TO_END_INITS, MODEL_TYPES
from dgn.trainer import MODEL_OPTIONS, TRAIN_OPTIONS

__all__ = ["register", "MODEL_OPTIONS", "TRAIN_OPTIONS"]

def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _scales(text: str) -> tuple[float, ...]:
    """``--diversity-scales``: numbers >= 0 separated by commas, or ``none`` (the empty tuple:
    no choice, the model as trained)."""
    if text.strip().lower() == "none":
        return ()
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, or none, got {text!r}") from None
    if any(not (v >= 0 and v != float("inf")) for v in values):
        raise argparse.ArgumentTypeError(f"scales must be finite numbers >= 0, got {text!r}")
    return values


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    from dgn.commands import add_feature_options

    pos_int, pos_float = types["positive_int"], types["positive_float"]
    nonneg_int = types["nonnegative_int"]
    p = sub.add_parser(
        "train",
        help="train a DGN and save the best epoch (by dev recall)",
        description=(
            "Train a Differentiable Greedy Network on selection JSONL. With the 'encoders' extra "
            "and neither --features nor --vectors, the default is end to end: the sentence encoder "
            "(all-MiniLM-L6-v2) is fine-tuned under the DGN head, one epoch, each problem cut to "
            "its 24 BM25-best candidates (dgn.sentence.FinetuneConfig). With --features (or "
            "--vectors, or without the extra) the DGN trains on frozen feature blocks: the "
            "checkpoint of the epoch with the best mean dev recall@{1,3,5,7} is written to "
            "--output with the featurizer settings, so `dgn predict` featurizes exactly as "
            "training did. Either way, after every epoch (and every --save-every steps) "
            "the whole training state is saved to OUTPUT/training_state.pt, so an interrupted run "
            "continues with --resume OUTPUT. Under torchrun every process runs this command and "
            "the global batch is split across them; rank 0 writes. "
            "Options left out keep the defaults of dgn.model.DGNConfig and dgn.train.TrainConfig."
        ),
    )
    p.add_argument(
        "--train", action="append", default=None,
        help="training problems (selection JSONL; required unless --resume); repeat the option or give "
        "a comma list to train on several files at once",
    )
    p.add_argument("--dev", default=None, help="dev problems for early stopping (default: none; keep the last epoch)")
    add_feature_options(p)
    p.add_argument(
        "--vectors", default=None,
        help="word vectors for the wordvec block, fastText .vec(.gz) or .bin (default: train fastText "
        "vectors on the training text and save them as OUTPUT/vectors.bin)",
    )
    p.add_argument("--output", default=None, help="model directory to write (required unless --resume)")
    p.add_argument(
        "--resume", default=None, metavar="DIR",
        help="continue the interrupted run whose model directory is DIR (its training_state.pt): "
        "same data, vectors and settings; only --epochs and --patience may change (end to end: none)",
    )
    p.add_argument(
        "--finetune-encoder", action="store_true",
        help="train end to end: the sentence encoder itself is fine-tuned under the DGN head (by default "
        "through its first layer's listwise term, the greedy layers learning the later picks over it; "
        "--encoder-grad-scale 1 sends the whole layer-wise gradient into the transformer) (implies --features sentence; "
        "--features sentence,lexical adds the lexical match features to the head; "
        "defaults: dgn.sentence.FinetuneConfig, one epoch; the default of dgn train with the "
        "'encoders' extra when neither --features nor --vectors is given)",
    )
    p.add_argument("--encoder-lr", type=types["positive_float"], default=None,
                   help="with --finetune-encoder: AdamW learning rate of the transformer (default 4e-5)")
    p.add_argument("--facility", type=types["nonnegative_float"], default=None, metavar="W",
                   help="end to end: starting weight of the DGN head's facility-location term over the candidates' "
                   "sentence embeddings, learned with the rest (a candidate's gain loses what the picks already "
                   "cover of its similarity to the others; the first pick is unchanged); 0: no such term "
                   "(default 3, dgn.sentence.DEFAULT_FACILITY, chosen on WiCE dev)")
    p.add_argument("--freeze-layers", type=types["nonnegative_int"], default=None, metavar="N",
                   help="end to end: keep the transformer's token embeddings and its bottom N layers fixed; the "
                   "backward pass stops above them, so steps are faster (default 0; docs/benchmarks.md measures "
                   "speed and recall for N = 2 and 3)")
    p.add_argument("--diversity-scales", type=_scales, default=None, metavar="S,S,...|none",
                   help="end to end, with --dev: after training, rank the dev file with the DGN head's diversity terms "
                   "scaled by each of these and keep the best (default 0,0.25,0.5,1,2; none: the model as trained); "
                   "the choice is printed and saved with the model")
    p.add_argument("--encoder-dropout", type=types["probability"], default=None, metavar="P",
                   help="end to end: the transformer's dropout probability while it trains, hidden and attention "
                   "(default: the model's own, 0.1 for MiniLM); 0 makes steps faster on the CPU "
                   "(docs/benchmarks.md measures speed and recall)")
    p.add_argument("--grad-candidates", type=types["nonnegative_int"], default=None, metavar="N",
                   help="end to end: backpropagate through the claim, the gold and the N BM25-best other candidates "
                   "of each problem only; the rest are embedded without gradients but stay in the loss, so steps "
                   "are faster, at a recall cost (default: all; docs/benchmarks.md measures N = 4 and 8)")
    p.add_argument("--init", choices=END_TO_END_INITS, default=None,
                   help="end to end: how the DGN head starts (default ranker, dgn.sentence.DEFAULT_INIT; "
                   "dgn.sentence.EndToEndModel). ranker holds the head's first layer to a cosine ranking through "
                   "training; with --encoder-grad-scale 0 --first-layer-weight 1 (the defaults) the first pick is "
                   "the fine-tuned ranker's and the greedy layers choose the rest (docs/benchmarks.md); cosine was "
                   "the default before")
    p.add_argument("--first-layer-weight", type=types["nonnegative_float"], default=None, metavar="W",
                   help="end to end: weight of an extra copy of the DGN head's first-layer term in its loss "
                   "(FinetuneConfig.first_layer_weight; default 1)")
    p.add_argument("--encoder-grad-scale", type=types["nonnegative_float"], default=None, metavar="S",
                   help="end to end: share of the DGN head's layer-wise loss gradient that reaches the transformer, "
                   "in [0, 1] (default 0); the first-layer term reaches it in full. 0 with --first-layer-weight 1 "
                   "trains the transformer as under the listwise head, the greedy layers over it; 1 with "
                   "--first-layer-weight 0 --init cosine --encoder-lr 2e-5 is the default before the greedy-layers "
                   "study (docs/benchmarks.md)")
    p.add_argument("--claims-per-step", type=pos_int, default=None, metavar="N",
                   help="end to end: problems per optimiser step (default 1); under torchrun the global batch, "
                   "split into one contiguous slice per process, so it must be at least the number of processes")
    p.add_argument("--save-every", type=pos_int, default=None, metavar="STEPS",
                   help="also save the training state (OUTPUT/training_state.pt) every STEPS optimiser "
                   "steps within an epoch (default: after every epoch only), so that --resume loses at most "
                   "STEPS steps of a long epoch")
    p.add_argument("--device", default=None,
                   help="end to end: where to train, cpu (default) or cuda (cuda:N); under torchrun cuda is each "
                   "process's LOCAL_RANK GPU and the processes talk over nccl (gloo on the CPU)")
    from dgn.commands._common import add_candidate_stage_options

    add_candidate_stage_options(
        p, types,
        "cut each problem to its L best candidates by the candidate stage (--rankers, "
        "--fusion; with --finetune-encoder: BM25) before training; training keeps every gold "
        "candidate, and the stage is recorded so that predict applies it",
    )
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--quiet", action="store_true", help="no progress output")

    m = p.add_argument_group("model (defaults: dgn.model.DGNConfig)")
    m.add_argument(
        "--model-type", choices=MODEL_TYPES, default=None,
        help="dgn (default), or a baseline without greedy layers: encoder / deep-encoder (the encoder and "
        "a linear scorer, ranked by score; loss layerwise = the paper's weighted BCE)",
    )
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
    t.add_argument(
        "--loss", default=None,
        help="one vocabulary (docs/losses.md): layerwise (the paper's), listwise (the gold spread evenly over each "
        "layer), set_recall (the picks that raise recall), sparse_ce (the model's own loss on the gold), soft_label "
        "and approx_ndcg (graded relevance). End to end (the default) takes set_recall (default), listwise or "
        "layerwise; on --features: layerwise (default), listwise, sparse_ce, soft_label or approx_ndcg",
    )
    t.add_argument("--sparse-weight", type=_float, default=None,
                   help="add this times the sparse loss to a graded one (soft_label, approx_ndcg)")
    t.add_argument("--tau-decay", type=pos_float, default=None, help="multiply tau by this after each epoch, in (0, 1]")
    t.add_argument("--max-candidates", type=pos_int, default=None, help="cap training problems at this many candidates: all gold plus seeded random negatives (default 64)")
    t.add_argument("--compile", action="store_const", const=True, default=None,
                   help="run the DGN's greedy layers as compiled code and its encoder fused while training "
                   "(about 2x the throughput on 64 x 40 batches; needs a C compiler: hand-written kernels "
                   "for the encoder and the default sqrt objective, built once in about a second, else "
                   "torch.compile, tens of seconds)")

    f = p.add_argument_group("fastText vectors (only without --vectors; defaults: dgn.features.train_fasttext_vectors)")
    f.add_argument("--fasttext-dim", type=pos_int, default=None, help="vector dimension")
    f.add_argument("--fasttext-epochs", type=pos_int, default=None, help="passes over the training text")
    f.add_argument("--fasttext-bucket", type=nonneg_int, default=None, help="subword hash buckets (smaller: smaller model)")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dgn import distributed
    from dgn.commands._common import format_metrics
    from dgn.trainer import TrainRequest, train

    result, how = train(TrainRequest.from_options(vars(args)))
    if not distributed.is_main():
        return 0  # rank 0 reports
    if result.best_metrics:
        count = result.best_metrics.get("count")
        print(f"best epoch {result.best_epoch} of {len(result.history)} (dev mean recall {result.best_score:.4f}"
              + (f", {count} dev problems" if count is not None and how == "frozen features" else "") + "):")
        print(format_metrics(result.best_metrics))
    elif how == "frozen features":
        print(f"no dev set: kept the last epoch ({result.best_epoch})")
    scale = result.choices.get("diversity_scale")
    if scale is not None:
        tried = ", ".join(f"{s}: {v:.4f}" for s, v in scale["dev_scores"].items())
        print(f"diversity scale chosen on dev: {scale['value']:g} (mean dev recall by scale: {tried})")
    seconds = f"{result.seconds:.1f} s"
    if how == "end to end":
        seconds += f", {result.seconds_per_epoch:.1f} s per epoch of training"
    print(f"model saved to {Path(args.output if args.output is not None else args.resume)} ({seconds})")
    return 0
