"""End-to-end training of a sentence encoder under the greedy layers (or a listwise scorer).

:class:`EndToEndSelector` embeds the claim and its candidates with a pretrained
sentence-transformers model, builds :func:`~dgn.features.sentence.pair_features` and puts
one of two heads on top:

* ``"dgn"``: a :class:`~dgn.model.DGN` over those features. Training runs the relaxed
  greedy layers and the layer-wise loss, and its gradients reach the transformer itself
  (the DGN paper's end-to-end training, with a pretrained encoder underneath). Its modular
  term starts as ``softplus(scale * tau * cos)``, so that before any training the first
  pick is the zero-shot cosine's and the layer logits match the listwise head's.
* ``"listwise"``: ``scale * cos(q, s_v)`` per candidate, trained with the listwise
  softmax cross entropy against ``gold / |gold|`` - the fine-tuned encoder a user would
  otherwise train (the baseline on the same footing: same encoder, data and budget).

With ``lexical=True`` both heads also read the per-candidate lexical match features of
:func:`dgn.features.lexical.lexical_features` (TF-IDF cosine, BM25, claim-term coverage,
number and name overlap, position, length; computed on the candidates the head sees,
no gradient): the DGN head as extra input columns, the listwise head through a linear
term added to its logits. Both start with zero weight on them, so the untrained heads
are the same as without.

:func:`finetune` trains either with AdamW (one learning rate for the encoder, one for the
head), keeping the epoch with the best mean dev recall, on the model's device, in one
process or in several under torchrun (data parallel: each takes a slice of every global
batch, the gradients are summed), and saves a training state that ``resume`` continues
exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dgn._choices import END_TO_END_INITS
from dgn._paths import model_directory, one_train_file, train_file_list
from dgn.checkpoint import END_TO_END_CONFIG, is_end_to_end_model, load_weights
from dgn.errors import DgnUserError
from dgn.features.lexical import LEXICAL_FEATURES, lexical_features
from dgn.features.sentence import (
    DEFAULT_MODEL,
    embed,
    embedding_dim,
    encode_texts,
    load_sentence_model,
    pair_features,
    resolve_model_path,
)
from dgn.layer import GreedyLayer
from dgn.model import DGN, DGNConfig, DGNOutput
from dgn.objectives import FacilityLocation, SumObjective
from dgn.training import (
    END_TO_END_KIND,
    Task,
    TrainResult,
    check_global_batch,
    check_save_every,
    fit,
    usable_problems,
)

__all__ = [
    "HEADS",
    "FinetuneConfig",
    "FinetuneResult",
    "EndToEndSelector",
    "EndToEndFeatures",
    "EndToEndTask",
    "cut_candidates",
    "finetune",
    "is_end_to_end_model",
    "rank_problems",
    "ranked_problems",
    "train_end_to_end",
]

HEADS = ("dgn", "listwise")
#: The DGN head's layer-wise losses (see :class:`FinetuneConfig`).
LOSSES = ("soft_label", "layerwise", "set_recall")
#: The graded (dense) losses on the problems' ``relevance`` (see :class:`FinetuneConfig`).
DENSE_LOSSES = ("soft_label", "approx_ndcg")
#: How the DGN head starts (see :class:`EndToEndSelector`).
INITS = END_TO_END_INITS
#: The diverse start's SCMM weights alpha (see :class:`EndToEndSelector`).
DIVERSE_COVERAGE_WEIGHT = 0.05
#: :func:`train_end_to_end`'s starting weight of the DGN head's facility-location term
#: (``dgn train --facility``; None: no such term). See :class:`EndToEndSelector`'s ``facility``.
#: Chosen on WiCE's dev folds (5-fold cross-validation, three seeds; docs/benchmarks.md, the
#: greedy-layers study): mean dev recall@{1,3,5,7} 0.7383 starting at 3, 0.7292 starting at 1,
#: 0.7270 without the term.
DEFAULT_FACILITY: float | None = 3.0


def default_facility(head: str) -> float | None:
    """The facility-location weight a new model of this head starts with by default:
    :data:`DEFAULT_FACILITY` for the DGN head, None (no such term) for the listwise head,
    which has no greedy step to put it in."""
    return DEFAULT_FACILITY if head == "dgn" else None


#: How ``dgn train``'s DGN head starts by default (see :class:`EndToEndSelector`): its first
#: layer held to a cosine ranking, chosen on WiCE's dev folds over three seeds
#: (docs/benchmarks.md, "The greedy layers against a fine-tuned ranker").
DEFAULT_INIT = "ranker"

#: The values of :class:`FinetuneConfig` fields that a run recorded before the field existed
#: had in effect (a record without them is read with these, not with today's defaults).
RECORDED_BEFORE: dict[str, Any] = {"first_layer_weight": 0.0, "encoder_grad_scale": 1.0, "encoder_dropout": None,
                                   "patience": 0, "max_grad_norm": 1.0}


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
    if "eval_ks" in fields:
        fields["eval_ks"] = tuple(fields["eval_ks"])
    return FinetuneConfig(**fields)


#: Texts per encoder pass in a training step, shortest first (see :func:`~dgn.features.sentence.embed`).
TRAIN_BUCKET = 8
#: AdamW's fused kernel (one pass over each parameter for the whole update, instead of
#: about eight elementwise passes): the same update up to float rounding, about 6x faster
#: on MiniLM's 22.7M parameters on the CPU (``benchmarks/finetune_speed.py --optimizer``). Used where the installed torch has it for the
#: parameters' device (CPU since torch 2.4); the per-tensor loop otherwise.
FUSED_ADAMW = True
_HEAD_WEIGHTS = "head.safetensors"
_FACILITY_KEY = "facility.raw_weights"
_ENCODER_DIR = "encoder"
_RANK_CHUNK = 4096  # problems embedded at a time by rank_problems
_FORMAT = "dgn-end-to-end"


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
            the listwise head takes its first layer's target), ``"soft_label"`` (each
            layer's target is the gold not yet picked, ``gold / |gold|``; at the first
            layer this is the listwise head's loss on the union of the gold sets) or
            ``"layerwise"`` (the paper's eq. 5, each open gold item as if it were the
            only correct one). ``"set_recall"`` had the best mean dev recall for both
            heads in 5-fold cross-validation on WiCE (docs/benchmarks.md); on problems
            with one gold set it equals ``"soft_label"``.
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

    def __post_init__(self) -> None:
        for name in ("epochs", "claims_per_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"FinetuneConfig.{name} must be a positive integer, got {value!r}")
        for name in ("encoder_lr", "head_lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"FinetuneConfig.{name} must be a number >= 0, got {value!r}")
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


def _default_dgn_config(dim: int, init: str = "cosine", extra: int = 0) -> DGNConfig:
    """The DGN head's default config over ``2 dim + 1`` pair features and ``extra`` more columns."""
    if init == "coverage":
        return DGNConfig(
            in_features=2 * dim + 1 + extra, hidden_features=dim, encoded_features=dim, steps=7, tau=8.0,
            init_weight=1.0, modular_skip=True,
        )
    if init == "diverse":
        return DGNConfig(
            in_features=2 * dim + 1 + extra, hidden_features=dim, encoded_features=dim, steps=7, tau=4.0,
            init_weight=DIVERSE_COVERAGE_WEIGHT, modular_skip=True, coverage_penalty=True,
        )
    return DGNConfig(
        in_features=2 * dim + 1 + extra, hidden_features=256, encoded_features=64, steps=7, tau=4.0,
        modular_skip=True, coverage_penalty=init == "ranker",
    )


