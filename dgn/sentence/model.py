"""The end-to-end model: a sentence encoder under the greedy layers (or a listwise scorer).

:class:`EndToEndModel` embeds the claim and its candidates with a pretrained
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

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dgn.features.lexical import LEXICAL_FEATURES, lexical_features
from dgn.features.sentence import (
    embed,
    embedding_dim,
    pair_features,
)
from dgn.layer import GreedyLayer
from dgn.model import DGN, DGNConfig, DGNOutput
from dgn.objectives import FacilityLocation, SumObjective
from dgn.sentence.checkpoint import load_model, save_model
from dgn.sentence.config import DIVERSE_COVERAGE_WEIGHT, HEADS, INITS, TRAIN_BUCKET
from dgn.sentence.loss import head_loss

__all__ = ["EndToEndModel", "EndToEndSelector"]


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


class EndToEndModel(nn.Module):
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

    #: The training loss of one batch (:func:`dgn.sentence.loss.head_loss`).
    loss = head_loss

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
        """Write the encoder (sentence-transformers layout, safetensors) and the head
        (:func:`dgn.sentence.checkpoint.save_model`).

        ``extra``: JSON-ready settings stored in ``selector.json`` (default: ``self.extra``).
        """
        return save_model(self, directory, extra)

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike[str], map_location: str | torch.device = "cpu"
    ) -> EndToEndModel:
        """Load a model written by :meth:`save_pretrained`, in ``eval()`` mode on ``map_location``.

        Raises:
            DgnUserError: No ``selector.json`` in ``directory``, one that cannot be read or
                is not an end-to-end model's, or head weights that do not fit it.
        """
        return load_model(cls, directory, map_location)

    @property
    def top_l(self) -> int | None:
        """The cut prediction applies (:func:`cut_candidates`): the ``top_l`` the model was
        trained with (``extra["finetune_config"]``, as :func:`train_end_to_end` records it),
        or None (every candidate)."""
        value = (self.extra.get("finetune_config") or {}).get("top_l")
        return None if value is None else int(value)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    @property
    def diversity_scale(self) -> float:
        """A fixed factor on the DGN head's diversity terms (the SCMM's and the facility
        term's weights in their sum; 1: as trained, 0: none, the greedy then picks by the
        modular term alone, a ranking). :func:`~dgn.sentence.finetune` chooses it on the
        dev split after training (``FinetuneConfig.diversity_scales``); it is saved with
        the model. Always 1 for a head without the facility-location term."""
        return 1.0 if self.facility is None else float(self.facility.scale)

    @diversity_scale.setter
    def diversity_scale(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise ValueError(f"diversity_scale must be a number >= 0, got {value!r}")
        if self.facility is None:
            if value != 1.0:
                raise ValueError("diversity_scale: only a DGN head with the facility-location term has one")
            return
        self.facility.scale = float(value)

    @torch.no_grad()
    def diversity(self) -> dict[str, float | None] | None:
        """How strongly the DGN head diversifies, as it stands (after training: what it
        learned): ``scmm`` and ``facility``, the learned weights of the SCMM and of the
        facility-location term in their sum (``facility`` None without the term, ``scmm``
        then 1), ``alpha``, the mean of the SCMM's coverage weights, and ``scale``, the
        factor on both (:attr:`diversity_scale`, chosen on dev). None for the listwise
        head, which does not diversify."""
        if self.dgn is None:
            return None
        like = torch.zeros(self.dgn.config.encoded_features, dtype=next(self.dgn.parameters()).dtype)
        alpha = self.dgn.objective.weights(like)
        weights = None if self.facility is None else self.facility.base_weights(like)
        return {
            "scmm": 1.0 if weights is None else float(weights[0]),
            "facility": None if weights is None else float(weights[1]),
            "alpha": 1.0 if alpha is None else float(alpha.mean()),
            "scale": self.diversity_scale,
        }


#: The old name of :class:`EndToEndModel` (a model, not a :class:`~dgn.selector.Selector`),
#: kept so that code written against it runs.
EndToEndSelector = EndToEndModel
