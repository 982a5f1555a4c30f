"""Continue training a saved model on (graded) data: what ``dgn finetune`` runs.

After the FGA-NDCG model card's recipe: start from a checkpoint trained on sparse labels
and fine-tune it on graded relevance with a soft-label loss, optionally mixed with the
sparse one (``loss = dense + sparse_weight * sparse``). Works for DGN and encoder-scorer
checkpoints alike; the features are rebuilt exactly as the checkpoint records them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from dgn.errors import DgnUserError

__all__ = ["CARD_LOSSES", "finetune_checkpoint"]

#: The model card's loss names -> :data:`dgn.train.LOSSES`.
CARD_LOSSES = {"soft_ce": "soft_label", "approx_ndcg": "approx_ndcg", "sparse_ce": "sparse_ce"}


def finetune_checkpoint(
    model_name_or_path: str | os.PathLike[str],
    train: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    dev: str | os.PathLike[str] | None = None,
    loss: str = "soft_ce",
    sparse_weight: float = 0.0,
    learning_rate: float | None = None,
    num_train_epochs: int | None = None,
    seed: int | None = None,
    resume: bool = False,
    vectors: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Any:
    """Fine-tune the checkpoint in ``model_name_or_path`` on ``train``; save to ``output_dir``.

    The training settings are the checkpoint's own (``extra.train_config``) with the loss,
    ``sparse_weight``, learning rate, epochs and seed replaced where given. As with
    ``dgn train``, the epoch with the best dev recall is saved (without ``dev``, the
    last one), the training state is written after every epoch to
    ``output_dir/training_state.pt`` and ``resume=True`` continues an interrupted run
    (same arguments).

    Args:
        model_name_or_path: A directory written by ``dgn train`` (a DGN or an encoder scorer).
        train: Selection JSONL; its ``relevance`` grades are the dense target (binary gold
            where absent).
        output_dir: Where the fine-tuned checkpoint goes (may not be the source directory).
        dev: Selection JSONL for early stopping.
        loss: ``"soft_ce"``, ``"approx_ndcg"`` or ``"sparse_ce"`` (:data:`CARD_LOSSES`).
        sparse_weight: Weight of the sparse term added to a dense loss.
        learning_rate: Adam learning rate (default: the checkpoint's).
        num_train_epochs: Maximum epochs (default: the checkpoint's).
        seed: Batch-order seed (default: the checkpoint's).
        resume: Continue the run whose state is in ``output_dir``.
        vectors: Word vectors when the recorded file has moved.
        cache_dir: Feature cache.
        progress: Progress bars and per-epoch lines.

    Returns:
        The :class:`dgn.train.TrainResult`; the model is in ``output_dir``.

    Raises:
        DgnUserError: A missing or unreadable checkpoint or file, an unknown loss, bad
            settings, a train file without gold, or a state that does not fit on resume.
    """
    from dgn.data import atomic_write
    from dgn.data.io import json_ready
    from dgn.model import DGN, load_model
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import STATE_NAME, TrainConfig, train_model

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
    history = {
        **result.to_dict(),
        "train_config": asdict(config),
        "finetuned_from": str(source.resolve()),
        "train": str(Path(train).resolve()),
        "dev": None if dev is None else str(Path(dev).resolve()),
        "loss": loss,
    }
    with atomic_write(out / "train_history.json") as fh:
        json.dump(json_ready(history), fh, indent=2, sort_keys=True, allow_nan=False)
        fh.write("\n")
    return result