class EndToEndSelector(nn.Module):
    """A sentence encoder with a DGN (or listwise) head, trainable end to end.

    Args:
        encoder: A ``SentenceTransformer`` (see :func:`~dgn.sentence.load_sentence_model`).
        head: ``"dgn"`` or ``"listwise"``.
        dgn_config: The DGN head's config (``in_features`` must be ``2 D + 1``, plus 8
            with ``lexical``); default: E = 64, hidden 256, K = 7, tau = 4, ``modular_skip=True``.
        scale: Cosine scale of the listwise logits and of the DGN's starting modular term.
        init: How the DGN head starts (default ``"cosine"``, the plain start; ``dgn
            train`` and :func:`train_end_to_end` start the DGN head as :data:`DEFAULT_INIT`,
            ``"ranker"``, chosen with :class:`FinetuneConfig`'s defaults on WiCE's dev
            folds). ``"cosine"``: the modular term is
            ``softplus(scale * tau * cos)`` and the coverage weights 0.01, so the first pick
            is the zero-shot cosine's. ``"coverage"``: ``H = relu(D * q * s)`` (the encoder
            starts as a copy of the claim-sentence product, E = D), every ``alpha = 1``, the
            modular term ``softplus(10 cos)`` and ``tau = 8``: the untrained SCMM greedy over
            the encoder's own product features, a little relevance beside it.
            ``"diverse"``: the cosine start's modular term over the coverage start's
            encoder, with ``coverage_penalty`` (see :class:`~dgn.model.DGNConfig`) and
            ``alpha = DIVERSE_COVERAGE_WEIGHT``: the first layer is exactly the cosine
            start's (and the listwise head's), and from the second on a candidate loses
            what it repeats of the picks' claim-weighted content ``relu(D * q * s)``.
            ``"ranker"``: the cosine start with ``coverage_penalty``, whose modular term
            reads only the cosine (and the lexical columns) for good: the other weights of
            the modular term are held at 0 through training. The first layer is then a
            ranking by ``softplus(a cos + b)`` (plus the lexical term), the listwise
            head's ranking throughout training, not only at the start; the coverage and
            facility terms act from the second pick on.
        lexical: Give the head the lexical match features too (see the module docstring);
            :meth:`score` and :meth:`loss` then take them as ``lexical`` (:meth:`lexical_for`).
        facility: With the DGN head, add facility location over the candidates' sentence
            embeddings (cosine, clamped at 0) beside the SCMM, with this starting weight
            (learned, softplus-kept positive), in the same penalty form as
            ``coverage_penalty``: each gain loses ``w * sum_u min(cos+(u, v), best_u)``,
            the share of v's similarity to the candidates u that the picks already cover,
            so the first pick is unchanged. None: no such term.
    """

    def __init__(
        self,
        encoder: Any,
        head: str = "dgn",
        dgn_config: DGNConfig | None = None,
        scale: float = 20.0,
        init: str = "cosine",
        lexical: bool = False,
        facility: float | None = None,
    ):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        self.init = init
        self.encoder = encoder
        #: Settings stored beside the weights (:func:`train_end_to_end` records its inputs
        #: and :class:`FinetuneConfig` there); set by :meth:`from_pretrained`.
        self.extra: dict[str, Any] = {}
        self.head = head
        self.scale = float(scale)
        self.dim = embedding_dim(encoder)
        self.lexical = bool(lexical)
        n_lex = len(LEXICAL_FEATURES) if self.lexical else 0
        self.in_features = 2 * self.dim + 1 + n_lex  # [q * s, |q - s|, cos, lexical...]
        self._cos = 2 * self.dim  # the cosine's column
        self.dgn: DGN | None = None
        self.facility: SumObjective | None = None
        self.facility_greedy: GreedyLayer | None = None
        self.lexical_head: nn.Linear | None = None
        if head == "listwise" and self.lexical:
            self.lexical_head = nn.Linear(n_lex, 1)
            nn.init.zeros_(self.lexical_head.weight)
            nn.init.zeros_(self.lexical_head.bias)
        if facility is not None and head != "dgn":
            raise ValueError("facility needs the DGN head")
        if head == "dgn":
            config = dgn_config or _default_dgn_config(self.dim, init, n_lex)
            if config.in_features != self.in_features:
                raise ValueError(f"dgn_config.in_features must be {self.in_features}, got {config.in_features}")
            if not (config.modular and config.modular_skip):
                raise ValueError("the DGN head needs modular=True and modular_skip=True (it starts from the cosine)")
            self.dgn = DGN(config)
            if facility is not None:
                self.facility = SumObjective(
                    [self.dgn.objective, FacilityLocation("cosine")], [config.encoded_features, self.dim],
                    weights=[1.0, float(facility)], learnable=True,
                )
                self.facility_greedy = GreedyLayer(self.facility, config.steps, config.tau, config.relaxation)
            assert self.dgn.modular is not None and self.dgn.modular_skip is not None
            with torch.no_grad():
                self.dgn.modular.weight.zero_()
                self.dgn.modular.bias.zero_()
                self.dgn.modular_skip.weight.zero_()
                if init == "coverage":
                    self._init_coverage(config, modular=10.0)
                else:
                    if init == "diverse":
                        self._init_coverage(config)
                    self.dgn.modular_skip.weight[0, self._cos] = self.scale * config.tau  # softplus(scale tau cos)
            if init == "ranker":
                self._hold_modular_to_cosine(config)

    def _hold_modular_to_cosine(self, config: DGNConfig) -> None:
        """The ``"ranker"`` start: zero the gradients of the modular term's weights on the
        encoding and on every pair feature but the cosine and the lexical columns, so those
        weights stay at 0 (AdamW moves a parameter whose gradient is always 0 by its decay
        alone, and decay keeps 0 at 0)."""
        assert self.dgn is not None and self.dgn.modular is not None and self.dgn.modular_skip is not None
        if not config.coverage_penalty:
            raise ValueError("init='ranker' needs dgn_config.coverage_penalty=True (the first layer is the ranking)")
        keep = torch.zeros_like(self.dgn.modular_skip.weight)
        keep[0, self._cos] = 1.0
        keep[0, 2 * self.dim + 1 :] = 1.0  # the lexical columns, as the listwise head's lexical term
        self.register_buffer("_modular_keep", keep, persistent=False)
        with torch.no_grad():
            self.dgn.modular.weight.zero_()
            self.dgn.modular_skip.weight.mul_(keep)
        self.dgn.modular.weight.register_hook(torch.zeros_like)
        self.dgn.modular_skip.weight.register_hook(lambda g: g * self._modular_keep.to(g.dtype))

    def _init_coverage(self, config: DGNConfig, modular: float | None = None) -> None:
        """Start the DGN head's encoder as a copy of ``relu(D * q * s)`` (and, given
        ``modular``, its modular term as ``softplus(modular * cos)``)."""
        assert self.dgn is not None and self.dgn.modular_skip is not None
        D = self.dim
        if config.hidden_features != D or config.encoded_features != D or config.deep:
            raise ValueError(f"init={self.init!r} needs hidden_features = encoded_features = {D} and deep=False")
        first, second = self.dgn.encoder.net[0], self.dgn.encoder.net[-2]
        eye = torch.eye(D)
        first.weight.zero_()
        first.weight[:, :D] = D * eye  # the q * s block, scaled so that entries are O(1)
        first.bias.zero_()
        second.weight.copy_(eye)
        second.bias.zero_()
        if modular is not None:
            self.dgn.modular_skip.weight[0, self._cos] = modular

    # ------------------------------------------------------------------ forward
    def embed_problems(
        self,
        queries: Sequence[str],
        candidates: Sequence[Sequence[str]],
        grad: Sequence[Sequence[bool]] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Embed claims and candidates in one pass: ``q (B, D)``, ``S (B, N, D)``, ``mask (B, N)``.

        ``grad``: per problem, which candidates get gradients (the claims always do); the
        others are embedded under ``torch.no_grad()`` (see ``FinetuneConfig.grad_candidates``).
        None: all of them.
        """
        texts: list[str] = []
        wants: list[bool] = []
        for b, (q, cands) in enumerate(zip(queries, candidates, strict=True)):
            texts.append(q)
            texts.extend(cands)
            wants.append(True)
            if grad is not None and len(grad[b]) != len(cands):
                raise ValueError(f"grad[{b}] has {len(grad[b])} entries for {len(cands)} candidates")
            wants.extend([True] * len(cands) if grad is None else [bool(g) for g in grad[b]])
        emb = self._embed_some_with_grad(texts, wants)  # (T, D)
        B, N = len(queries), max((len(c) for c in candidates), default=0)
        q_rows, s_rows, mask = [], [], torch.zeros(B, N, dtype=torch.bool, device=emb.device)
        start = 0
        for b, cands in enumerate(candidates):
            n = len(cands)
            q_rows.append(emb[start])
            s = emb[start + 1 : start + 1 + n]
            s_rows.append(torch.cat([s, s.new_zeros(N - n, s.shape[1])]) if n < N else s)
            mask[b, :n] = True
            start += 1 + n
        return torch.stack(q_rows), torch.stack(s_rows), mask

    def _embed_some_with_grad(self, texts: list[str], wants: list[bool]) -> Tensor:
        """``(T, D)``: ``texts`` embedded in buckets, those with ``wants`` False without gradients."""
        if all(wants):
            return embed(self.encoder, texts, bucket=TRAIN_BUCKET)
        with_grad = [i for i, w in enumerate(wants) if w]
        without = [i for i, w in enumerate(wants) if not w]
        kept = embed(self.encoder, [texts[i] for i in with_grad], bucket=TRAIN_BUCKET)
        with torch.no_grad():
            rest = embed(self.encoder, [texts[i] for i in without], bucket=TRAIN_BUCKET)
        out = kept.new_zeros(len(texts), kept.shape[1])
        out = out.index_copy(0, torch.tensor(with_grad, device=kept.device), kept)
        return out.index_copy(0, torch.tensor(without, device=kept.device), rest.to(kept.dtype))

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (and where :meth:`embed_problems` and
        :meth:`lexical_for` put their tensors)."""
        return next(self.parameters()).device

    def lexical_for(self, queries: Sequence[str], candidates: Sequence[Sequence[str]], width: int) -> Tensor | None:
        """``(B, width, 8)`` lexical features of each problem's candidates (zero-padded), on
        the model's device, or None for a model without ``lexical``."""
        if not self.lexical:
            return None
        out = torch.zeros(len(queries), width, len(LEXICAL_FEATURES))
        for b, (q, cands) in enumerate(zip(queries, candidates, strict=True)):
            if cands:
                out[b, : len(cands)] = torch.from_numpy(lexical_features(q, list(cands)))
        return out.to(self.device)

    def head_features(self, query: Tensor, sentences: Tensor, mask: Tensor, lexical: Tensor | None = None) -> Tensor:
        """``(B, N, in_features)``: the pair features and, with ``lexical``, those columns; padding rows 0."""
        X = pair_features(query, sentences)
        if self.lexical:
            X = torch.cat([X, self._checked_lexical(lexical, mask).to(X.dtype)], dim=-1)
        return X * mask.unsqueeze(-1).to(X.dtype)

    def _checked_lexical(self, lexical: Tensor | None, mask: Tensor) -> Tensor:
        want = (*mask.shape, len(LEXICAL_FEATURES))
        if lexical is None or tuple(lexical.shape) != want:
            got = None if lexical is None else tuple(lexical.shape)
            raise ValueError(f"this model reads lexical features: pass lexical of shape {want} (lexical_for), got {got}")
        return lexical

    def score(
        self, query: Tensor, sentences: Tensor, mask: Tensor, steps: int | None = None, lexical: Tensor | None = None
    ) -> Any:
        """The head on embeddings: listwise ``(B, N)`` logits, or a :class:`~dgn.model.DGNOutput`.

        ``lexical``: ``(B, N, 8)`` from :meth:`lexical_for`, required by a ``lexical`` model.
        """
        if self.dgn is None:
            q = nn.functional.normalize(query, dim=-1).unsqueeze(1)
            s = nn.functional.normalize(sentences, dim=-1)
            logits = self.scale * (q * s).sum(-1)  # (B, N)
            if self.lexical_head is not None:
                lex = self._checked_lexical(lexical, mask).to(logits.dtype)
                logits = logits + self.lexical_head(lex).squeeze(-1)
            return logits.masked_fill(~mask, float("-inf"))
        X = self.head_features(query, sentences, mask, lexical)
        if self.facility is None:
            return self.dgn(X, mask, steps=steps)
        return self._score_with_facility(X, sentences, mask, steps)

    def _score_with_facility(self, X: Tensor, sentences: Tensor, mask: Tensor, steps: int | None) -> DGNOutput:
        """The DGN head with the facility-location term (see ``facility``): greedy over
        ``[H, normalised embeddings]`` on the :class:`~dgn.objectives.SumObjective`."""
        assert self.dgn is not None and self.facility_greedy is not None
        HS, beta, valid = self._facility_inputs(X, sentences, mask)
        K = self.dgn.config.steps if steps is None else steps
        self.facility_greedy.train(self.training)
        out = self.facility_greedy(HS, valid, beta, K, tau=self.dgn.config.tau)
        return DGNOutput(out.logits, out.distributions, out.indices, out.gains, out.valid, HS[..., : -self.dim])

    def _facility_inputs(self, X: Tensor, sentences: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """What the greedy over :attr:`facility` reads: ``[H, normalised embeddings]``
        ``(B, N, E + D)``, the bonus ``(B, N)`` (the modular term less each candidate's
        facility penalty ``w * sum_u cos+(u, v)``) and the valid mask."""
        assert self.dgn is not None and self.facility is not None
        w = self.facility.weights(next(self.dgn.parameters()))  # in the head's dtype and device
        # in the sum the SCMM counts at w[0] (learned): a coverage penalty is taken off at it too,
        # so that the first layer stays the modular term
        H, beta, valid = self.dgn.encode_and_score(X, mask, penalty_weight=w[0])
        S = nn.functional.normalize(sentences.to(H.dtype), dim=-1) * valid.unsqueeze(-1).to(H.dtype)
        fl = self.facility.parts[1]
        single = fl.gains(S, fl.init_state(S, valid))  # (B, N): sum_u cos+(u, v)
        beta = -w[1] * single + (0.0 if beta is None else beta)
        return torch.cat([H, S], dim=-1), beta, valid

    def loss(
        self,
        query: Tensor,
        sentences: Tensor,
        mask: Tensor,
        gold: Tensor,
        loss: str = "layerwise",
        lexical: Tensor | None = None,
        gold_sets: Tensor | None = None,
        first_layer_weight: float = 0.0,
        relevance: Tensor | None = None,
        dense: str | None = None,
        sparse_weight: float = 0.0,
        ndcg_temperature: float = 1.0,
        ndcg_k: int | None = None,
        encoder_grad_scale: float = 1.0,
    ) -> Tensor:
        """The training loss of one batch.

        Args:
            query, sentences, mask: As :meth:`score` takes them.
            gold: ``(B, N)`` bool, the union of the gold sets.
            loss: The DGN head's layer-wise loss, as :class:`FinetuneConfig` names it:
                ``"soft_label"``, ``"layerwise"`` or ``"set_recall"``
                (:func:`~dgn.losses.set_recall_cross_entropy`, which needs
                ``gold_sets``). The listwise head takes ``"set_recall"`` as its one
                layer's target too, and any other value as ``gold / |gold|``.
            lexical: As in :meth:`score`.
            gold_sets: ``(B, G, N)`` bool (:func:`~dgn.losses.gold_set_tensor`).
            first_layer_weight: Add this multiple of the first layer's term of the loss
                again (the DGN head; its first layer is a listwise ranking).
            relevance: ``(B, N)`` nonnegative grades, the target of ``dense``.
            dense: A graded loss on ``relevance`` over the layer logits ``(B, K, N)`` (the
                listwise head's ``(B, 1, N)``): ``"soft_label"``
                (:func:`~dgn.losses.soft_label_cross_entropy`) or ``"approx_ndcg"``
                (:func:`~dgn.losses.layerwise_approx_ndcg_loss` with ``ndcg_temperature``
                and ``ndcg_k``). The batch's loss is then
                ``mix_sparse_dense(dense, sparse, sparse_weight)``, the sparse term being
                ``loss`` on ``gold`` as above (left out when ``sparse_weight`` is 0).
                None: ``loss`` alone.
            sparse_weight, ndcg_temperature, ndcg_k: As in :class:`FinetuneConfig`.
            encoder_grad_scale: As in :class:`FinetuneConfig`: the DGN head's layers run
                on ``query`` and ``sentences`` whose gradient is scaled by it (the forward
                values are the same), and the first-layer term, when
                ``first_layer_weight`` is set, runs the first layer again on them as
                given.
        """
        from dgn.losses import (
            layerwise_approx_ndcg_loss,
            layerwise_cross_entropy,
            mix_sparse_dense,
            set_recall_cross_entropy,
            soft_label_cross_entropy,
        )

        if loss == "set_recall" and gold_sets is None:
            raise ValueError("loss='set_recall' needs gold_sets")
        if dense is not None and dense not in DENSE_LOSSES:
            raise ValueError(f"dense must be one of {DENSE_LOSSES} or None, got {dense!r}")
        if dense is not None and relevance is None:
            raise ValueError(f"dense={dense!r} needs relevance")

        def of(logits: Tensor) -> Tensor:  # (B, K, N) layer logits
            if loss == "set_recall":
                assert gold_sets is not None
                return set_recall_cross_entropy(logits, gold_sets)
            if loss == "soft_label" or self.dgn is None:
                return soft_label_cross_entropy(logits, gold.to(logits.dtype))
            return layerwise_cross_entropy(logits, gold)

        scaled = self.dgn is not None and encoder_grad_scale != 1
        if self.dgn is None:
            logits = self.score(query, sentences, mask, lexical=lexical).unsqueeze(1)  # (B, 1, N)
        else:
            steps = min(self.dgn.config.steps, int(mask.sum(1).max()))
            q_in, s_in = (_scale_grad(query, encoder_grad_scale), _scale_grad(sentences, encoder_grad_scale)) \
                if scaled else (query, sentences)
            logits = self.score(q_in, s_in, mask, steps=steps, lexical=lexical).logits  # (B, K, N)

        def sparse() -> Tensor:
            total = of(logits)
            if first_layer_weight and self.dgn is not None:
                first = self.score(query, sentences, mask, steps=1, lexical=lexical).logits if scaled \
                    else logits[:, :1]
                total = total + first_layer_weight * of(first)
            return total

        if dense is None:
            return sparse()
        assert relevance is not None
        r = relevance.to(logits.dtype)
        if dense == "soft_label":
            graded = soft_label_cross_entropy(logits, r)
        else:
            graded = layerwise_approx_ndcg_loss(logits, r, temperature=ndcg_temperature, k=ndcg_k)
        if not sparse_weight:
            return graded
        return mix_sparse_dense(graded, sparse(), sparse_weight)

    # ------------------------------------------------------------------ persistence
    def _head_state(self) -> dict[str, Tensor]:
        """What ``head.safetensors`` holds: the DGN's weights (and the facility term's
        under ``facility.raw_weights``), the listwise head's lexical term, or nothing (the
        plain listwise head has no weights of its own)."""
        head = self.dgn if self.dgn is not None else self.lexical_head
        state = {} if head is None else {k: v.detach().contiguous() for k, v in head.state_dict().items()}
        if self.facility is not None:
            state[_FACILITY_KEY] = self.facility.raw_weights.detach().contiguous()
        return state

    def _load_head_state(self, state: dict[str, Tensor], source: Path) -> None:
        """Load what :meth:`_head_state` wrote (``source``: the file, for error messages)."""

        state = dict(state)
        if self.facility is not None:
            if _FACILITY_KEY not in state:
                raise DgnUserError(f"{source}: no {_FACILITY_KEY!r} for the facility term")
            with torch.no_grad():
                self.facility.raw_weights.copy_(state.pop(_FACILITY_KEY))
        head = self.dgn if self.dgn is not None else self.lexical_head
        if head is not None:
            load_weights(head, state, source)

    def save_pretrained(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
        """Write the encoder (sentence-transformers layout, safetensors) and the head.

        ``extra``: JSON-ready settings stored in ``selector.json`` (default: ``self.extra``).
        """
        from safetensors.torch import save

        from dgn.data.io import atomic_write

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.encoder.save(str(path / _ENCODER_DIR))
        meta = {
            "format": _FORMAT,
            "head": self.head,
            "init": self.init,
            "scale": self.scale,
            "lexical": self.lexical,
            "facility": None if self.facility is None else float(self.facility.weights(torch.zeros(1))[1].detach()),
            "dgn_config": None if self.dgn is None else self.dgn.config.to_dict(),
            "extra": self.extra if extra is None else extra,
        }
        tensors = self._head_state()
        with atomic_write(path / END_TO_END_CONFIG) as fh:
            fh.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        with atomic_write(path / _HEAD_WEIGHTS, "wb") as fh:
            fh.write(save(tensors, metadata={"format": "pt"}))
        return path

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike[str], map_location: str | torch.device = "cpu"
    ) -> EndToEndSelector:
        """Load a model written by :meth:`save_pretrained`, in ``eval()`` mode on ``map_location``.

        Raises:
            DgnUserError: No ``selector.json`` in ``directory``, one that cannot be read or
                is not an end-to-end model's, or head weights that do not fit it.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from dgn.errors import one_line

        path = Path(directory)
        config_path = path / END_TO_END_CONFIG
        if not config_path.is_file():
            raise DgnUserError(f"{config_path}: not found (is {path} an end-to-end dgn model?)")
        try:
            meta = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DgnUserError(f"{config_path}: cannot read: {one_line(exc)}") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise DgnUserError(f"{config_path}: field 'format': not an end-to-end dgn model")
        missing = [key for key in ("head", "scale", "dgn_config") if key not in meta]
        if missing:
            raise DgnUserError(f"{config_path}: field {missing[0]!r} missing")
        encoder = load_sentence_model(path / _ENCODER_DIR)
        config = None if meta["dgn_config"] is None else DGNConfig.from_dict(
            meta["dgn_config"], source=f"{config_path}: field 'dgn_config'")
        model = cls(encoder, meta["head"], config, meta["scale"], meta.get("init", "coverage"),
                    lexical=bool(meta.get("lexical", False)), facility=meta.get("facility"))
        try:
            state = load_file(str(path / _HEAD_WEIGHTS))
        except (SafetensorError, OSError) as exc:
            raise DgnUserError(f"{path / _HEAD_WEIGHTS}: cannot read weights: {one_line(exc)}") from None
        model._load_head_state(state, path / _HEAD_WEIGHTS)
        model.extra = meta.get("extra") or {}
        return model.to(map_location).eval()

    @property
    def top_l(self) -> int | None:
        """The cut prediction applies (:func:`cut_candidates`): the ``top_l`` the model was
        trained with (``extra["finetune_config"]``, as :func:`train_end_to_end` records it),
        or None (every candidate)."""
        value = (self.extra.get("finetune_config") or {}).get("top_l")
        return None if value is None else int(value)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def rank_problems(
    model: EndToEndSelector,
    problems: Sequence[Any],
    k: int,
    *,
    batch_size: int = 64,
    top_l: int | None = None,
    progress: bool = True,
) -> list[list[int]]:
    """The first ``k`` picks per problem: hard greedy for the DGN head, top-k by score for listwise.

    Every distinct text is embedded once (no gradients, length-sorted batches); the head then runs
    on the embeddings problem batch by problem batch, on the model's device. With ``top_l``
    only the BM25-best ``top_l`` candidates are considered (see :func:`cut_candidates`);
    picks are indices into the original candidate lists. :func:`ranked_problems` gives
    their scores too.
    """
    ranked = ranked_problems(model, problems, k, batch_size=batch_size, top_l=top_l, progress=progress)
    return [picks for picks, _ in ranked]


@torch.no_grad()
def ranked_problems(
    model: EndToEndSelector,
    problems: Sequence[Any],
    k: int,
    *,
    batch_size: int = 64,
    top_l: int | None = None,
    progress: bool = True,
) -> list[tuple[list[int], list[float]]]:
    """:func:`rank_problems`'s picks with their scores: ``(picks, scores)`` per problem.

    The DGN head's scores are the picks' marginal gains under its learned objective (hard
    greedy); the listwise head's, their logits ``scale * cos`` (plus the lexical term).
    The head runs on the model's device (the embeddings are moved there).
    """
    was_training = model.training
    model.eval()
    cuts = [cut_candidates(p, top_l) for p in problems]
    problems = [c for c, _ in cuts]
    device = next(model.parameters()).device
    rankings: list[tuple[list[int], list[float]]] = []
    try:
        # Embed a chunk of problems at a time (bounded memory on large files), every text once.
        for chunk_start in range(0, len(problems), _RANK_CHUNK):
            part = problems[chunk_start : chunk_start + _RANK_CHUNK]
            # Claims about one document share its sentences (ERASER's FEVER: ten claims a page):
            # each distinct text is embedded once and looked up by its row.
            rows: dict[str, int] = {}
            slots = [[rows.setdefault(t, len(rows)) for t in (p.query, *p.candidates)] for p in part]
            emb = torch.from_numpy(encode_texts(model.encoder, list(rows), progress=progress)).to(model.device)
            for start in range(0, len(part), batch_size):
                chunk = range(start, min(start + batch_size, len(part)))
                N = max((len(part[i].candidates) for i in chunk), default=0)
                q = emb[torch.tensor([slots[i][0] for i in chunk], device=emb.device)]
                S = emb.new_zeros(len(chunk), N, emb.shape[1])
                mask = torch.zeros(len(chunk), N, dtype=torch.bool, device=emb.device)
                for b, i in enumerate(chunk):
                    n = len(part[i].candidates)
                    S[b, :n] = emb[torch.tensor(slots[i][1:], dtype=torch.long, device=emb.device)]
                    mask[b, :n] = True
                lex = model.lexical_for([part[i].query for i in chunk], [part[i].candidates for i in chunk], N)
                q, S, mask = q.to(device), S.to(device), mask.to(device)
                lex = None if lex is None else lex.to(device)
                if model.dgn is None:
                    logits = model.score(q, S, mask, lexical=lex)
                    order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :k]
                    picks = torch.where(mask.gather(1, order), order, torch.full_like(order, -1))
                    scores = logits.gather(1, order)
                else:
                    out = model.score(q, S, mask, steps=k, lexical=lex)
                    picks, scores = out.indices, out.gains
                for row, values in zip(picks.tolist(), scores.tolist(), strict=True):
                    keep = [j for j, pick in enumerate(row) if pick >= 0]  # -1: no candidate left
                    rankings.append(([row[j] for j in keep], [float(values[j]) for j in keep]))
    finally:
        model.train(was_training)
    return [([index[i] for i in picks], scores) for (picks, scores), (_, index) in zip(rankings, cuts, strict=True)]


def cut_candidates(problem: Any, top_l: int | None, keep_gold: bool = False) -> tuple[Any, list[int]]:
    """The problem cut to its ``top_l`` BM25-best candidates, and the kept original indices.

    Returns ``(problem', index)`` with ``problem'.candidates[j] == problem.candidates[index[j]]``
    and gold sets (and ``relevance``, where given) re-indexed (items cut away dropped).
    ``keep_gold`` also keeps every gold candidate beyond the cut (for training). ``top_l``
    None or at least N: the problem as is.
    """
    from types import SimpleNamespace

    from dgn.baselines import top_k
    from dgn.features.lexical import bm25_scores

    n = len(problem.candidates)
    if top_l is None or n <= top_l:
        return problem, list(range(n))
    keep = top_k(bm25_scores(problem.query, problem.candidates), top_l)
    if keep_gold:
        keep += sorted({v for g in problem.gold for v in g} - set(keep))
    where = {v: j for j, v in enumerate(keep)}
    gold = [[where[v] for v in g if v in where] for g in problem.gold]
    relevance = getattr(problem, "relevance", None)
    cut = SimpleNamespace(
        id=problem.id, query=problem.query, candidates=[problem.candidates[v] for v in keep], gold=[g for g in gold if g],
        relevance=None if relevance is None else [relevance[v] for v in keep],
    )
    return cut, keep


def _gold_mask(problem: Any, n: int) -> list[bool]:
    g = [False] * n
    for group in problem.gold:
        for v in group:
            if v < n:
                g[v] = True
    return g


def _relevance_rows(problems: Sequence[Any], mask: Tensor) -> Tensor:
    """``(B, N)`` float: each problem's ``relevance`` (binary gold where it has none), 0 on padding."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for b, p in enumerate(problems):
        n = len(p.candidates)
        grades = getattr(p, "relevance", None)
        out[b, :n] = torch.tensor(_gold_mask(p, n) if grades is None else grades, dtype=torch.float32)
    return out


def _adamw(groups: list[dict[str, Any]], weight_decay: float) -> torch.optim.AdamW:
    """AdamW over ``groups``, fused where :data:`FUSED_ADAMW` asks and torch has the kernel
    for every parameter's device (torch checks that only at the first step, so it is
    checked here)."""
    fused = FUSED_ADAMW and _fused_adamw_available([p for g in groups for p in g["params"]])
    return torch.optim.AdamW(groups, weight_decay=weight_decay, fused=True if fused else None)


def _fused_adamw_available(params: list[Tensor]) -> bool:
    """Whether the installed torch has fused optimiser kernels for all of ``params``' devices
    (the CPU from torch 2.4 on)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return False
    devices = set(_get_fused_kernels_supported_devices())
    return all(p.device.type in devices and p.is_floating_point() for p in params)


def _optimizer(model: EndToEndSelector, cfg: FinetuneConfig, total_steps: int) -> tuple[torch.optim.AdamW, Any]:
    """AdamW (the transformer at ``encoder_lr``, the head at ``head_lr``) and its schedule:
    linear warm-up over ``warmup`` of the ``total_steps``, then linear decay to 0."""
    head_params = [p for n, p in model.named_parameters() if not n.startswith("encoder.") and p.requires_grad]
    groups = [{"params": [p for p in model.encoder.parameters() if p.requires_grad], "lr": cfg.encoder_lr}]
    if head_params:
        groups.append({"params": head_params, "lr": cfg.head_lr})
    optimizer = _adamw(groups, cfg.weight_decay)
    warm = max(1, int(cfg.warmup * total_steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total_steps - s) / max(1, total_steps - warm)))
    )
    return optimizer, schedule


def _scale_grad(x: Tensor, share: float) -> Tensor:
    """``x`` in the forward pass (exactly), ``share`` times its gradient in the backward pass."""
    if share == 0:
        return x.detach()
    return x.detach() + share * (x - x.detach())


def _batch_loss(model: EndToEndSelector, problems: Sequence[Any], cfg: FinetuneConfig) -> Tensor:
    """The mean training loss of ``problems`` (each cut to ``cfg.top_l``, its gold kept), on
    the model's device."""
    from dgn.losses import gold_set_tensor

    batch = [cut_candidates(p, cfg.top_l, keep_gold=True)[0] for p in problems]
    cands = [p.candidates for p in batch]
    golds = [_gold_mask(p, len(c)) for p, c in zip(batch, cands, strict=True)]
    grad = None if cfg.grad_candidates is None else [
        _with_gradients(p.query, c, g, cfg.grad_candidates) for p, c, g in zip(batch, cands, golds, strict=True)
    ]
    queries = [p.query for p in batch]
    # without grad_candidates, the plain call (a subclass may override embed_problems as it was)
    q, S, mask = model.embed_problems(queries, cands) if grad is None else model.embed_problems(queries, cands, grad)
    gold = torch.zeros(mask.shape, dtype=torch.bool)
    for b, g in enumerate(golds):
        gold[b, : len(g)] = torch.tensor(g)
    sets = gold_set_tensor([p.gold for p in batch], mask.shape[1]).to(mask.device) if cfg.loss == "set_recall" else None
    lex = model.lexical_for(queries, cands, mask.shape[1])
    # graded relevance (dgn finetune): cfg.dense_loss on the grades, mixed with the sparse loss
    graded: dict[str, Any] = {} if cfg.dense_loss is None else {
        "relevance": _relevance_rows(batch, mask).to(mask.device), "dense": cfg.dense_loss,
        "sparse_weight": cfg.sparse_weight, "ndcg_temperature": cfg.ndcg_temperature, "ndcg_k": cfg.ndcg_k,
    }
    # passed only when set, so that an override of loss without the argument keeps working
    scale = {} if cfg.encoder_grad_scale == 1 else {"encoder_grad_scale": cfg.encoder_grad_scale}
    return model.loss(q, S, mask, gold.to(mask.device), cfg.loss, lexical=lex, gold_sets=sets,
                      first_layer_weight=cfg.first_layer_weight, **graded, **scale)


def _with_gradients(query: str, candidates: Sequence[str], gold: Sequence[bool], others: int) -> list[bool]:
    """Which candidates a training step backpropagates through: the gold ones and the
    ``others`` non-gold ones BM25 ranks highest (``FinetuneConfig.grad_candidates``)."""
    from dgn.features.lexical import bm25_scores

    wants = list(gold)
    if others >= len(candidates) - sum(wants):
        return [True] * len(candidates)
    if others:
        scores = bm25_scores(query, list(candidates))
        ranked = sorted((i for i in range(len(candidates)) if not gold[i]), key=lambda i: (-scores[i], i))
        for i in ranked[:others]:
            wants[i] = True
    return wants


def _check_facility(facility: Any, head: str) -> None:
    if facility is None:
        return
    if isinstance(facility, bool) or not isinstance(facility, (int, float)) or not (0 < facility < float("inf")):
        raise DgnUserError(f"--facility must be a positive number (0: no facility-location term), got {facility!r}")
    if head != "dgn":
        raise DgnUserError(f"--facility {facility:g}: the facility-location term is the DGN head's; "
                           "the listwise head has no greedy steps")


def _model_settings(model: EndToEndSelector) -> dict[str, Any]:
    """What makes two selectors the same model (a resumed run's must match the saved one's)."""
    return {
        "head": model.head, "init": model.init, "scale": model.scale, "lexical": model.lexical,
        "facility": model.facility is not None,
        "dgn_config": None if model.dgn is None else model.dgn.config.to_dict(),
    }


def _dev_rankings(model: EndToEndSelector, dev: Sequence[Any], cfg: FinetuneConfig, progress: bool) -> list[list[int]]:
    """:func:`rank_problems` on every dev problem; under torchrun each process ranks a
    contiguous slice and every process gets all the rankings (so all agree on the score)."""
    from dgn import distributed

    mine = rank_problems(model, list(dev)[distributed.local_slice(len(dev))], max(cfg.eval_ks),
                         top_l=cfg.top_l, progress=progress)
    return [ranking for part in distributed.all_gather_objects(mine) for ranking in part]


def finetune(
    model: EndToEndSelector,
    train: Sequence[Any],
    dev: Sequence[Any] | None,
    config: FinetuneConfig | None = None,
    *,
    on_best: Callable[[EndToEndSelector, int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    progress: bool = True,
    state_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    save_every: int | None = None,
    extra_state: dict[str, Any] | None = None,
) -> FinetuneResult:
    """Train ``model`` end to end on ``train`` problems; keep the best epoch by dev recall.

    The model trains on the device its parameters are on (``model.to("cuda")`` first
    trains on the GPU). Under ``torchrun`` (the process group joined,
    :func:`dgn.distributed.process_group`) every process runs this with the same model and
    problems: ``config.claims_per_step`` stays the global batch, each process embeds and
    scores its contiguous slice of it (:func:`dgn.distributed.local_slice`), each slice's
    mean loss is weighted by its share, the gradients are summed across processes in one
    all-reduce, and every process then clips and steps alike: the step one process takes
    on the whole batch, up to the order of float sums (and dropout, whose random masks
    differ per process: the runs then agree in distribution, not bit for bit). The dev
    set is ranked in slices and gathered; only rank 0 calls ``on_best`` and writes the
    training state.

    Args:
        model: An :class:`EndToEndSelector`.
        train: :class:`dgn.data.Problem` objects (problems without gold are skipped).
        dev: Problems for epoch selection (None: keep the last epoch).
        config: Optimisation settings.
        on_best: Called with ``(model, epoch, dev_metrics)`` whenever the dev score
            improves, and once at the end without a dev set (e.g. to save a checkpoint).
        on_step: Called with ``(epoch, step)`` after every optimiser step (``step``
            counts from 1 within the epoch), after the state of ``save_every`` is written.
        progress: Progress bars and per-epoch lines (rank 0 only).
        state_path: Write the whole training state here (:func:`dgn.train.write_training_state`,
            atomically) after every epoch and every ``save_every`` steps: the model, AdamW,
            the learning-rate schedule, every process's RNG state, the shuffling
            generator, the epoch and the step within it, the partial epoch loss, the
            best-so-far (score, metrics, weights) and the history.
        resume: Continue from the state in ``state_path``: with the same model, problems
            and config the run ends with exactly the weights of an uninterrupted one (one
            process, CPU, same thread count; under torchrun up to the order of float
            sums). ``config`` must be the saved run's.
        save_every: Also write the state every this many optimiser steps within an epoch
            (None: at epoch ends only), so that a run whose epoch takes hours loses at
            most that many steps.
        extra_state: JSON-like values stored in the state (e.g. the run's files).

    Returns:
        A :class:`FinetuneResult`; ``model`` holds the best epoch's weights, in eval mode.

    Raises:
        DgnUserError: No training problem with gold, a global batch smaller than the
            number of processes, ``resume`` from a state of another model or config,
            or ``config.freeze_layers`` more than the transformer has.
    """
    task = EndToEndTask(model, train, dev, config or FinetuneConfig())
    return fit(task, on_best=on_best, on_step=on_step, progress=progress, state_path=state_path, resume=resume,
               save_every=save_every, extra_state=extra_state)


def bottom_modules(model: EndToEndSelector, layers: int) -> list[nn.Module]:
    """The transformer's token embeddings and its bottom ``layers`` layers (none when
    ``layers`` is 0): what ``FinetuneConfig.freeze_layers`` keeps fixed.

    Raises:
        DgnUserError: The encoder is not a BERT-style transformer with ``embeddings`` and
            ``encoder.layer``, or has fewer than ``layers`` layers.
    """
    if not layers:
        return []
    inner = getattr(model.encoder[0], "auto_model", None)
    blocks = getattr(getattr(inner, "encoder", None), "layer", None)
    embeddings = getattr(inner, "embeddings", None)
    if not isinstance(blocks, nn.ModuleList) or not isinstance(embeddings, nn.Module):
        raise DgnUserError(f"freeze_layers={layers}: the encoder's transformer ({type(inner).__name__}) has no "
                           "'embeddings' and 'encoder.layer' to freeze")
    if layers > len(blocks):
        raise DgnUserError(f"freeze_layers={layers}: the encoder's transformer has only {len(blocks)} layers")
    return [embeddings, *blocks[:layers]]


@contextlib.contextmanager
def frozen_bottom(model: EndToEndSelector, layers: int) -> Iterator[list[nn.Parameter]]:
    """Within the block, :func:`bottom_modules` do not train (``requires_grad`` off;
    restored after). Yields the parameters frozen (none when ``layers`` is 0); raises as
    :func:`bottom_modules`."""
    params = [p for m in bottom_modules(model, layers) for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield params
    finally:
        for p in params:
            p.requires_grad_(True)


@contextlib.contextmanager
def transformer_dropout(model: EndToEndSelector, p: float | None) -> Iterator[int]:
    """Within the block, every dropout of the transformer (``nn.Dropout``, whose ``p`` BERT's
    attention reads too) drops with probability ``p`` (None: left as it is); restored
    after. Yields how many dropout modules were set."""
    modules = [] if p is None else [m for m in model.encoder.modules() if isinstance(m, nn.Dropout)]
    before = [m.p for m in modules]
    for m in modules:
        m.p = float(p)
    try:
        yield len(modules)
    finally:
        for m, q in zip(modules, before, strict=True):
            m.p = q


class EndToEndTask(Task):
    """An :class:`EndToEndSelector` and its problems, as :func:`dgn.training.fit` trains it.

    A step's loss is the head's on the problems (each cut to ``config.top_l``, gold
    kept); AdamW trains the transformer at ``encoder_lr`` and the head at ``head_lr``
    under a linear warm-up and decay; the dev metrics come from ranking the dev problems
    (in slices under torchrun, gathered); ``freeze_layers`` and ``encoder_dropout`` hold
    for the run.
    """

    kind = END_TO_END_KIND
    recorded_before = RECORDED_BEFORE
    batch_option = "--claims-per-step"

    def __init__(self, model: EndToEndSelector, train: Sequence[Any], dev: Sequence[Any] | None,
                 config: FinetuneConfig) -> None:
        self.model, self.dev, self.config = model, dev, config
        self.problems = [train[i] for i in usable_problems([p.gold for p in train])]
        self.num_problems = len(self.problems)
        self.batch_size = config.claims_per_step

    def settings(self) -> dict[str, Any]:
        return _model_settings(self.model)

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        return _optimizer(self.model, self.config, total_steps)

    def loss(self, problems: Sequence[int]) -> Tensor:
        return _batch_loss(self.model, [self.problems[i] for i in problems], self.config)

    def dev_metrics(self, progress: bool) -> dict[str, float] | None:
        from dgn.metrics import evaluate_rankings

        if self.dev is None:
            return None
        rankings = _dev_rankings(self.model, self.dev, self.config, progress)
        return evaluate_rankings(rankings, [p.gold for p in self.dev], ks=self.config.eval_ks)

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        with frozen_bottom(self.model, self.config.freeze_layers), \
                transformer_dropout(self.model, self.config.encoder_dropout):
            yield

    @property
    def device(self) -> torch.device:
        return self.model.device


def train_end_to_end(
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    dev: str | os.PathLike[str] | None,
    output: str | os.PathLike[str],
    *,
    head: str | None = None,
    config: FinetuneConfig | None = None,
    encoder_model: str | os.PathLike[str] | None = None,
    lexical: bool | None = None,
    device: str | torch.device | None = None,
    save_every: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    resume_settings: dict[str, Any] | None = None,
    progress: bool = True,
    facility: float | None | str = "default",
    init: str | None = None,
) -> FinetuneResult:
    """Fine-tune a sentence encoder under ``head`` on a selection file; save the best epoch.

    What ``dgn train`` runs end to end (its default with the ``encoders`` extra, or
    ``--finetune-encoder``), alone or as each process under ``torchrun`` (see
    :func:`finetune`). ``output`` receives the model (:meth:`EndToEndSelector.save_pretrained`:
    the encoder in the sentence-transformers layout with safetensors weights, the head,
    ``selector.json``), ``train_history.json`` and the training state
    (:data:`dgn.train.STATE_NAME`), all written by rank 0.
    ``head``: ``"dgn"`` (None: the default, or the resumed run's) or ``"listwise"``.
    ``lexical``: the head reads the lexical match features too (``--features sentence,lexical``).
    ``facility``: the DGN head's facility-location term's starting weight (``dgn train
    --facility``; see :class:`EndToEndSelector`), None for none; ``"default"``:
    :data:`DEFAULT_FACILITY` (resuming: the run's own).
    ``init``: how the DGN head starts (``dgn train --init``; see :class:`EndToEndSelector`);
    None: :data:`DEFAULT_INIT` for the DGN head, or the resumed run's.
    ``train`` may name several files: they are joined into ``output/train-combined.jsonl``
    (problem ids must not repeat across them), as :func:`dgn.train.train_from_files` does.
    ``device``: ``"cpu"`` (default) or ``"cuda"`` (under torchrun: each process's
    ``LOCAL_RANK`` GPU, and the nccl backend). ``save_every``, ``on_step``: as
    :func:`finetune` takes them. ``resume_settings``: continue the run saved in
    ``output``, what :func:`dgn.train.read_run_settings` returns for it; the run's head,
    encoder, features and config are kept (a given one must be the same), and its files
    are read unless others are given, which must have the same SHA-256.

    Raises:
        DgnUserError: A training or dev file that is not there, an output path that is not
            a directory, an unknown ``head``, an encoder model that is not installed, a
            dev file without gold evidence, a global batch smaller than the number of
            processes, a device torch does not see, or, when resuming, settings or files
            other than the run's.
        DataError: A malformed problem (file, line and field), or a problem id in two
            training files.

    Every check, the files read in full included, comes before anything is written.
    """

    from dgn import distributed
    from dgn._paths import resumed_run_files
    from dgn.data import join_problem_files, read_problems
    from dgn.features.cache import file_sha256
    from dgn.training import STATE_NAME, write_history

    world = distributed.world_size() if distributed.process_group(device) else 1
    where = distributed.resolve_device(device)
    main = distributed.is_main()
    progress = progress and main
    saved = None if resume_settings is None else dict(resume_settings)
    if saved is not None:
        if saved["model_type"] != END_TO_END_KIND:
            raise DgnUserError("resume_settings: the run trained on frozen features; resume it with "
                               "dgn.train.train_from_files (dgn train --resume does)")
        recorded = saved["model_config"]
        for name, given, before in (("head", head, recorded["head"]), ("lexical", lexical, recorded["lexical"])):
            if given is not None and given != before:
                raise DgnUserError(f"{name} {given!r}: the run being resumed used {before!r}")
        if encoder_model is not None and resolve_model_path(encoder_model) != resolve_model_path(saved["encoder_model"]):
            raise DgnUserError(f"encoder_model {str(encoder_model)!r}: the run being resumed fine-tuned "
                               f"{saved['encoder_model'] or DEFAULT_MODEL!r}")
        had = bool(recorded.get("facility", False))
        if facility != "default" and (facility is not None) != had:
            raise DgnUserError(f"facility {facility!r}: the run being resumed had "
                               f"{'a' if had else 'no'} facility-location term")
        # The starting weight is overwritten by the saved state's; only its presence matters.
        facility = (1.0 if facility in ("default", None) else facility) if had else None
        was = recorded.get("init", "cosine")
        if init is not None and init != was:
            raise DgnUserError(f"init {init!r}: the run being resumed used {was!r}")
        init = was
        head, lexical, encoder_model = recorded["head"], recorded["lexical"], saved["encoder_model"]
        run_config = config_from_record(saved["train_config"])
        if config is not None and config != run_config:
            changed = [k for k, v in asdict(config).items() if asdict(run_config)[k] != v]
            raise DgnUserError(f"config {', '.join(changed)}: an end-to-end run resumes with its own settings")
        config = run_config
        train_files, dev = resumed_run_files(saved, train, dev)
    else:
        if train is None:
            raise DgnUserError("--train: required")
        train_files = train_file_list(train, dev)
    head = "dgn" if head is None else head
    if head not in HEADS:
        raise DgnUserError(f"head must be {' or '.join(map(repr, HEADS))}, got {head!r}")
    if facility == "default":
        facility = default_facility(head)
    _check_facility(facility, head)
    if init is not None and init not in INITS:
        raise DgnUserError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if init is not None and init != "cosine" and head != "dgn":
        raise DgnUserError(f"init {init!r}: how the DGN head starts; the listwise head has no such setting")
    init = init or default_init(head)
    resolve_model_path(encoder_model)
    cfg = config or FinetuneConfig()
    check_global_batch(cfg.claims_per_step, world, "--claims-per-step")
    check_save_every(save_every)
    train_problems = list(join_problem_files(train_files))
    dev_problems = None if dev is None else list(read_problems(dev))
    if dev_problems is not None and not any(any(p.gold) for p in dev_problems):
        raise DgnUserError(f"--dev {dev}: no problem has gold evidence; cannot select epochs")
    out = model_directory(output)
    train = one_train_file(train_files, out, progress, problems=train_problems, write=main)
    torch.manual_seed(cfg.seed)
    model = EndToEndSelector(load_sentence_model(encoder_model), head, lexical=bool(lexical), init=init,
                             facility=None if facility is None else float(facility)).to(where)
    bottom_modules(model, cfg.freeze_layers)  # a count beyond the transformer's fails before training
    if progress:
        verb = "resuming" if saved is not None else "fine-tuning"
        print(f"{verb} the sentence encoder under the {head} head ({model.num_parameters():,} parameters) "
              f"on {len(train_problems)} problems"
              + (f", {world} processes" if world > 1 else "") + (f", on {where}" if where.type != "cpu" else ""),
              flush=True)
    inputs = {
        "train": str(Path(train).resolve()),
        "dev": None if dev is None else str(Path(dev).resolve()),
        "encoder_model": None if encoder_model is None else str(encoder_model),
        "features": ["sentence", "lexical"] if lexical else ["sentence"],
        "facility": facility,
        "init": init,
        "finetune_config": asdict(cfg),
        "world_size": world,
    }
    files = {"train_sha256": file_sha256(train), "dev_sha256": None if dev is None else file_sha256(dev)} if main else {}

    def save(m: EndToEndSelector, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(out, extra={**inputs, "epoch": epoch, "dev_metrics": metrics})

    result = finetune(
        model, train_problems, dev_problems, cfg, on_best=save, on_step=on_step, progress=progress,
        state_path=out / STATE_NAME, resume=saved is not None, save_every=save_every, extra_state={**inputs, **files},
    )
    write_history(out, result, train_config=cfg, **inputs, model_type=END_TO_END_KIND, device=str(where))
    return result


class EndToEndFeatures:
    """The DGN head's input features of one problem, as :func:`dgn.explain.explain_problem` asks them.

    Adapts an :class:`EndToEndSelector` to the featurizer interface explain uses
    (``dim``, ``problem_features``, ``transform``). With the facility-location term the
    candidates' sentence embeddings follow the head's features (``dim`` grows by the
    embedding size), and :meth:`explained` is the model explain runs.
    """

    def __init__(self, model: EndToEndSelector) -> None:
        if model.dgn is None:
            raise DgnUserError("only a model with the DGN head has greedy steps to explain")
        self.model = model
        self.dim = model.dgn.config.in_features + (model.dim if model.facility is not None else 0)

    def explained(self) -> Any:
        """What :func:`dgn.explain.explain_problem` runs: the DGN head itself, or with the
        facility-location term a :class:`_FacilityGreedy` over both."""
        assert self.model.dgn is not None
        return self.model.dgn if self.model.facility is None else _FacilityGreedy(self.model)

    @torch.no_grad()
    def problem_features(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        was_training = self.model.training
        self.model.eval()
        try:
            q, S, mask = self.model.embed_problems([query], [list(candidates)])
            lex = self.model.lexical_for([query], [list(candidates)], mask.shape[1])
            X = self.model.head_features(q, S, mask, lex)
            if self.model.facility is not None:
                X = torch.cat([X, S.to(X.dtype)], dim=-1)
            return X[0].cpu().numpy()
        finally:
            self.model.train(was_training)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)


class _FacilityGreedy:
    """The DGN head with its facility-location term, as :func:`dgn.explain.explain_problem`
    runs a :class:`~dgn.model.DGN`: ``config`` (``in_features`` counts the sentence
    embeddings :class:`EndToEndFeatures` appends), ``training``, ``train``/``eval`` and
    ``select`` (exact hard greedy on the SCMM plus facility location, the picks
    :meth:`EndToEndSelector.score` makes in ``eval()`` mode)."""

    def __init__(self, model: EndToEndSelector) -> None:
        from dataclasses import replace

        assert model.dgn is not None and model.facility is not None
        self.model = model
        self.config = replace(model.dgn.config, in_features=model.dgn.config.in_features + model.dim)

    @property
    def training(self) -> bool:
        return self.model.training

    def train(self, mode: bool = True) -> _FacilityGreedy:
        self.model.train(mode)
        return self

    def eval(self) -> _FacilityGreedy:
        return self.train(False)

    def select(
        self, features: Any, mask: Any = None, steps: int | None = None, return_step_gains: bool = False
    ) -> tuple[Tensor, Tensor | None, Any]:
        from dgn._validation import as_features
        from dgn.greedy import greedy_select

        assert self.model.dgn is not None and self.model.facility is not None
        X, _ = as_features(features)
        X = X.to(next(self.model.parameters()).dtype)
        n_head = self.model.dgn.config.in_features
        if mask is None:
            mask = torch.ones(X.shape[:2], dtype=torch.bool)
        HS, beta, valid = self.model._facility_inputs(X[..., :n_head], X[..., n_head:], torch.as_tensor(mask))
        K = self.config.steps if steps is None else steps
        sel = greedy_select(HS, K, self.model.facility, valid, modular=beta, return_step_gains=return_step_gains)
        return HS[..., : -self.model.dim], beta, sel
