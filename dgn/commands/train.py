"""``dgn train``: train a DGN on selection JSONL and save the best epoch's checkpoint.

Defaults are those of :class:`dgn.model.DGNConfig` and :class:`dgn.train.TrainConfig` (the
settings ``dgn benchmark`` uses): an option the user does not pass leaves its field alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dgn._choices import END_TO_END_INITS, MODEL_TYPES

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
    "sparse_weight": "--sparse-weight",
    "compile": "--compile",
}
#: train_fasttext_vectors keyword -> option (only without --vectors).
FASTTEXT_OPTIONS = {"dim": "--fasttext-dim", "epoch": "--fasttext-epochs", "bucket": "--fasttext-bucket"}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


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
        help="end to end (the default): set_recall (default), soft_label or layerwise, see dgn.sentence.FinetuneConfig; "
        "on --features: layerwise (the paper's), sparse_ce, soft_label (graded relevance) or approx_ndcg, see "
        "dgn.train.training_loss",
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


#: Options whose argparse dest is not the config field's name.
_DESTS = {"modular": "modular", "dim": "fasttext_dim", "epoch": "fasttext_epochs", "bucket": "fasttext_bucket"}


def _end_to_end_by_default(args: argparse.Namespace) -> bool:
    """Whether ``dgn train`` trains end to end without being asked: the best the installed extras allow.

    With the ``encoders`` extra and neither ``--features`` nor ``--vectors`` (which name
    frozen feature blocks) nor ``--resume`` (which continues a run as it was trained), the
    sentence encoder is fine-tuned under the DGN head: on FM2's dev split it reaches a
    mean recall@{1,3,5,7} of 0.786 against 0.664 to 0.669 for the best frozen-feature DGN.
    """
    if args.finetune_encoder or args.features is not None or args.vectors is not None or args.resume is not None:
        return False
    from dgn.features.family import encoders_available

    return encoders_available()


def _end_to_end_mode(args: argparse.Namespace) -> str:
    """How an error names the end-to-end mode: the option, or the default that chose it."""
    if args.resume is not None:
        return "when resuming an end-to-end run"
    if args.finetune_encoder:
        return "with --finetune-encoder"
    return (
        "by end-to-end training (dgn train's default with the 'encoders' extra; name frozen feature "
        "blocks with --features to use it)"
    )


def _overrides(args: argparse.Namespace, options: dict[str, str]) -> dict[str, Any]:
    """The config fields whose options the user passed (argparse default None = not passed)."""
    values = {
        field: getattr(args, _DESTS.get(field, option[2:].replace("-", "_")))
        for field, option in options.items()
    }
    return {field: value for field, value in values.items() if value is not None}


def _train(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from pathlib import Path

    from dgn import distributed
    from dgn.commands._common import build_config, format_metrics
    from dgn.errors import DgnUserError
    from dgn.model import DGNConfig
    from dgn.train import SCORER_FIELDS, TrainConfig

    end_to_end_default = _end_to_end_by_default(args)
    torchrun = distributed.process_group(args.device)  # started by torchrun with WORLD_SIZE > 1
    model_over = _overrides(args, MODEL_OPTIONS)
    train_over = _overrides(args, TRAIN_OPTIONS)
    ft_over = _overrides(args, FASTTEXT_OPTIONS)
    if args.vectors is not None and ft_over:
        given = ", ".join(FASTTEXT_OPTIONS[k] for k in ft_over)
        raise DgnUserError(f"{given}: only used without --vectors (to train fastText vectors)")
    if args.train is not None:
        args.train = [t for given in args.train for t in given.split(",") if t]
        if len(args.train) == 1:
            args.train = args.train[0]
        elif args.resume is not None:
            raise DgnUserError("--train: a resumed run reads the files it recorded; leave --train out")
    saved: dict[str, Any] | None = None
    if args.resume is not None:
        from dgn.train import END_TO_END_KIND, read_run_settings

        saved = read_run_settings(args.resume)
        if saved["model_type"] == END_TO_END_KIND:
            return _finetune(args, model_over, train_over, ft_over, saved)
        if args.finetune_encoder:
            raise DgnUserError(f"--finetune-encoder: the run being resumed ({args.resume}) trained on frozen features")
        saved = _resume_settings(args, model_over, train_over, ft_over, saved)
    elif args.train is None or args.output is None:
        missing = " and ".join(o for o, v in (("--train", args.train), ("--output", args.output)) if v is None)
        raise DgnUserError(f"{missing}: required (unless --resume DIR continues a run)")
    if args.finetune_encoder or end_to_end_default:
        return _finetune(args, model_over, train_over, ft_over)
    end_to_end_only = [o for o, v in (("--encoder-lr", args.encoder_lr), ("--claims-per-step", args.claims_per_step),
                                      ("--facility", args.facility),
                                      ("--freeze-layers", args.freeze_layers),
                                      ("--grad-candidates", args.grad_candidates),
                                      ("--encoder-dropout", args.encoder_dropout),
                                      ("--first-layer-weight", args.first_layer_weight),
                                      ("--init", args.init),
                                      ("--encoder-grad-scale", args.encoder_grad_scale))
                       if v is not None]
    if end_to_end_only:
        raise DgnUserError(f"{', '.join(end_to_end_only)}: only used by end-to-end training (--finetune-encoder); "
                           "on frozen features the global batch is --batch-size")
    if args.device is not None and args.device != "cpu":
        raise DgnUserError(f"--device {args.device}: training on frozen features runs on the CPU; "
                           "--device is for end-to-end training")
    if torchrun:
        given = [o for o, v in (("--top-l", args.top_l),
                                ("several --train files", isinstance(args.train, list) and len(args.train) > 1))
                 if v]
        if given:
            raise DgnUserError(f"{', '.join(given)}: not supported under torchrun on frozen features yet; "
                               "run one process")
    stage = _candidate_stage(args, saved)
    if args.model_type not in (None, "dgn"):
        if saved is not None:
            raise DgnUserError("--model-type: the model of a resumed run cannot change; leave it out")
        dgn_only = [MODEL_OPTIONS[k] for k in model_over if k not in SCORER_FIELDS and k != "deep"]
        if dgn_only:
            raise DgnUserError(f"{', '.join(dgn_only)}: DGN options; not used with --model-type {args.model_type}")
        if "deep" in model_over:
            raise DgnUserError("--deep: use --model-type deep-encoder for the three-layer encoder scorer")
    # Fail on bad options before any slow step.
    build_config(lambda **kw: replace(DGNConfig(), **kw), model_over, MODEL_OPTIONS)
    base_config = TrainConfig()
    if saved is not None:
        recorded = saved["train_config"]
        base_config = TrainConfig(**{**recorded, "eval_ks": tuple(recorded["eval_ks"])})
    config = build_config(lambda **kw: replace(base_config, **kw), train_over, TRAIN_OPTIONS)
    if saved is not None and (args.features is not None or args.encoder_model is not None):
        raise DgnUserError("--features, --encoder-model: a resumed run featurizes as it did; leave them out")
    from dgn.features.family import parse_feature_names
    from dgn.train import train_from_files

    result, _ = train_from_files(
        args.train, args.output, args.dev,
        model_type=args.model_type, model_options=model_over, config=config,
        features=None if args.features is None else parse_feature_names(args.features),
        vectors=args.vectors, encoder_model=args.encoder_model, cache_dir=args.cache_dir,
        candidate_stage=stage, fasttext_options=ft_over, resume_settings=saved, save_every=args.save_every,
        progress=not args.quiet,
    )
    if not distributed.is_main():
        return 0  # rank 0 reports
    if result.best_metrics:
        print(
            f"best epoch {result.best_epoch} of {len(result.history)} "
            f"(dev mean recall {result.best_score:.4f}, {result.best_metrics.get('count', 0)} dev problems):"
        )
        print(format_metrics(result.best_metrics))
    else:
        print(f"no dev set: kept the last epoch ({result.best_epoch})")
    print(f"model saved to {Path(args.output)} ({result.seconds:.1f} s)")
    return 0


#: TrainConfig options that --finetune-encoder reads, and the FinetuneConfig field each sets.
_FINETUNE_FIELDS = {"epochs": "epochs", "lr": "head_lr", "weight_decay": "weight_decay", "seed": "seed", "loss": "loss",
                    "patience": "patience"}
#: FinetuneConfig field -> the option that sets it.
_FINETUNE_OPTIONS = {
    **{field: TRAIN_OPTIONS[name] for name, field in _FINETUNE_FIELDS.items()},
    "encoder_lr": "--encoder-lr", "top_l": "--top-l", "claims_per_step": "--claims-per-step",
    "freeze_layers": "--freeze-layers", "grad_candidates": "--grad-candidates",
    "first_layer_weight": "--first-layer-weight", "encoder_grad_scale": "--encoder-grad-scale",
    "encoder_dropout": "--encoder-dropout",
}


def _finetune(
    args: argparse.Namespace, model_over: dict[str, Any], train_over: dict[str, Any], ft_over: dict[str, Any],
    saved: dict[str, Any] | None = None,
) -> int:
    """``dgn train --finetune-encoder``, or its default with the encoders extra, or ``--resume`` of such a
    run (``saved``: its settings): options checked here, the work in :func:`dgn.sentence.train_end_to_end`."""
    from dataclasses import replace
    from pathlib import Path

    from dgn import distributed
    from dgn.commands._common import require_output_dir
    from dgn.errors import DgnUserError

    mode = _end_to_end_mode(args)
    for option, value in (("--rankers", args.rankers), ("--fusion", args.fusion)):
        if value is not None:
            raise DgnUserError(f"{option}: not used {mode}; its --top-l cut is BM25's")
    if args.model_type is not None:
        raise DgnUserError(f"--model-type: not used {mode}; see --loss for its heads")
    if saved is None and (args.train is None or args.output is None):
        raise DgnUserError("--train and --output: required")
    from dgn.features.family import parse_feature_names

    names = {"sentence", *parse_feature_names(args.features)} if args.features is not None else {"sentence"}
    if not names <= {"sentence", "lexical"}:
        raise DgnUserError(
            f"--features {args.features}: --finetune-encoder trains on the sentence features, optionally with lexical "
            "(--features sentence,lexical)"
        )
    unused = [MODEL_OPTIONS[k] for k in model_over] + [TRAIN_OPTIONS[k] for k in train_over if k not in _FINETUNE_FIELDS]
    unused += [FASTTEXT_OPTIONS[k] for k in ft_over] + (["--vectors"] if args.vectors is not None else [])
    if unused:
        raise DgnUserError(f"{', '.join(unused)}: not used {mode}")
    distributed.resolve_device(args.device)
    fields = {_FINETUNE_FIELDS[k]: v for k, v in train_over.items()}
    for field in ("encoder_lr", "top_l", "claims_per_step", "freeze_layers", "grad_candidates",
                  "first_layer_weight", "encoder_grad_scale", "encoder_dropout"):
        if getattr(args, field) is not None:
            fields[field] = getattr(args, field)
    from dgn.sentence import DEFAULT_MODEL, FinetuneConfig, resolve_model_path, train_end_to_end

    config: Any = None
    lexical: bool | None = "lexical" in names
    if saved is not None:  # the run's own settings; given options must agree with them
        _resume_output(args)
        from dgn.sentence.finetune import RECORDED_BEFORE

        recorded = {**RECORDED_BEFORE, **saved["train_config"]}  # a record older than a field: its value then
        for field, value in fields.items():
            if recorded.get(field) != value:
                raise DgnUserError(f"{_FINETUNE_OPTIONS[field]} {value}: the run being resumed used "
                                   f"{recorded.get(field)!r}; an end-to-end run resumes with its own settings")
        if args.features is None:
            lexical = None
        elif lexical != saved["model_config"]["lexical"]:
            raise DgnUserError(f"--features {args.features}: the run being resumed trained on "
                               f"{'sentence,lexical' if saved['model_config']['lexical'] else 'sentence'}")
        if args.encoder_model is not None and (
            resolve_model_path(args.encoder_model) != resolve_model_path(saved["encoder_model"])
        ):
            raise DgnUserError(f"--encoder-model {args.encoder_model}: the run being resumed fine-tuned "
                               f"{saved.get('encoder_model') or DEFAULT_MODEL}")
    else:
        from dgn._paths import train_file_list

        train_file_list(args.train, args.dev)  # checked again by the library, but before the notice below
        require_output_dir(args.output, "--output")
        resolve_model_path(args.encoder_model)
        try:
            config = replace(FinetuneConfig(), **fields)
        except ValueError as exc:
            raise DgnUserError(str(exc)) from None
        if not args.finetune_encoder and not args.quiet and distributed.is_main():  # the default chose end to end
            print(f"training end to end: the sentence encoder ({args.encoder_model or DEFAULT_MODEL}) fine-tuned "
                  f"under the DGN head, {config.epochs} epoch{'s' if config.epochs > 1 else ''}"
                  + (f", candidates cut to the {config.top_l} BM25-best" if config.top_l else "")
                  + " (the default with the 'encoders' extra; --features NAMES trains on "
                  "frozen feature blocks instead)", flush=True)
    result = train_end_to_end(
        args.train, args.dev, args.output, config=config, encoder_model=args.encoder_model, lexical=lexical,
        device=args.device, save_every=args.save_every, resume_settings=saved, progress=not args.quiet,
        facility="default" if args.facility is None else (args.facility or None), init=args.init,
    )
    if not distributed.is_main():
        return 0  # rank 0 reports
    from dgn.commands._common import format_metrics

    if result.best_metrics:
        print(f"best epoch {result.best_epoch} of {len(result.history)} (dev mean recall {result.best_score:.4f}):")
        print(format_metrics(result.best_metrics))
    print(f"model saved to {Path(args.output)} ({result.seconds:.1f} s, {result.seconds_per_epoch:.1f} s per epoch of training)")
    return 0


def _candidate_stage(args: argparse.Namespace, saved: dict[str, Any] | None) -> Any:
    """The candidate stage of ``--top-l``/``--rankers``/``--fusion`` (a resumed run: its own)."""
    from dgn.commands._common import candidate_stage_from_options
    from dgn.errors import DgnUserError
    from dgn.fusion.candidates import CandidateStage

    given = [o for o, v in (("--top-l", args.top_l), ("--rankers", args.rankers), ("--fusion", args.fusion))
             if v is not None]
    if saved is not None:
        if given:
            raise DgnUserError(f"{', '.join(given)}: a resumed run keeps its candidate stage; leave them out")
        recorded = saved.get("candidate_stage")
        return None if recorded is None else CandidateStage.from_settings(recorded)
    return candidate_stage_from_options(args, args.encoder_model)


def _resume_output(args: argparse.Namespace) -> None:
    """``--resume DIR``: ``args.output`` becomes DIR (a different ``--output`` is an error)."""
    from pathlib import Path

    from dgn.errors import DgnUserError

    directory = Path(args.resume)
    if args.output is not None and Path(args.output).resolve() != directory.resolve():
        raise DgnUserError(f"--output {args.output}: a resumed run writes to its own directory ({directory})")
    args.output = str(directory)


def _resume_settings(
    args: argparse.Namespace, model_over: dict[str, Any], train_over: dict[str, Any], ft_over: dict[str, Any],
    saved: dict[str, Any],
) -> dict[str, Any]:
    """Check ``--resume DIR`` of a run on frozen features against the other options; set
    ``args.output`` to DIR.

    ``saved``: the run's settings (:func:`dgn.train.read_run_settings`), returned;
    :func:`dgn.train.train_from_files` takes the run's own training and dev files where
    ``--train`` and ``--dev`` are left out, and checks given ones against them.
    """
    from dgn.errors import DgnUserError
    from dgn.train import RESUMABLE_CHANGES

    _resume_output(args)
    directory = args.output
    if model_over:
        given = ", ".join(MODEL_OPTIONS[k] for k in model_over)
        raise DgnUserError(f"{given}: the model of a resumed run cannot change (--resume {directory})")
    if ft_over:
        given = ", ".join(FASTTEXT_OPTIONS[k] for k in ft_over)
        raise DgnUserError(f"{given}: the vectors of a resumed run cannot change (--resume {directory})")
    for name, value in train_over.items():
        before = saved["train_config"].get(name)
        if name not in RESUMABLE_CHANGES and before != value:
            raise DgnUserError(
                f"{TRAIN_OPTIONS[name]} {value}: the run being resumed used {before!r}; "
                f"only {', '.join(TRAIN_OPTIONS[n] for n in RESUMABLE_CHANGES)} may change"
            )
    return saved
