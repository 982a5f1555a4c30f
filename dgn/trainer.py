"""What ``dgn train`` does, as a library function: :func:`train` takes the command's options
(a :class:`TrainRequest`), chooses frozen-feature or end-to-end training, checks the options
against each other and against a run being resumed, and trains
(:func:`dgn.train.train_from_files` or :func:`dgn.sentence.train_end_to_end`).

The command (``dgn/commands/train.py``) only parses the options into a request and prints
the result; scripts and ``torchrun`` call :func:`train` the same way. Messages name the
command's options, as the user gave them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["TrainRequest", "train", "train_selector", "MODEL_OPTIONS", "TRAIN_OPTIONS", "FASTTEXT_OPTIONS"]

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


@dataclass
class TrainRequest:
    """The options of ``dgn train``, by their argparse names; None: not given (the library's
    defaults apply). ``train`` is a path or a list of paths."""

    train: Any = None
    dev: Any = None
    output: Any = None
    resume: Any = None
    batch_size: Any = None
    cache_dir: Any = None
    claims_per_step: Any = None
    compile: Any = None
    concave: Any = None
    deep: Any = None
    device: Any = None
    dropout: Any = None
    encoded_features: Any = None
    encoder_dropout: Any = None
    diversity_scales: Any = None
    encoder_grad_scale: Any = None
    encoder_lr: Any = None
    encoder_model: Any = None
    epochs: Any = None
    facility: Any = None
    fasttext_bucket: Any = None
    fasttext_dim: Any = None
    fasttext_epochs: Any = None
    features: Any = None
    first_layer_weight: Any = None
    freeze_layers: Any = None
    fusion: Any = None
    grad_candidates: Any = None
    hidden_features: Any = None
    init: Any = None
    loss: Any = None
    lr: Any = None
    max_candidates: Any = None
    model_type: Any = None
    modular: Any = None
    patience: Any = None
    rankers: Any = None
    relaxation: Any = None
    save_every: Any = None
    seed: Any = None
    sparse_weight: Any = None
    steps: Any = None
    tau: Any = None
    tau_decay: Any = None
    top_l: Any = None
    vectors: Any = None
    weight_decay: Any = None
    quiet: bool = False
    finetune_encoder: bool = False

    @classmethod
    def from_options(cls, values: dict[str, Any]) -> TrainRequest:
        """The request of a parsed command line's ``vars(args)`` (other keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


#: Options whose argparse dest is not the config field's name.
_DESTS = {"modular": "modular", "dim": "fasttext_dim", "epoch": "fasttext_epochs", "bucket": "fasttext_bucket"}


def _end_to_end_by_default(request: TrainRequest) -> bool:
    """Whether ``dgn train`` trains end to end without being asked: the best the installed extras allow.

    With the ``encoders`` extra and neither ``--features`` nor ``--vectors`` (which name
    frozen feature blocks) nor ``--resume`` (which continues a run as it was trained), the
    sentence encoder is fine-tuned under the DGN head: on FM2's dev split it reaches a
    mean recall@{1,3,5,7} of 0.786 against 0.664 to 0.669 for the best frozen-feature DGN.
    """
    if request.finetune_encoder or request.features is not None or request.vectors is not None or request.resume is not None:
        return False
    from dgn.features.family import encoders_available

    return encoders_available()


def _end_to_end_mode(request: TrainRequest) -> str:
    """How an error names the end-to-end mode: the option, or the default that chose it."""
    if request.resume is not None:
        return "when resuming an end-to-end run"
    if request.finetune_encoder:
        return "with --finetune-encoder"
    return (
        "by end-to-end training (dgn train's default with the 'encoders' extra; name frozen feature "
        "blocks with --features to use it)"
    )


def _overrides(request: TrainRequest, options: dict[str, str]) -> dict[str, Any]:
    """The config fields whose options the user passed (argparse default None = not passed)."""
    values = {
        field: getattr(request, _DESTS.get(field, option[2:].replace("-", "_")))
        for field, option in options.items()
    }
    return {field: value for field, value in values.items() if value is not None}


