"""Training the DGN and the Encoder/DeepEncoder baselines on frozen features.

The task is the paper's (Powers et al., 2018, sec. 4): Adam, the layer-wise cross entropy
through the relaxed greedy layers for the DGN, weighted binary cross entropy for the
encoder baselines, model selection by recall on a dev set (early stopping). It runs in the
library's one training loop (:func:`dgn.training.fit`) as a :class:`FrozenFeatureTask`;
:func:`train_from_files` is what ``dgn train`` runs on feature blocks. Ranking with a
trained model is :mod:`dgn.ranking`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from dgn._choices import FROZEN_LOSSES, GRADED_LOSSES, MODEL_TYPES, one_of
from dgn._paths import model_directory, one_train_file, resumed_run_files, train_file_list
from dgn.baselines import EncoderScorer
from dgn.errors import DgnUserError
from dgn.losses import layerwise_cross_entropy, soft_label_cross_entropy
from dgn.model import DGN
from dgn.pipeline import Batch, SelectionDataset
from dgn.ranking import Model, evaluate_model, rank, rank_batch, ranked
from dgn.training import (
    END_TO_END_KIND,
    STATE_NAME,
    Task,
    TrainResult,
    check_save_every,
    clip_gradients,
    fit,
    load_training_state,
    usable_problems,
    write_history,
    write_training_state,
)

__all__ = [
    "FrozenFeatureTask",
    "TrainConfig",
    "TrainResult",
    "train_model",
    "rank",
    "evaluate_model",
    "load_training_state",
    "write_training_state",
    "LOSSES",
    "training_loss",
    "ranked",
    "rank_batch",
    "make_optimizer",
    "clip_gradients",
    "train_from_files",
    "read_run_settings",
    "STATE_NAME",
]

#: Training losses (what each means for the DGN and for the encoder scorers: :func:`training_loss`).
LOSSES = FROZEN_LOSSES
#: TrainConfig fields a resumed run may change (they only decide when to stop).
RESUMABLE_CHANGES = ("epochs", "patience", "compile")
#: The DGNConfig fields an encoder scorer reads (:func:`train_from_files`).
SCORER_FIELDS = ("hidden_features", "encoded_features", "dropout")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults: the ones behind the FM2 benchmark table).

    Attributes:
        epochs: Maximum number of passes over the training set.
        batch_size: Problems per step.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        seed: Seeds initialisation and the order of batches.
        patience: Stop after this many epochs without a better dev score (0: never).
        loss: One of :data:`LOSSES` (see :func:`training_loss`): ``"layerwise"`` (the
            paper's: layer-wise cross entropy for the DGN, weighted binary cross entropy
            for the encoder scorers), ``"listwise"`` (cross entropy against the binary
            gold spread evenly over what is not yet picked, ``gold / |gold|``: per layer
            for the DGN, over the one ranking for the encoders), ``"sparse_ce"`` (the
            model's own cross entropy on the binary gold: layer-wise for the DGN,
            listwise for the encoders), ``"soft_label"``
            (soft-label cross entropy against the graded relevance) or ``"approx_ndcg"``
            (ApproxNDCG, Qin, Liu and Li, 2010).
        sparse_weight: Add ``sparse_weight`` times the sparse loss (``"sparse_ce"``) to a
            graded one (``"soft_label"`` or ``"approx_ndcg"``), as the FGA-NDCG model card
            mixes them: ``loss = dense + sparse_weight * sparse``. 0 (default) trains on
            the graded signal alone.
        ndcg_temperature: Temperature of ApproxNDCG's smooth ranks.
        ndcg_k: Cutoff of ApproxNDCG (None: the whole list).
        tau_decay: Multiply the DGN's temperature by this after each epoch (the paper's
            annealing used 0.9; 1.0 keeps it fixed, which the paper settled on).
        pos_weight: Weight of positive items in the encoders' BCE; None: the ratio of
            negatives to positives in the training set.
        max_candidates: Cap each training problem at this many candidates: its gold ones
            plus seeded random negatives (:meth:`dgn.pipeline.SelectionDataset.training_candidates`).
            Evaluation always sees every candidate. 64 leaves FM2 (at most 12) untouched
            and bounds a WiCE batch (up to 1,131 candidates) at 64 columns.
        eval_ks: Cutoffs of the dev recall that selects the best epoch (their mean).
        max_grad_norm: Clip the gradients' total 2-norm at this before each step
            (:func:`dgn.training.clip_gradients`; the end-to-end model clips at 1).
        compile: Run a DGN's greedy layers as compiled code while training
            (``GreedyLayer.compile``; the model's own setting is restored afterwards):
            the relaxed layers in the hand-written kernel of ``SCMM("sqrt")`` with the
            ``soft`` relaxation (built once per machine, about a second), else as one
            ``torch.compile``'d graph (tens of seconds at the first batch, and again when
            ``tau_decay`` changes the temperature); dev evaluation with the compiled
            hard-greedy kernel. The encoder runs fused (``Encoder.fused``: oneDNN's linear
            layers with their ReLUs, a C pass for each ReLU's backward), and Adam fused
            (``torch.optim.Adam(fused=True)``: one kernel for all parameters' updates).
            The same values up to float rounding, about twice the training throughput
            at 64 problems of 40 candidates. Encoder scorers get the fused encoder and
            Adam.
    """

    epochs: int = 40
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    seed: int = 0
    patience: int = 8
    loss: str = "layerwise"
    tau_decay: float = 1.0
    pos_weight: float | None = None
    max_candidates: int | None = 64
    eval_ks: tuple[int, ...] = (1, 3, 5, 7)
    sparse_weight: float = 0.0
    ndcg_temperature: float = 1.0
    ndcg_k: int | None = None
    compile: bool = False
    max_grad_norm: float = 5.0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TrainConfig.{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"TrainConfig.lr must be a positive number, got {self.lr!r}")
        if isinstance(self.max_grad_norm, bool) or not isinstance(self.max_grad_norm, (int, float)) \
                or not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"TrainConfig.max_grad_norm must be a finite number > 0, got {self.max_grad_norm!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"TrainConfig.compile must be True or False, got {self.compile!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"TrainConfig.loss must be one of {LOSSES}, got {self.loss!r}")
        if not 0 < self.tau_decay <= 1:
            raise ValueError(f"TrainConfig.tau_decay must be in (0, 1], got {self.tau_decay!r}")
        if self.patience < 0:
            raise ValueError(f"TrainConfig.patience must be >= 0, got {self.patience!r}")
        if not (isinstance(self.sparse_weight, (int, float)) and math.isfinite(self.sparse_weight)
                and self.sparse_weight >= 0):
            raise ValueError(f"TrainConfig.sparse_weight must be a finite number >= 0, got {self.sparse_weight!r}")
        if self.sparse_weight and self.loss not in GRADED_LOSSES:
            raise ValueError(
                f"TrainConfig.sparse_weight mixes a sparse term into a graded loss ('soft_label' or "
                f"'approx_ndcg'); loss {self.loss!r} is already sparse"
            )
        if not (isinstance(self.ndcg_temperature, (int, float)) and math.isfinite(self.ndcg_temperature)
                and self.ndcg_temperature > 0):
            raise ValueError(f"TrainConfig.ndcg_temperature must be a finite number > 0, got {self.ndcg_temperature!r}")
        if self.ndcg_k is not None and (isinstance(self.ndcg_k, bool) or not isinstance(self.ndcg_k, int)
                                        or self.ndcg_k <= 0):
            raise ValueError(f"TrainConfig.ndcg_k must be a positive integer or None, got {self.ndcg_k!r}")




