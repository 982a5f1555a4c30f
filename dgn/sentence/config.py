"""The end-to-end model's settings: its heads, starts and losses, and :class:`FinetuneConfig`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dgn._choices import END_TO_END_INITS, END_TO_END_LOSSES, GRADED_LOSSES
from dgn.training import (
    TrainResult,
)

__all__ = ["HEADS", "LOSSES", "DENSE_LOSSES", "INITS", "DIVERSE_COVERAGE_WEIGHT", "DEFAULT_FACILITY", "DIVERSITY_SCALES", "DEFAULT_INIT", "RECORDED_BEFORE", "RENAMED_LOSSES", "TRAIN_BUCKET", "FinetuneConfig", "FinetuneResult", "config_from_record", "default_facility", "default_init"]

HEADS = ("dgn", "listwise")
#: The DGN head's layer-wise losses on the gold (see :class:`FinetuneConfig`; the names are
#: :data:`dgn._choices.LOSSES`'s).
LOSSES = END_TO_END_LOSSES
#: The graded (dense) losses on the problems' ``relevance`` (see :class:`FinetuneConfig`).
DENSE_LOSSES = GRADED_LOSSES
#: ``FinetuneConfig.loss`` names of runs recorded before the one vocabulary -> today's.
RENAMED_LOSSES = {"soft_label": "listwise"}
#: How the DGN head starts (see :class:`EndToEndModel`).
INITS = END_TO_END_INITS
#: The diverse start's SCMM weights alpha (see :class:`EndToEndModel`).
DIVERSE_COVERAGE_WEIGHT = 0.05
#: :func:`train_end_to_end`'s starting weight of the DGN head's facility-location term
#: (``dgn train --facility``; None: no such term). See :class:`EndToEndModel`'s ``facility``.
#: Chosen on WiCE's dev folds (5-fold cross-validation, three seeds; docs/benchmarks.md, the
#: greedy-layers study): mean dev recall@{1,3,5,7} 0.7383 starting at 3, 0.7292 starting at 1,
#: 0.7270 without the term.
DEFAULT_FACILITY: float | None = 3.0


def default_facility(head: str) -> float | None:
    """The facility-location weight a new model of this head starts with by default:
    :data:`DEFAULT_FACILITY` for the DGN head, None (no such term) for the listwise head,
    which has no greedy step to put it in."""
    return DEFAULT_FACILITY if head == "dgn" else None


#: The diversity scales :func:`finetune` tries on the dev split after training (see
#: :attr:`EndToEndModel.diversity_scale` and ``FinetuneConfig.diversity_scales``): none, a
#: quarter, half, as trained, double.
DIVERSITY_SCALES: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)

#: How ``dgn train``'s DGN head starts by default (see :class:`EndToEndModel`): its first
#: layer held to a cosine ranking, chosen on WiCE's dev folds over three seeds
#: (docs/benchmarks.md, "The greedy layers against a fine-tuned ranker").
DEFAULT_INIT = "ranker"

#: The values of :class:`FinetuneConfig` fields that a run recorded before the field existed
#: had in effect (a record without them is read with these, not with today's defaults).
RECORDED_BEFORE: dict[str, Any] = {"first_layer_weight": 0.0, "encoder_grad_scale": 1.0, "encoder_dropout": None,
                                   "patience": 0, "max_grad_norm": 1.0, "diversity_scales": None}


def default_init(head: str) -> str:
    """How a new model of this head starts by default: :data:`DEFAULT_INIT` for the DGN
    head, ``"cosine"`` (the only start it has) for the listwise head."""
    return DEFAULT_INIT if head == "dgn" else "cosine"


def config_from_record(record: dict[str, Any]) -> FinetuneConfig:
    """The :class:`FinetuneConfig` a run recorded with ``asdict`` (``eval_ks`` as a list is
    read back as a tuple; fields the record predates take :data:`RECORDED_BEFORE`).

    Raises:
        TypeError: A field :class:`FinetuneConfig` does not have.
        ValueError: A value it does not accept.
    """
    fields = {**RECORDED_BEFORE, **record}
    fields["loss"] = RENAMED_LOSSES.get(fields.get("loss"), fields.get("loss", "set_recall"))
    for name in ("eval_ks", "diversity_scales"):
        if isinstance(fields.get(name), list):
            fields[name] = tuple(fields[name])
    return FinetuneConfig(**fields)


#: Texts per encoder pass in a training step, shortest first (see :func:`~dgn.features.sentence.embed`).
TRAIN_BUCKET = 8


@dataclass(frozen=True)
class FinetuneConfig:
    """Settings of :func:`finetune` (defaults: ``dgn train``'s, one epoch).

    The defaults train the transformer on the DGN head's first layer alone (a listwise
    loss, ``first_layer_weight`` 1 with ``encoder_grad_scale`` 0) at ``encoder_lr`` 4e-5,
    while the head's greedy layers learn over it; with the ``"ranker"`` start
    (:data:`DEFAULT_INIT`) the first pick is then the fine-tuned ranker's and the greedy
    layers choose the rest. Chosen on WiCE's dev folds over three seeds
    (docs/benchmarks.md). The listwise head ignores both fields.

    Attributes:
        epochs: Passes over the training problems.
        claims_per_step: Problems per optimiser step (each with all its candidates); under
            torchrun the global batch, split into one contiguous slice per process (at
            least one problem each: it must be at least the number of processes).
        encoder_lr: AdamW learning rate of the transformer (default 4e-5; 2e-5 before
            the greedy-layers study, which found 4e-5 better on WiCE's dev folds for
            both heads).
        head_lr: AdamW learning rate of the head (the DGN's encoder, objective, modular term).
        weight_decay: AdamW weight decay.
        warmup: Share of the steps with a linearly rising learning rate.
        loss: The DGN head's layer-wise loss: ``"set_recall"`` (default; each layer's
            target is the items that raise recall, the best coverage of one of the
            alternative gold sets, the most: :func:`~dgn.losses.set_recall_cross_entropy`;
            the listwise head takes its first layer's target), ``"listwise"`` (each
            layer's target is the gold not yet picked, ``gold / |gold|``; at the first
            layer this is the listwise head's loss on the union of the gold sets; called
            ``"soft_label"`` before the loss names became one vocabulary, where
            ``"soft_label"`` is the graded loss, ``dense_loss`` here) or
            ``"layerwise"`` (the paper's eq. 5, each open gold item as if it were the
            only correct one). ``"set_recall"`` had the best mean dev recall for both
            heads in 5-fold cross-validation on WiCE (docs/benchmarks.md); on problems
            with one gold set it equals ``"listwise"``.
        first_layer_weight: Weight of an extra copy of the first layer's term in the DGN
            head's loss (default 1; 0: none): more weight on the first pick, which is a
            plain listwise ranking.
        top_l: Cut every problem to the ``top_l`` candidates BM25 ranks highest before the
            encoder sees it (training keeps the gold candidates beyond the cut so that
            the loss has its targets; prediction does not, and the recall lost by the cut
            is BM25's recall@L). None: every candidate. The default, 24, bounds the cost
            of a step (every kept candidate is embedded with gradients): it leaves FM2
            (at most 12 candidates) and CLIMATE-FEVER (5) whole and keeps WiCE's about
            120 candidates to 24 with BM25 recall@24 0.951. A cost setting, not tuned.
        seed: Seeds the head's initialisation, dropout and the order of problems.
        eval_ks: Cutoffs whose mean dev recall selects the epoch.
        dense_loss: Train on graded relevance (what ``dgn finetune`` sets, after the
            FGA-NDCG model card): ``"soft_label"`` (per layer the soft-label cross entropy
            against the grades of the items not yet picked,
            :func:`~dgn.losses.soft_label_cross_entropy`) or ``"approx_ndcg"``
            (:func:`~dgn.losses.layerwise_approx_ndcg_loss`); the listwise head takes its
            one layer ``(B, 1, N)``. The grades are each problem's ``relevance``, binary
            gold where it has none. None (default): ``loss`` alone, on the gold.
        sparse_weight: With ``dense_loss``, the step's loss is ``dense + sparse_weight *
            sparse`` (:func:`~dgn.losses.mix_sparse_dense`), the sparse term being ``loss``
            on the gold (with ``first_layer_weight``). 0: the dense loss alone.
        ndcg_temperature: Temperature of ApproxNDCG's smooth ranks (as
            :class:`dgn.train.TrainConfig`).
        ndcg_k: Cutoff of ApproxNDCG (None: the whole list).
        freeze_layers: Keep the transformer's token embeddings and its bottom this many
            layers fixed during training (0, the default: every layer trains). The
            backward pass then stops above them, so a step costs less (see
            docs/benchmarks.md, "End-to-end training and prediction speed"); the
            frozen weights are still saved with the model.
        grad_candidates: Backpropagate only through the claim, the gold candidates and
            this many other candidates of each problem, those BM25 ranks highest (the
            hardest negatives by word overlap); the rest are embedded without gradients.
            Every candidate still enters the loss, so the softmax of each layer is over
            all of them; only the encoder's gradient from the easy negatives is left
            out, and their backward pass with it. None (the default): every candidate
            has gradients. A speed setting (docs/benchmarks.md).
        encoder_grad_scale: The share of the DGN head's loss gradient that reaches the
            transformer (1, the default: all of it). Below 1 the layer-wise loss trains
            the head in full and the transformer at this share, and the first-layer term
            (``first_layer_weight``, computed apart) reaches the transformer in full: at 0
            the transformer trains on the first layer's listwise loss alone, as under the
            listwise head, while the greedy layers learn over it (the default, 0). The
            listwise head ignores it. A graded ``dense_loss`` needs it above 0 or a
            ``sparse_weight`` (``dgn finetune`` sets it to 1).
        encoder_dropout: The transformer's dropout probability while it trains, hidden and
            attention alike, in [0, 1) (None, the default: the model's own, 0.1 for
            MiniLM). 0 trains without dropout, which makes a step cheaper on the CPU
            (no random masks, and the fused attention kernel); see docs/benchmarks.md.
            The saved model's config keeps the model's own values.
        patience: Stop after this many epochs without a better dev score (0, the
            default: never; the learning rate decays to 0 over ``epochs`` either way).
        max_grad_norm: Clip the gradients' total 2-norm at this before each step
            (:func:`dgn.training.clip_gradients`; frozen-feature training clips at 5).
        diversity_scales: After training, rank the dev split with the DGN head's
            diversity terms scaled by each of these and keep the best
            (:attr:`EndToEndModel.diversity_scale`, chosen by the mean dev recall at
            ``eval_ks``, a tie going to the scale nearest 1); the choice is saved with the
            model and reported (:attr:`~dgn.training.TrainResult.choices`). Default
            :data:`DIVERSITY_SCALES`. None, or without a dev split or the facility term:
            the model as trained (scale 1).
    """

    epochs: int = 1
    claims_per_step: int = 1
    encoder_lr: float = 4e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.1
    loss: str = "set_recall"
    first_layer_weight: float = 1.0
    top_l: int | None = 24
    seed: int = 0
    eval_ks: tuple[int, ...] = (1, 3, 5, 7)
    dense_loss: str | None = None
    sparse_weight: float = 0.0
    ndcg_temperature: float = 1.0
    ndcg_k: int | None = None
    freeze_layers: int = 0
    grad_candidates: int | None = None
    encoder_grad_scale: float = 0.0
    encoder_dropout: float | None = None
    patience: int = 0
    max_grad_norm: float = 1.0
    diversity_scales: tuple[float, ...] | None = DIVERSITY_SCALES

    def __post_init__(self) -> None:
        for name in ("epochs", "claims_per_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"FinetuneConfig.{name} must be a positive integer, got {value!r}")
        for name in ("encoder_lr", "head_lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"FinetuneConfig.{name} must be a number >= 0, got {value!r}")
        if self.loss in GRADED_LOSSES:
            raise ValueError(f"FinetuneConfig.loss={self.loss!r} is a graded loss: set dense_loss={self.loss!r} to "
                             "train on the grades" + (", or loss='listwise' for the gold spread evenly over each "
                             "layer (what 'soft_label' named here before)" if self.loss == "soft_label" else ""))
        if self.loss not in LOSSES:
            raise ValueError(f"FinetuneConfig.loss must be one of {LOSSES}, got {self.loss!r}")
        w = self.first_layer_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
            raise ValueError(f"FinetuneConfig.first_layer_weight must be a number >= 0, got {w!r}")
        if self.top_l is not None and (isinstance(self.top_l, bool) or not isinstance(self.top_l, int) or self.top_l <= 0):
            raise ValueError(f"FinetuneConfig.top_l must be a positive integer or None, got {self.top_l!r}")
        if not 0 <= self.warmup < 1:
            raise ValueError(f"FinetuneConfig.warmup must be in [0, 1), got {self.warmup!r}")
        if self.dense_loss is not None and self.dense_loss not in DENSE_LOSSES:
            raise ValueError(f"FinetuneConfig.dense_loss must be one of {DENSE_LOSSES} or None, got {self.dense_loss!r}")
        w = self.sparse_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
            raise ValueError(f"FinetuneConfig.sparse_weight must be a finite number >= 0, got {w!r}")
        if w and self.dense_loss is None:
            raise ValueError("FinetuneConfig.sparse_weight mixes the sparse loss into a graded one; set dense_loss")
        t = self.ndcg_temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0):
            raise ValueError(f"FinetuneConfig.ndcg_temperature must be a finite number > 0, got {t!r}")
        if self.ndcg_k is not None and (isinstance(self.ndcg_k, bool) or not isinstance(self.ndcg_k, int)
                                        or self.ndcg_k <= 0):
            raise ValueError(f"FinetuneConfig.ndcg_k must be a positive integer or None, got {self.ndcg_k!r}")
        n = self.freeze_layers
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"FinetuneConfig.freeze_layers must be an integer >= 0, got {n!r}")
        m = self.grad_candidates
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise ValueError(f"FinetuneConfig.grad_candidates must be an integer >= 0 or None, got {m!r}")
        d = self.encoder_dropout
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1):
            raise ValueError(f"FinetuneConfig.encoder_dropout must be a number in [0, 1) or None, got {d!r}")
        n = self.patience
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"FinetuneConfig.patience must be an integer >= 0, got {n!r}")
        c = self.max_grad_norm
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (math.isfinite(c) and c > 0):
            raise ValueError(f"FinetuneConfig.max_grad_norm must be a finite number > 0, got {c!r}")
        scales = self.diversity_scales
        if scales is not None and (
            not isinstance(scales, tuple) or not scales
            or any(isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and s >= 0)
                   for s in scales)
        ):
            raise ValueError("FinetuneConfig.diversity_scales must be a non-empty tuple of numbers >= 0 or None, "
                             f"got {scales!r}")
        g = self.encoder_grad_scale
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g <= 1:
            raise ValueError(f"FinetuneConfig.encoder_grad_scale must be a number in [0, 1], got {g!r}")
        if g == 0 and not self.first_layer_weight:
            raise ValueError("FinetuneConfig.first_layer_weight=0 with encoder_grad_scale=0 (the default) leaves the "
                             "transformer no gradient; set encoder_grad_scale above 0 too (1: the whole layer-wise "
                             "loss reaches it)")
        if g == 0 and self.dense_loss is not None and not self.sparse_weight:
            raise ValueError(f"FinetuneConfig.dense_loss={self.dense_loss!r} with encoder_grad_scale=0 and no "
                             "sparse_weight leaves the transformer no gradient; set encoder_grad_scale (1: the "
                             "graded loss reaches it in full)")


#: What :func:`finetune` returns: :class:`dgn.training.TrainResult` (with ``seconds_per_epoch``,
#: the training time per epoch without the dev evaluation). The old name, kept.
FinetuneResult = TrainResult