def train(request: TrainRequest) -> tuple[Any, str]:
    """Train as ``dgn train`` does with these options; return the result
    (:class:`~dgn.training.TrainResult`) and how the model trained (``"frozen features"`` or
    ``"end to end"``).

    Raises:
        DgnUserError: Options that do not go together, or that a run being resumed did not
            use (checked before anything is written), and what the training functions raise.
    """
    from dataclasses import replace

    from dgn import distributed
    from dgn._options import build_config
    from dgn.errors import DgnUserError
    from dgn.model import DGNConfig
    from dgn.train import SCORER_FIELDS, TrainConfig

    end_to_end_default = _end_to_end_by_default(request)
    torchrun = distributed.process_group(request.device)  # started by torchrun with WORLD_SIZE > 1
    model_over = _overrides(request, MODEL_OPTIONS)
    train_over = _overrides(request, TRAIN_OPTIONS)
    ft_over = _overrides(request, FASTTEXT_OPTIONS)
    if request.vectors is not None and ft_over:
        given = ", ".join(FASTTEXT_OPTIONS[k] for k in ft_over)
        raise DgnUserError(f"{given}: only used without --vectors (to train fastText vectors)")
    if request.train is not None:
        request.train = [t for given in request.train for t in given.split(",") if t]
        if len(request.train) == 1:
            request.train = request.train[0]
        elif request.resume is not None:
            raise DgnUserError("--train: a resumed run reads the files it recorded; leave --train out")
    saved: dict[str, Any] | None = None
    if request.resume is not None:
        from dgn.train import END_TO_END_KIND, read_run_settings

        saved = read_run_settings(request.resume)
        if saved["model_type"] == END_TO_END_KIND:
            return _finetune(request, model_over, train_over, ft_over, saved)
        if request.finetune_encoder:
            raise DgnUserError(f"--finetune-encoder: the run being resumed ({request.resume}) trained on frozen features")
        saved = _resume_settings(request, model_over, train_over, ft_over, saved)
    elif request.train is None or request.output is None:
        missing = " and ".join(o for o, v in (("--train", request.train), ("--output", request.output)) if v is None)
        raise DgnUserError(f"{missing}: required (unless --resume DIR continues a run)")
    if request.finetune_encoder or end_to_end_default:
        return _finetune(request, model_over, train_over, ft_over)
    end_to_end_only = [o for o, v in (("--encoder-lr", request.encoder_lr), ("--claims-per-step", request.claims_per_step),
                                      ("--facility", request.facility),
                                      ("--freeze-layers", request.freeze_layers),
                                      ("--grad-candidates", request.grad_candidates),
                                      ("--encoder-dropout", request.encoder_dropout),
                                      ("--diversity-scales", request.diversity_scales),
                                      ("--first-layer-weight", request.first_layer_weight),
                                      ("--init", request.init),
                                      ("--encoder-grad-scale", request.encoder_grad_scale))
                       if v is not None]
    if end_to_end_only:
        raise DgnUserError(f"{', '.join(end_to_end_only)}: only used by end-to-end training (--finetune-encoder); "
                           "on frozen features the global batch is --batch-size")
    if request.device is not None and request.device != "cpu":
        raise DgnUserError(f"--device {request.device}: training on frozen features runs on the CPU; "
                           "--device is for end-to-end training")
    if torchrun:
        given = [o for o, v in (("--top-l", request.top_l),
                                ("several --train files", isinstance(request.train, list) and len(request.train) > 1))
                 if v]
        if given:
            raise DgnUserError(f"{', '.join(given)}: not supported under torchrun on frozen features yet; "
                               "run one process")
    stage = _candidate_stage(request, saved)
    if request.model_type not in (None, "dgn"):
        if saved is not None:
            raise DgnUserError("--model-type: the model of a resumed run cannot change; leave it out")
        dgn_only = [MODEL_OPTIONS[k] for k in model_over if k not in SCORER_FIELDS and k != "deep"]
        if dgn_only:
            raise DgnUserError(f"{', '.join(dgn_only)}: DGN options; not used with --model-type {request.model_type}")
        if "deep" in model_over:
            raise DgnUserError("--deep: use --model-type deep-encoder for the three-layer encoder scorer")
    # Fail on bad options before any slow step.
    build_config(lambda **kw: replace(DGNConfig(), **kw), model_over, MODEL_OPTIONS)
    base_config = TrainConfig()
    if saved is not None:
        recorded = saved["train_config"]
        base_config = TrainConfig(**{**recorded, "eval_ks": tuple(recorded["eval_ks"])})
    config = build_config(lambda **kw: replace(base_config, **kw), train_over, TRAIN_OPTIONS)
    if saved is not None and (request.features is not None or request.encoder_model is not None):
        raise DgnUserError("--features, --encoder-model: a resumed run featurizes as it did; leave them out")
    from dgn.features.family import parse_feature_names
    from dgn.train import train_from_files

    result, _ = train_from_files(
        request.train, request.output, request.dev,
        model_type=request.model_type, model_options=model_over, config=config,
        features=None if request.features is None else parse_feature_names(request.features),
        vectors=request.vectors, encoder_model=request.encoder_model, cache_dir=request.cache_dir,
        candidate_stage=stage, fasttext_options=ft_over, resume_settings=saved, save_every=request.save_every,
        progress=not request.quiet,
    )
    return result, "frozen features"