def _pos_weight(data: SelectionDataset) -> float:
    pos = sum(len({v for g in info.gold for v in g}) for info in data.infos)
    total = sum(info.num_candidates for info in data.infos)
    return max(1.0, (total - pos) / max(1, pos))


def _on_model_device(model: Model, batch: Batch) -> Batch:
    """``batch`` with its tensors on the device of ``model``'s parameters (a model moved to a
    GPU trains and ranks there; the data is read and batched on the CPU)."""
    param = next(model.parameters(), None)
    if param is None or batch.features.device == param.device:
        return batch
    moved = (t.to(param.device, non_blocking=True) for t in (batch.features, batch.mask, batch.gold, batch.relevance))
    return Batch(*moved, batch.index)


def training_loss(model: Model, batch: Batch, config: TrainConfig, pos_weight: float = 1.0) -> torch.Tensor:
    """The loss of ``config.loss`` (plus its sparse share) for one batch.

    ========================  ====================================  ======================================
    ``config.loss``           DGN (layer logits ``(B, K, N)``)       encoder scorers (logits ``(B, N)``)
    ========================  ====================================  ======================================
    ``"layerwise"``           layer-wise cross entropy (the paper)   weighted binary cross entropy (the paper)
    ``"listwise"``            layer-wise soft-label CE on the gold   listwise cross entropy, target gold/#gold
    ``"sparse_ce"``           layer-wise cross entropy               listwise cross entropy, target gold/#gold
    ``"soft_label"``          layer-wise soft-label cross entropy    soft cross entropy, target r / sum(r)
    ``"approx_ndcg"``         layer-wise ApproxNDCG                  ApproxNDCG
    ========================  ====================================  ======================================

    With ``config.sparse_weight > 0`` the ``"sparse_ce"`` loss times that weight is added.

    Args:
        model: A DGN or an encoder scorer.
        batch: A padded batch (its ``relevance`` is binary gold where the data has no grades).
        config: Which loss and its settings.
        pos_weight: The weight of positives in the binary cross entropy.
    """
    from dgn import losses

    kind = config.loss
    batch = _on_model_device(model, batch)
    gold = batch.gold.to(batch.features.dtype)
    if isinstance(model, DGN):
        logits = model(batch.features, batch.mask).logits

        def one(name: str) -> torch.Tensor:
            if name in ("layerwise", "sparse_ce"):
                return layerwise_cross_entropy(logits, batch.gold)
            if name == "listwise":
                return soft_label_cross_entropy(logits, gold)
            if name == "soft_label":
                return soft_label_cross_entropy(logits, batch.relevance)
            return losses.layerwise_approx_ndcg_loss(
                logits, batch.relevance, temperature=config.ndcg_temperature, k=config.ndcg_k
            )
    else:
        logits = model(batch.features, batch.mask).logits
        m = batch.mask

        def one(name: str) -> torch.Tensor:
            if name == "layerwise":
                return F.binary_cross_entropy_with_logits(
                    logits[m], gold[m], pos_weight=torch.tensor(pos_weight, device=logits.device)
                )
            if name in ("sparse_ce", "listwise"):
                return losses.soft_cross_entropy(logits, gold, mask=m)
            if name == "soft_label":
                return losses.soft_cross_entropy(logits, batch.relevance, mask=m)
            return losses.approx_ndcg_loss(
                logits, batch.relevance, temperature=config.ndcg_temperature, k=config.ndcg_k, mask=m
            )

    loss = one(kind)
    if config.sparse_weight:
        loss = loss + config.sparse_weight * one("sparse_ce")
    return loss


