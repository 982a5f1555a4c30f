"""Continue training a saved model on (graded) data: what ``dgn finetune`` runs.

After the FGA-NDCG model card's recipe: start from a checkpoint trained on sparse labels
and fine-tune it on graded relevance with a soft-label loss, optionally mixed with the
sparse one (``loss = dense + sparse_weight * sparse``). Works for frozen-feature DGN and
encoder-scorer checkpoints (the features are rebuilt exactly as the checkpoint records them)
and for end-to-end ones, the sentence encoder under a DGN or listwise head (what ``dgn train``
writes by default; :func:`finetune_end_to_end`, the loss reaching the transformer).
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from dgn.errors import DgnUserError

__all__ = ["CARD_LOSSES", "finetune_checkpoint", "finetune_end_to_end"]

#: ``dgn finetune --loss`` -> :data:`dgn.train.LOSSES`: the library's names
#: (:data:`dgn._choices.LOSSES`), and the model card's ``soft_ce`` for ``soft_label``.
CARD_LOSSES = {"soft_ce": "soft_label", "soft_label": "soft_label", "approx_ndcg": "approx_ndcg",
               "sparse_ce": "sparse_ce"}
#: ``dgn finetune --loss`` -> ``FinetuneConfig.dense_loss`` of an end-to-end model
#: (``sparse_ce``: none, the head's own loss on the gold).
_END_TO_END_DENSE = {"soft_ce": "soft_label", "soft_label": "soft_label", "approx_ndcg": "approx_ndcg",
                     "sparse_ce": None}


def finetune_checkpoint(
    model_name_or_path: str | os.PathLike[str],
    train: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    dev: str | os.PathLike[str] | None = None,
    loss: str = "soft_ce",
    sparse_weight: float = 0.0,
    learning_rate: float | None = None,
    head_learning_rate: float | None = None,
    num_train_epochs: int | None = None,
    seed: int | None = None,
    resume: bool = False,
    vectors: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Any:
    """Fine-tune the checkpoint in ``model_name_or_path`` on ``train``; save to ``output_dir``.

    A frozen-feature checkpoint (``config.json``): the training settings are the
    checkpoint's own (``extra.train_config``) with the loss, ``sparse_weight``, learning
    rate, epochs and seed replaced where given. As with ``dgn train``, the epoch with the
    best dev recall is saved (without ``dev``, the last one), the training state is
    written after every epoch to ``output_dir/training_state.pt`` and ``resume=True``
    continues an interrupted run (same arguments). An end-to-end checkpoint
    (``selector.json``, :func:`dgn.sentence.is_end_to_end_model`) goes to
    :func:`finetune_end_to_end`, after the checks both share.

    Args:
        model_name_or_path: A directory written by ``dgn train`` (a DGN or an encoder
            scorer on frozen features, or a model trained end to end).
        train: Selection JSONL; its ``relevance`` grades are the dense target (binary gold
            where absent).
        output_dir: Where the fine-tuned checkpoint goes (may not be the source directory).
        dev: Selection JSONL for early stopping.
        loss: ``"soft_ce"`` (the model card's name of ``"soft_label"``), ``"soft_label"``,
            ``"approx_ndcg"`` or ``"sparse_ce"`` (:data:`CARD_LOSSES`).
        sparse_weight: Weight of the sparse term added to a dense loss.
        learning_rate: Adam learning rate (default: the checkpoint's); of an end-to-end
            model, the transformer's.
        head_learning_rate: An end-to-end model's head learning rate (default: the checkpoint's).
        num_train_epochs: Maximum epochs (default: the checkpoint's).
        seed: Batch-order seed (default: the checkpoint's).
        resume: Continue the run whose state is in ``output_dir`` (frozen-feature checkpoints).
        vectors: Word vectors when the recorded file has moved (frozen-feature checkpoints).
        cache_dir: Feature cache (frozen-feature checkpoints).
        progress: Progress bars and per-epoch lines.

    Returns:
        The :class:`dgn.train.TrainResult` (for an end-to-end model, the
        :class:`dgn.sentence.FinetuneResult`); the model is in ``output_dir``.

    Raises:
        DgnUserError: A missing or unreadable checkpoint or file, an unknown loss, bad
            settings, a train file without gold, a state that does not fit on resume, or an
            option the checkpoint's kind does not use.
    """
    from dgn.model import DGN, load_model
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import STATE_NAME, TrainConfig, train_model
    from dgn.training import write_history

    source, out = Path(model_name_or_path), Path(output_dir)
    if loss not in CARD_LOSSES:
        raise DgnUserError(f"--loss {loss}: unknown; choose one of {', '.join(CARD_LOSSES)}")
    for path, option in ((train, "--train"), (dev, "--dev")):
        if path is not None and not Path(path).is_file():
            raise DgnUserError(f"{option} {path}: file not found")
    if out.exists() and not out.is_dir():
        raise DgnUserError(f"--output_dir {out}: not a directory")
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise DgnUserError(f"--output_dir {out}: the same directory as --model_name_or_path; choose another")
    from dgn.checkpoint import is_end_to_end_model

    if is_end_to_end_model(source):
        frozen_only = [o for o, v in (("--resume", resume), ("--vectors", vectors), ("--cache-dir", cache_dir)) if v]
        if frozen_only:
            raise DgnUserError(f"{', '.join(frozen_only)}: not used for {source}, a model trained end to end "
                               "(its encoder embeds the texts; each best epoch is saved as it comes)")
        return finetune_end_to_end(
            source, train, out, dev=dev, loss=loss, sparse_weight=sparse_weight, learning_rate=learning_rate,
            head_learning_rate=head_learning_rate, num_train_epochs=num_train_epochs, seed=seed, progress=progress,
        )
    if head_learning_rate is not None:
        raise DgnUserError(f"--head_learning_rate: only for a model trained end to end; {source} is not one "
                           "(use --learning_rate)")
    if resume and not (out / STATE_NAME).is_file():
        raise DgnUserError(f"--resume: no training state ({STATE_NAME}) in {out}; start without --resume")
    model = load_model(source)
    settings = model.extra.get("featurizer")
    if settings is None:
        raise DgnUserError(f"{source}: the checkpoint records no featurizer (field 'extra.featurizer')")
    recorded = dict(model.extra.get("train_config") or {})
    if "eval_ks" in recorded:
        recorded["eval_ks"] = tuple(recorded["eval_ks"])
    fields = {"loss": CARD_LOSSES[loss], "sparse_weight": float(sparse_weight)}
    for name, value in (("lr", learning_rate), ("epochs", num_train_epochs), ("seed", seed)):
        if value is not None:
            fields[name] = value
    try:
        config = replace(TrainConfig(**recorded), **fields)
    except (TypeError, ValueError) as exc:
        raise DgnUserError(str(exc)) from None
    featurizer = Featurizer.from_settings(settings, vectors_path=vectors, cache_dir=cache_dir, progress=progress)
    stage_settings = model.extra.get("candidate_stage")
    if stage_settings is not None:  # the checkpoint's candidate stage cuts the new data too
        from dgn.fusion.candidates import CandidateStage

        stage = CandidateStage.from_settings(stage_settings)
        out.mkdir(parents=True, exist_ok=True)
        if progress:
            print(f"candidate stage of {source}: {stage.describe()}", flush=True)
        stage.cut_file(train, out / "candidates-train.jsonl", keep_gold=True, progress=progress)
        train = out / "candidates-train.jsonl"
        if dev is not None:
            stage.cut_file(dev, out / "candidates-dev.jsonl", progress=progress)
            dev = out / "candidates-dev.jsonl"
    train_data = SelectionDataset(train, featurizer, max_candidates=config.max_candidates)
    if not any(any(info.gold) for info in train_data.infos):
        raise DgnUserError(f"--train {train}: no problem has gold evidence; nothing to train on")
    dev_data = SelectionDataset(dev, featurizer) if dev is not None else None
    if dev_data is not None and not any(any(info.gold) for info in dev_data.infos):
        raise DgnUserError(f"--dev {dev}: no problem has gold evidence; cannot select epochs")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DgnUserError(f"cannot create the model directory {out}: {exc.strerror or exc}") from None
    kind = "DGN" if isinstance(model, DGN) else "encoder scorer"
    if progress:
        print(f"fine-tuning the {kind} of {source} on {len(train_data)} problems: loss {loss}"
              + (f" + {sparse_weight:g} x sparse_ce" if sparse_weight else ""), flush=True)

    def save(m: Any, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(out, extra={
            "featurizer": featurizer.settings(),
            "train_config": asdict(config),
            "dev_metrics": metrics,
            "epoch": epoch,
            "finetuned_from": str(source.resolve()),
            **({"candidate_stage": stage_settings} if stage_settings is not None else {}),
        })

    model.train()
    result = train_model(
        model, train_data, dev_data, config, on_best=save, progress=progress,
        state_path=out / STATE_NAME, resume=resume,
        extra_state={"featurizer": featurizer.settings(), "finetuned_from": str(source.resolve())},
    )
    write_history(out, result, train_config=config, train=train, dev=dev, finetuned_from=str(source.resolve()),
                  loss=loss, model_type="dgn" if isinstance(model, DGN) else "encoder")
    return result


def finetune_end_to_end(
    model_name_or_path: str | os.PathLike[str],
    train: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    dev: str | os.PathLike[str] | None = None,
    loss: str = "soft_ce",
    sparse_weight: float = 0.0,
    learning_rate: float | None = None,
    head_learning_rate: float | None = None,
    num_train_epochs: int | None = None,
    seed: int | None = None,
    progress: bool = True,
) -> Any:
    """Fine-tune a model trained end to end (encoder and head) on graded relevance.

    The loss reaches the transformer, as in :func:`dgn.sentence.finetune`, whose AdamW
    loop this runs with the checkpoint's recorded :class:`dgn.sentence.FinetuneConfig`
    (``extra.finetune_config``; the defaults where none is recorded) and these changes:
    ``loss`` sets ``dense_loss`` (``"soft_ce"``: ``"soft_label"``, the layer-wise
    soft-label cross entropy on the grades; ``"approx_ndcg"``: layer-wise ApproxNDCG;
    ``"sparse_ce"``: none, the head's own recorded loss on the gold), ``sparse_weight``
    mixes that sparse loss in (``dense + sparse_weight * sparse``), ``learning_rate`` is
    the transformer's (``encoder_lr``) and ``head_learning_rate`` the head's (``head_lr``).
    A graded loss reaches the transformer through every layer (``encoder_grad_scale``
    1, whatever the checkpoint trained with).
    The epoch with the best dev recall is saved (without ``dev``, the last one) as an
    end-to-end model that ``dgn predict``, ``dgn evaluate`` and ``dgn explain`` read.

    Args:
        model_name_or_path: A directory written by :meth:`dgn.sentence.EndToEndModel.save_pretrained`
            (``dgn train`` by default).
        train: Selection JSONL; each problem's ``relevance`` is the graded target (binary
            gold where it has none).
        output_dir: The new model directory (not the source directory).
        dev, loss, sparse_weight, num_train_epochs, seed, progress: As :func:`finetune_checkpoint`.
        learning_rate: The transformer's AdamW learning rate (default: the checkpoint's ``encoder_lr``).
        head_learning_rate: The head's (default: the checkpoint's ``head_lr``).

    Returns:
        The :class:`dgn.sentence.FinetuneResult`; the model is in ``output_dir``, beside
        ``train_history.json``.

    Raises:
        DgnUserError: An unknown loss, bad settings, a file or checkpoint that cannot be
            read, a training file without gold or a dev file without gold, an output
            directory that is the source or cannot be made. Every check, the files read in
            full included, comes before anything is written.
        DataError: A malformed problem (file, line and field).
    """

    from dgn._paths import require_file
    from dgn.data import read_problems
    from dgn.sentence.finetune import EndToEndModel, config_from_record, finetune
    from dgn.training import END_TO_END_KIND, write_history

    source, out = Path(model_name_or_path), Path(output_dir)
    if loss not in _END_TO_END_DENSE:
        raise DgnUserError(f"--loss {loss}: unknown; choose one of {', '.join(_END_TO_END_DENSE)}")
    require_file(train, "--train")
    if dev is not None:
        require_file(dev, "--dev")
    if out.exists() and not out.is_dir():
        raise DgnUserError(f"--output_dir {out}: not a directory")
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise DgnUserError(f"--output_dir {out}: the same directory as --model_name_or_path; choose another")
    model = EndToEndModel.from_pretrained(source)
    recorded = dict(model.extra.get("finetune_config") or {})
    fields: dict[str, Any] = {"dense_loss": _END_TO_END_DENSE[loss], "sparse_weight": float(sparse_weight)}
    if fields["dense_loss"] is not None:
        fields["encoder_grad_scale"] = 1.0  # the graded loss trains the transformer through every layer
    for name, value in (("encoder_lr", learning_rate), ("head_lr", head_learning_rate),
                        ("epochs", num_train_epochs), ("seed", seed)):
        if value is not None:
            fields[name] = value
    if fields["sparse_weight"] and fields["dense_loss"] is None:
        raise DgnUserError(f"--sparse_weight {sparse_weight:g}: mixes the sparse loss into a graded one "
                           "(soft_ce or approx_ndcg); --loss sparse_ce is already the sparse loss")
    try:
        base = config_from_record(recorded)
    except (TypeError, ValueError) as exc:
        raise DgnUserError(f"{source}: field 'extra.finetune_config': {exc}") from None
    try:
        config = replace(base, **fields)
    except ValueError as exc:
        raise DgnUserError(str(exc)) from None
    train_problems = list(read_problems(train))
    if not any(any(p.gold) for p in train_problems):
        raise DgnUserError(f"--train {train}: no problem has gold evidence; nothing to train on")
    dev_problems = None if dev is None else list(read_problems(dev))
    if dev_problems is not None and not any(any(p.gold) for p in dev_problems):
        raise DgnUserError(f"--dev {dev}: no problem has gold evidence; cannot select epochs")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DgnUserError(f"cannot create the model directory {out}: {exc.strerror or exc}") from None
    if progress:
        usable = [p for p in train_problems if any(p.gold)]  # what finetune trains on
        sparse = f"{config.loss} on the gold"
        what = sparse if config.dense_loss is None else f"{loss} on the grades" + (
            f" + {config.sparse_weight:g} x {sparse}" if config.sparse_weight else "")
        graded = "" if config.dense_loss is None else f" ({sum(p.relevance is not None for p in usable)} graded)"
        print(f"fine-tuning the sentence encoder and {model.head} head of {source} end to end on the "
              f"{len(usable)} problems with gold of {len(train_problems)}{graded}: loss {what}", flush=True)
    inputs = {
        **{k: v for k, v in model.extra.items() if k not in ("epoch", "dev_metrics")},  # encoder_model, features
        "train": str(Path(train).resolve()),
        "dev": None if dev is None else str(Path(dev).resolve()),
        "finetune_config": asdict(config),
        "finetuned_from": str(source.resolve()),
        "loss": loss,
    }

    def save(m: Any, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(out, extra={**inputs, "epoch": epoch, "dev_metrics": metrics})

    result = finetune(model, train_problems, dev_problems, config, on_best=save, progress=progress)
    write_history(out, result, train_config=config, **inputs, model_type=END_TO_END_KIND)
    return result