#: TrainConfig options that --finetune-encoder reads, and the FinetuneConfig field each sets.
_FINETUNE_FIELDS = {"epochs": "epochs", "lr": "head_lr", "weight_decay": "weight_decay", "seed": "seed", "loss": "loss",
                    "patience": "patience"}
#: FinetuneConfig field -> the option that sets it.
_FINETUNE_OPTIONS = {
    **{field: TRAIN_OPTIONS[name] for name, field in _FINETUNE_FIELDS.items()},
    "encoder_lr": "--encoder-lr", "top_l": "--top-l", "claims_per_step": "--claims-per-step",
    "freeze_layers": "--freeze-layers", "grad_candidates": "--grad-candidates",
    "first_layer_weight": "--first-layer-weight", "encoder_grad_scale": "--encoder-grad-scale",
    "encoder_dropout": "--encoder-dropout", "diversity_scales": "--diversity-scales",
}


def _finetune(
    request: TrainRequest, model_over: dict[str, Any], train_over: dict[str, Any], ft_over: dict[str, Any],
    saved: dict[str, Any] | None = None,
) -> tuple[Any, str]:
    """``dgn train --finetune-encoder``, or its default with the encoders extra, or ``--resume`` of such a
    run (``saved``: its settings): options checked here, the work in :func:`dgn.sentence.train_end_to_end`."""
    from dataclasses import replace

    from dgn import distributed
    from dgn._paths import require_output_dir
    from dgn.errors import DgnUserError

    mode = _end_to_end_mode(request)
    for option, value in (("--rankers", request.rankers), ("--fusion", request.fusion)):
        if value is not None:
            raise DgnUserError(f"{option}: not used {mode}; its --top-l cut is BM25's")
    if request.model_type is not None:
        raise DgnUserError(f"--model-type: not used {mode}; see --loss for its heads")
    if saved is None and (request.train is None or request.output is None):
        raise DgnUserError("--train and --output: required")
    from dgn.features.family import parse_feature_names

    names = {"sentence", *parse_feature_names(request.features)} if request.features is not None else {"sentence"}
    if not names <= {"sentence", "lexical"}:
        raise DgnUserError(
            f"--features {request.features}: --finetune-encoder trains on the sentence features, optionally with lexical "
            "(--features sentence,lexical)"
        )
    unused = [MODEL_OPTIONS[k] for k in model_over] + [TRAIN_OPTIONS[k] for k in train_over if k not in _FINETUNE_FIELDS]
    unused += [FASTTEXT_OPTIONS[k] for k in ft_over] + (["--vectors"] if request.vectors is not None else [])
    if unused:
        raise DgnUserError(f"{', '.join(unused)}: not used {mode}")
    distributed.resolve_device(request.device)
    fields = {_FINETUNE_FIELDS[k]: v for k, v in train_over.items()}
    for field in ("encoder_lr", "top_l", "claims_per_step", "freeze_layers", "grad_candidates",
                  "first_layer_weight", "encoder_grad_scale", "encoder_dropout", "diversity_scales"):
        if getattr(request, field) is not None:
            fields[field] = getattr(request, field)
    if fields.get("diversity_scales") == ():  # --diversity-scales none
        fields["diversity_scales"] = None
    from dgn.sentence import DEFAULT_MODEL, FinetuneConfig, resolve_model_path, train_end_to_end

    config: Any = None
    lexical: bool | None = "lexical" in names
    if saved is not None:  # the run's own settings; given options must agree with them
        _resume_output(request)
        from dgn.sentence.finetune import RECORDED_BEFORE

        recorded = {**RECORDED_BEFORE, **saved["train_config"]}  # a record older than a field: its value then
        for field, value in fields.items():
            if recorded.get(field) != value:
                raise DgnUserError(f"{_FINETUNE_OPTIONS[field]} {value}: the run being resumed used "
                                   f"{recorded.get(field)!r}; an end-to-end run resumes with its own settings")
        if request.features is None:
            lexical = None
        elif lexical != saved["model_config"]["lexical"]:
            raise DgnUserError(f"--features {request.features}: the run being resumed trained on "
                               f"{'sentence,lexical' if saved['model_config']['lexical'] else 'sentence'}")
        # --encoder-model against the run's: train_end_to_end checks it (the run's may have moved)
    else:
        from dgn._paths import train_file_list

        train_file_list(request.train, request.dev)  # checked again by the library, but before the notice below
        require_output_dir(request.output, "--output")
        resolve_model_path(request.encoder_model)
        try:
            config = replace(FinetuneConfig(), **fields)
        except ValueError as exc:
            raise DgnUserError(str(exc)) from None
        if not request.finetune_encoder and not request.quiet and distributed.is_main():  # the default chose end to end
            print(f"training end to end: the sentence encoder ({request.encoder_model or DEFAULT_MODEL}) fine-tuned "
                  f"under the DGN head, {config.epochs} epoch{'s' if config.epochs > 1 else ''}"
                  + (f", candidates cut to the {config.top_l} BM25-best" if config.top_l else "")
                  + " (the default with the 'encoders' extra; --features NAMES trains on "
                  "frozen feature blocks instead)", flush=True)
    result = train_end_to_end(
        request.train, request.dev, request.output, config=config, encoder_model=request.encoder_model, lexical=lexical,
        device=request.device, save_every=request.save_every, resume_settings=saved, progress=not request.quiet,
        facility="default" if request.facility is None else (request.facility or None), init=request.init,
    )
    return result, "end to end"