def make_optimizer(model: Model, config: TrainConfig) -> torch.optim.Adam:
    """The Adam of :func:`train_model`: ``config.lr`` and ``config.weight_decay``, fused
    (one kernel for every parameter's update) when ``config.compile`` is set and the
    parameters are floating point on the CPU or CUDA, else PyTorch's default implementation."""
    params = list(model.parameters())
    fused = config.compile and bool(params) and all(
        p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params
    )
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)


@contextlib.contextmanager
def _compiled_layers(model: Model, on: bool) -> Iterator[None]:
    """Set a DGN's ``greedy.compile`` and its encoder's ``fused`` for the duration
    (``TrainConfig.compile``), then restore them."""
    if not on:
        yield
        return
    switches = ((getattr(model, "greedy", None), "compile"), (getattr(model, "encoder", None), "fused"))
    before = [(part, flag, getattr(part, flag)) for part, flag in switches if hasattr(part, flag)]
    try:
        for part, flag, _ in before:
            setattr(part, flag, True)
        yield
    finally:
        for part, flag, value in before:
            setattr(part, flag, value)


class FrozenFeatureTask(Task):
    """A DGN or an encoder scorer on frozen features, as :func:`dgn.training.fit` trains it.

    A step's loss is :func:`training_loss` on a padded batch of the problems (each cut to
    ``config.max_candidates``); the dev metrics are :func:`evaluate_model`'s (every
    process ranks the whole dev set); ``config.compile`` holds for the run and
    ``config.tau_decay`` anneals the DGN's temperature epoch by epoch.
    """

    resumable = RESUMABLE_CHANGES
    #: Fields newer than some saved states, with the value those runs had in effect.
    recorded_before = {"max_grad_norm": 5.0}

    def __init__(self, model: Model, train: SelectionDataset, dev: SelectionDataset | None,
                 config: TrainConfig) -> None:
        self.model, self.train, self.dev, self.config = model, train, dev, config
        self.kind = _model_kind(model)[0]
        self.batch_size = config.batch_size
        self.problems = usable_problems([info.gold for info in train.infos])
        self.num_problems = len(self.problems)
        self.pos_weight = config.pos_weight if config.pos_weight is not None else _pos_weight(train)
        self.base_tau = model.config.tau if isinstance(model, DGN) else None

    def settings(self) -> dict[str, Any]:
        if isinstance(self.model, DGN):  # the run's temperature, not this epoch's annealed one
            return replace(self.model.config, tau=self.base_tau).to_dict()
        return _model_kind(self.model)[1]

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, None]:
        return make_optimizer(self.model, self.config), None

    def loss(self, problems: Sequence[int]) -> torch.Tensor:
        batch = self.train.batch([self.problems[i] for i in problems], truncate=True)
        return training_loss(self.model, batch, self.config, self.pos_weight)

    def dev_metrics(self, progress: bool) -> dict[str, float] | None:
        return None if self.dev is None else evaluate_model(self.model, self.dev, self.config.eval_ks)

    def run(self) -> contextlib.AbstractContextManager[Any]:
        return _compiled_layers(self.model, self.config.compile)

    @contextlib.contextmanager
    def epoch(self, epoch: int) -> Iterator[None]:
        if not isinstance(self.model, DGN) or self.config.tau_decay == 1.0:
            yield
            return
        assert self.base_tau is not None
        _set_tau(self.model, self.base_tau * self.config.tau_decay ** (epoch - 1))
        try:
            yield
        finally:
            _set_tau(self.model, self.base_tau)


