"""The baselines of the DGN paper's Table 1 (Powers et al., 2018).

* TF-IDF cosine top-k (the FEVER baseline retriever, Thorne et al. 2018),
* word-embedding cosine top-k,
* untrained SCMM greedy on the claim-sentence features,
* Encoder / DeepEncoder: the DGN's encoder with a linear scorer, trained with weighted
  binary cross entropy, top-k by score (the paper's ablation without greedy layers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dgn.encoder import DeepEncoder, Encoder
from dgn.greedy import greedy_select

__all__ = [
    "EncoderScorer",
    "top_k",
    "tfidf_rankings",
    "cosine_rankings",
    "scmm_rankings",
]


def top_k(scores: Sequence[float] | np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` largest scores, best first (ties: lowest index)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((np.arange(len(s)), -s))  # by score desc, then index asc
    return [int(i) for i in order[:k]]


def tfidf_rankings(problems: Iterable[Any], k: int, fit_texts: Iterable[str] | None = None) -> list[list[int]]:
    """TF-IDF cosine between claim and each candidate, top-k per problem.

    Args:
        problems: :class:`dgn.data.Problem` objects (``query``, ``candidates``).
        k: Picks per problem.
        fit_texts: Corpus to fit the IDF on (e.g. the training set's texts); by default
            each problem's own query and candidates.
    """
    from dgn.features import TfidfScorer

    scorer = TfidfScorer()
    if fit_texts is not None:
        scorer.fit(list(fit_texts))
    return [top_k(scorer.score(p.query, p.candidates), k) for p in problems]


def cosine_rankings(problems: Iterable[Any], vectors: Any, k: int) -> list[list[int]]:
    """Cosine of mean-pooled word vectors of claim and candidate, top-k per problem."""
    from dgn.features import cosine_scores

    return [top_k(cosine_scores(p.query, p.candidates, vectors), k) for p in problems]


def scmm_rankings(raw_features: Iterable[np.ndarray], k: int, concave: str = "sqrt") -> list[list[int]]:
    """Untrained SCMM greedy on ``relu(q * s_v)`` (the claim-sentence agreement per dimension).

    The paper's features ``q * s_v`` are signed; an SCMM needs nonnegative features, so
    the untrained objective covers the dimensions where claim and sentence agree.
    """
    out = []
    for x in raw_features:
        H = torch.from_numpy(np.maximum(np.asarray(x, dtype=np.float64), 0.0))
        sel = greedy_select(H, k, concave)
        out.append([i for i in sel.indices.tolist() if i >= 0])
    return out


class EncoderScorer(nn.Module):
    """Encoder (or DeepEncoder) plus a linear scorer: one relevance logit per candidate.

    Args:
        in_features: F.
        hidden_features: Encoder width.
        encoded_features: E.
        deep: Use the three-layer :class:`~dgn.encoder.DeepEncoder`.
        dropout: Encoder dropout.

    Shape:
        - features: ``(B, N, F)``
        - output: ``(B, N)`` logits, ``-inf`` on padding
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        encoded_features: int,
        deep: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        cls = DeepEncoder if deep else Encoder
        self.encoder = cls(in_features, hidden_features, encoded_features, dropout)
        self.scorer = nn.Linear(encoded_features, 1)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        logits = self.scorer(self.encoder(features)).squeeze(-1)  # (B, N)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        return logits  # type: ignore[no-any-return]

    def num_parameters(self) -> int:
        """The number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