def _candidate_stage(request: TrainRequest, saved: dict[str, Any] | None) -> Any:
    """The candidate stage of ``--top-l``/``--rankers``/``--fusion`` (a resumed run: its own)."""
    from dgn.errors import DgnUserError
    from dgn.fusion.candidates import CandidateStage, stage_from_options

    given = [o for o, v in (("--top-l", request.top_l), ("--rankers", request.rankers), ("--fusion", request.fusion))
             if v is not None]
    if saved is not None:
        if given:
            raise DgnUserError(f"{', '.join(given)}: a resumed run keeps its candidate stage; leave them out")
        recorded = saved.get("candidate_stage")
        return None if recorded is None else CandidateStage.from_settings(recorded)
    return stage_from_options(request.top_l, request.rankers, request.fusion, request.encoder_model)


def _resume_output(request: TrainRequest) -> None:
    """``--resume DIR``: ``request.output`` becomes DIR (a different ``--output`` is an error)."""
    from pathlib import Path

    from dgn.errors import DgnUserError

    directory = Path(request.resume)
    if request.output is not None and Path(request.output).resolve() != directory.resolve():
        raise DgnUserError(f"--output {request.output}: a resumed run writes to its own directory ({directory})")
    request.output = str(directory)


def _resume_settings(
    request: TrainRequest, model_over: dict[str, Any], train_over: dict[str, Any], ft_over: dict[str, Any],
    saved: dict[str, Any],
) -> dict[str, Any]:
    """Check ``--resume DIR`` of a run on frozen features against the other options; set
    ``request.output`` to DIR.

    ``saved``: the run's settings (:func:`dgn.train.read_run_settings`), returned;
    :func:`dgn.train.train_from_files` takes the run's own training and dev files where
    ``--train`` and ``--dev`` are left out, and checks given ones against them.
    """
    from dgn.errors import DgnUserError
    from dgn.train import RESUMABLE_CHANGES

    _resume_output(request)
    directory = request.output
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


def train_selector(
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dev: str | os.PathLike[str] | None,
    output: str | os.PathLike[str],
    **options: Any,
) -> Any:
    """Train a model as ``dgn train`` does, from Python; :func:`dgn.load` reads what it writes.

    ``dgn.train_selector("train.jsonl", "dev.jsonl", "model/", epochs=2)`` is ``dgn train
    --train train.jsonl --dev dev.jsonl --output model/ --epochs 2``: ``options`` are
    :class:`TrainRequest`'s fields (the command's options by their argparse names, e.g.
    ``finetune_encoder=True``, ``features="sentence,lexical"``, ``quiet=True``).

    Returns:
        The :class:`~dgn.training.TrainResult` of the run.

    Raises:
        TypeError: An option ``dgn train`` does not have.
        DgnUserError: As :func:`train`.
    """
    known = {f.name for f in fields(TrainRequest)} - {"train", "dev", "output"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"train_selector: unknown option(s) {', '.join(unknown)}; see dgn.trainer.TrainRequest")
    files = [os.fspath(t) for t in ([train] if isinstance(train, (str, os.PathLike)) else train)]
    request = TrainRequest(train=files, dev=None if dev is None else os.fspath(dev), output=os.fspath(output), **options)
    result, _ = _train(request)
    return result


_train = train  # train_selector's parameter ``train`` (the files) hides the function