def train_model(
    model: Model,
    train: SelectionDataset,
    dev: SelectionDataset | None,
    config: TrainConfig,
    *,
    on_best: Callable[[Model, int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    progress: bool = True,
    state_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    save_every: int | None = None,
    extra_state: dict[str, Any] | None = None,
) -> TrainResult:
    """Train ``model`` with Adam; keep the epoch with the best mean dev recall.

    :func:`dgn.training.fit` on a :class:`FrozenFeatureTask`; see there for ``on_best``,
    ``on_step``, ``progress``, ``state_path``, ``resume`` (``config`` may then differ from
    the saved run's only in :data:`RESUMABLE_CHANGES`), ``save_every`` and ``extra_state``.

    Args:
        model: A :class:`~dgn.model.DGN` or :class:`~dgn.baselines.EncoderScorer`. It
            trains on the device its parameters are on (``model.cuda()`` before the call
            trains on the GPU; each batch is moved there).
        train: Training problems (problems without gold are skipped).
        dev: Problems for model selection; None keeps the last epoch.
        config: Optimisation settings.

    Returns:
        A :class:`~dgn.training.TrainResult`.

    Raises:
        DgnUserError: ``resume`` without a readable state, or a state from another
            model or config.
    """
    task = FrozenFeatureTask(model, train, dev, config)
    return fit(task, on_best=on_best, on_step=on_step, progress=progress, state_path=state_path, resume=resume,
               save_every=save_every, extra_state=extra_state)


def _model_kind(model: Model) -> tuple[str, dict[str, Any]]:
    if isinstance(model, DGN):
        return "dgn", model.config.to_dict()
    return type(model).__name__, dict(getattr(model, "config", {}))


def _set_tau(model: DGN, tau: float) -> None:
    model.config = replace(model.config, tau=tau)


def read_run_settings(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings a run saved in ``directory`` recorded in its training state
    (:data:`STATE_NAME`), for :func:`train_from_files`'s ``resume_settings``: ``train_config``,
    ``model_config``, ``model_type``, ``featurizer``, ``candidate_stage`` (or None), and the
    files it trained on, ``train`` and ``dev`` (paths, or None) with their ``train_sha256``
    and ``dev_sha256``. An end-to-end run (:func:`dgn.sentence.train_end_to_end`) has
    ``model_type`` :data:`END_TO_END_KIND`, its :class:`~dgn.sentence.FinetuneConfig` as
    ``train_config``, its head's settings as ``model_config``, its ``encoder_model`` (None:
    the bundled one) and no featurizer (None), for :func:`~dgn.sentence.train_end_to_end`'s ``resume_settings``.

    Raises:
        DgnUserError: No training state there, or one that records no featurizer.
    """
    directory = Path(directory)
    path = directory / STATE_NAME
    if not path.is_file():
        raise DgnUserError(f"--resume {directory}: no training state ({STATE_NAME}) there; "
                           "start a new run without --resume")
    state = load_training_state(path)
    extra = state.get("extra") or {}
    files = {key: extra.get(key) for key in ("train", "dev", "train_sha256", "dev_sha256")}
    if state.get("model_kind") == END_TO_END_KIND:
        return {
            "train_config": state["train_config"],
            "model_config": state["model_config"],
            "model_type": END_TO_END_KIND,
            "featurizer": None,
            "candidate_stage": None,
            "encoder_model": extra.get("encoder_model"),
            **files,
        }
    if "featurizer" not in extra:
        raise DgnUserError(f"{path}: field 'extra.featurizer': missing; cannot featurize as the run did")
    return {
        "train_config": state["train_config"],
        "model_config": state["model_config"],
        "model_type": extra.get("model_type", "dgn"),
        "featurizer": extra["featurizer"],
        "candidate_stage": extra.get("candidate_stage"),
        **files,
    }


def train_from_files(
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    output: str | os.PathLike[str],
    dev: str | os.PathLike[str] | None = None,
    *,
    model_type: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    config: TrainConfig | None = None,
    features: str | Sequence[str] | None = None,
    vectors: str | os.PathLike[str] | None = None,
    encoder_model: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    candidate_stage: Any = None,
    fasttext_options: Mapping[str, Any] | None = None,
    resume_settings: Mapping[str, Any] | None = None,
    save_every: int | None = None,
    progress: bool = True,
) -> tuple[TrainResult, dict[str, Any]]:
    """Train a DGN (or an encoder scorer) on selection JSONL files and save the best epoch.

    What ``dgn train`` runs on frozen feature blocks, alone or as each process under
    ``torchrun``: the files featurized (:class:`~dgn.pipeline.Featurizer`, the feature cache
    filled by rank 0), the model built and trained by :func:`train_model`, and ``output``
    left with the best epoch's checkpoint, the training state (:data:`STATE_NAME`, each
    epoch) and ``train_history.json`` (written by rank 0).

    Args:
        train: One selection JSONL file, or several, trained on together (written as
            ``output/train-combined.jsonl``; one process only). None when resuming: the
            file the run recorded.
        output: The model directory (created).
        dev: Selection JSONL for epoch selection; None keeps the last epoch (when
            resuming: the run's own dev file, if it had one).
        model_type: ``"dgn"`` (the default), ``"encoder"`` or ``"deep-encoder"``.
        model_options: :class:`~dgn.model.DGNConfig` fields to set (``in_features`` comes from
            the features); an encoder scorer reads ``hidden_features``,
            ``encoded_features`` and ``dropout``.
        config: The optimisation settings (default :class:`TrainConfig`; when resuming, the
            run's own, and a given one may differ from it only in :data:`RESUMABLE_CHANGES`).
        features: Feature block names (a list, or a comma list); None: the best set the
            installed extras allow (:func:`~dgn.features.family.default_feature_names`),
            word vectors joining it where ``vectors`` is given.
        vectors: Word vectors for the ``wordvec`` block; None with ``wordvec`` trains
            fastText vectors on the training texts (``output/vectors.bin``; one process
            only; ``fasttext_options`` are :func:`~dgn.features.train_fasttext_vectors`'s
            keywords).
        encoder_model: The sentence encoder of the ``sentence`` block (default: the bundled one).
        cache_dir: The feature cache (default :func:`~dgn.pipeline.default_cache_dir`).
        candidate_stage: A :class:`~dgn.fusion.candidates.CandidateStage` that cuts each
            problem's candidates first (training keeps every gold one; one process only).
        resume_settings: Continue the run saved in ``output``: what
            :func:`read_run_settings` returns for it. The run's model, features, vectors and
            candidate stage are kept (giving other ones is an error), and the training and
            dev files must be the ones it trained on (their SHA-256 is checked).
        save_every: Also save the training state every this many optimiser steps within
            an epoch (None: after every epoch only).
        progress: Print what is done and show progress bars (rank 0 only under torchrun).

    Returns:
        The :class:`TrainResult` and the history written to ``train_history.json``.

    Raises:
        DgnUserError: A bad argument (checked before any file is written), a missing input
            file, an output path that is not a directory, a training set without gold
            evidence or a dev set without it, or, when resuming, settings or files other
            than the run's.
    """
    from dataclasses import replace

    from dgn import distributed
    from dgn.data import read_problems
    from dgn.features.cache import file_sha256
    from dgn.features.family import default_feature_names, parse_feature_names
    from dgn.model import DGNConfig
    from dgn.pipeline import Featurizer

    world = distributed.world_size() if distributed.process_group() else 1
    progress = progress and distributed.is_main()
    check_save_every(save_every)
    model_options = dict(model_options or {})
    if features is not None:
        features = parse_feature_names(features if isinstance(features, str) else ",".join(features))
    saved = None if resume_settings is None else dict(resume_settings)
    stage = candidate_stage
    if saved is not None:
        if saved["model_type"] == END_TO_END_KIND:
            raise DgnUserError("resume_settings: the run was trained end to end; resume it with "
                               "dgn.sentence.train_end_to_end (dgn train --resume does)")
        given = [name for name, value in (("model_options", model_options), ("features", features),
                                          ("encoder_model", encoder_model), ("fasttext_options", fasttext_options))
                 if value]
        if given:
            raise DgnUserError(f"{', '.join(given)}: a resumed run keeps its model and features; leave them out")
        if model_type is not None and model_type != saved["model_type"]:
            raise DgnUserError(f"model_type {model_type!r}: the run being resumed trained a {saved['model_type']!r}")
        model_type = saved["model_type"]
        if config is None:
            recorded = saved["train_config"]
            config = TrainConfig(**{**recorded, "eval_ks": tuple(recorded["eval_ks"])})
        from dgn.fusion.candidates import CandidateStage

        stage = None if saved["candidate_stage"] is None else CandidateStage.from_settings(saved["candidate_stage"])
        if candidate_stage is not None and (stage is None or candidate_stage.settings() != stage.settings()):
            raise DgnUserError("candidate stage: a resumed run keeps its own; leave it out")
        train_files, dev = resumed_run_files(saved, train, dev)
    model_type = model_type or "dgn"
    if model_type not in MODEL_TYPES:
        raise DgnUserError(f"model_type must be {one_of(MODEL_TYPES)}, got {model_type!r}")
    if model_type != "dgn":
        dgn_only = sorted(set(model_options) - set(SCORER_FIELDS))
        if dgn_only:
            raise DgnUserError(f"model_options {', '.join(dgn_only)}: DGN settings; an encoder scorer reads "
                               "hidden_features, encoded_features and dropout")
    try:
        replace(DGNConfig(in_features=1), **model_options)
    except (TypeError, ValueError) as exc:
        raise DgnUserError(f"model_options: {exc}") from None
    config = config or TrainConfig()
    if saved is None:
        if train is None:
            raise DgnUserError("--train: required")
        train_files = train_file_list(train, dev)
    if world > 1:
        given = [o for o, v in (("several --train files", len(train_files) > 1),
                                ("--top-l", stage is not None and saved is None)) if v]
        if given:
            raise DgnUserError(f"{', '.join(given)}: not supported under torchrun yet; run one process")
    out = model_directory(output)
    train_path = one_train_file(train_files, out, progress)
    dev_path = None if dev is None else str(dev)
    if stage is not None and saved is None:
        if progress:
            print(f"candidate stage: {stage.describe()} (training keeps every gold candidate)", flush=True)
        cut_train = out / "candidates-train.jsonl"
        stage.cut_file(train_path, cut_train, keep_gold=True, progress=progress)
        train_path = str(cut_train)
        if dev_path is not None:
            cut_dev = out / "candidates-dev.jsonl"
            stage.cut_file(dev_path, cut_dev, progress=progress)
            dev_path = str(cut_dev)
    if features is None and saved is None:
        # The best set the installed extras allow; word vectors the user names join it.
        features = default_feature_names()
        if vectors is not None and "wordvec" not in features:
            features = ("wordvec", *features)
        if progress:
            print(f"features: {','.join(features)} (the default with the installed extras"
                  + (" and --vectors" if vectors is not None else "") + "; --features to choose)", flush=True)
    if saved is not None:
        featurizer = Featurizer.from_settings(
            saved["featurizer"], vectors_path=vectors, cache_dir=cache_dir, progress=progress
        )
        vectors = featurizer.vectors_path
    else:
        if vectors is None and "wordvec" in features:
            from dgn.features import train_fasttext_vectors

            if world > 1:
                raise DgnUserError("--vectors: under torchrun give the word vectors (no per-process fastText training)")
            vectors = out / "vectors.bin"
            if progress:
                print(f"training fastText vectors on {train_path} -> {vectors}", flush=True)
            texts = (t for p in read_problems(train_path) for t in (p.query, *p.candidates))
            train_fasttext_vectors(texts, vectors, seed=config.seed, **dict(fasttext_options or {}))
        featurizer = Featurizer(
            vectors, features=features, encoder_model=encoder_model, cache_dir=cache_dir, progress=progress
        )
    if not distributed.is_main():
        distributed.barrier()  # rank 0 fills the feature cache; the others then read it
    if saved is None:
        featurizer.fit_scaler(train_path)
    train_data = SelectionDataset(train_path, featurizer, max_candidates=config.max_candidates)
    dev_data = SelectionDataset(dev_path, featurizer) if dev_path is not None else None
    if distributed.is_main():
        distributed.barrier()
    if not any(any(info.gold) for info in train_data.infos):
        raise DgnUserError(f"--train {train_path}: no problem has gold evidence; nothing to train on")
    if dev_data is not None and not any(any(info.gold) for info in dev_data.infos):
        raise DgnUserError(f"--dev {dev_path}: no problem has gold evidence; cannot select epochs")
    if saved is not None:
        model_config = DGNConfig.from_dict(
            {"in_features": featurizer.dim, **saved["model_config"]}, source=f"{out}/{STATE_NAME}"
        )
    else:
        model_config = replace(DGNConfig(in_features=featurizer.dim), **model_options)
    torch.manual_seed(config.seed)
    model: Model
    if model_type == "dgn":
        model = DGN(model_config)
    else:
        model = EncoderScorer(
            featurizer.dim, model_config.hidden_features, model_config.encoded_features,
            deep=model_type == "deep-encoder", dropout=model_config.dropout,
        )
    if progress:
        verb = "resuming" if saved is not None else "training"
        name = {"dgn": "DGN", "encoder": "Encoder", "deep-encoder": "DeepEncoder"}[model_type]
        print(f"{verb} {name} ({model.num_parameters():,} parameters) on {len(train_data)} problems", flush=True)

    def save(m: Model, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(
            out,
            extra={
                "featurizer": featurizer.settings(),
                "train_config": asdict(config),
                "dev_metrics": metrics,
                "epoch": epoch,
                "world_size": world,
                **({"candidate_stage": stage.settings()} if stage is not None else {}),
            },
        )

    inputs = {
        "model_type": model_type,
        "featurizer": featurizer.settings(),
        "train": str(Path(train_path).resolve()),
        "dev": None if dev_path is None else str(Path(dev_path).resolve()),
        "candidate_stage": None if stage is None else stage.settings(),
        "world_size": world,
        "train_sha256": file_sha256(train_path),
        "dev_sha256": None if dev_path is None else file_sha256(dev_path),
    }
    result = train_model(
        model, train_data, dev_data, config, on_best=save, progress=progress,
        state_path=out / STATE_NAME, resume=saved is not None, save_every=save_every, extra_state=inputs,
    )
    history = write_history(
        out, result, train_config=config, train=inputs["train"], dev=inputs["dev"], model_type=model_type,
        model_config=model_config.to_dict() if model_type == "dgn" else dict(model.config),
        vectors=None if vectors is None else str(Path(vectors).resolve()), features=list(featurizer.features),
    )
    return result, history
