"""The baselines of the DGN paper's Table 1 (Powers et al., 2018).

* TF-IDF cosine top-k (the FEVER baseline retriever, Thorne et al. 2018), with the
  configuration (IDF source, n-grams, tf scaling) chosen on a dev set
  (:data:`TFIDF_CONFIGS`, :func:`select_tfidf_config`),
* BM25 top-k (Lucene's Okapi BM25, the candidates as the collection),
* word-embedding cosine top-k,
* untrained SCMM greedy on the claim-sentence features,
* Encoder / DeepEncoder: the DGN's encoder with a linear scorer, trained with weighted
  binary cross entropy, top-k by score (the paper's ablation without greedy layers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from dgn.encoder import DeepEncoder, Encoder
from dgn.errors import DgnUserError
from dgn.greedy import greedy_select

__all__ = [
    "TFIDF_CONFIGS",
    "EncoderScorer",
    "RankingOutput",
    "TfidfConfig",
    "top_k",
    "bm25_rankings",
    "select_tfidf_config",
    "tfidf_rankings",
    "tfidf_rankings_config",
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


def bm25_rankings(
    problems: Iterable[Any], k: int, k1: float = 1.5, b: float = 0.75
) -> list[list[int]]:
    """BM25 score of each candidate for the claim, top-k per problem.

    Each problem's candidates are its own collection (:func:`dgn.features.bm25_scores`:
    Lucene's BM25, tokens of :func:`dgn.features.tokenize`); ties go to the lowest index.

    Args:
        problems: :class:`dgn.data.Problem` objects (``query``, ``candidates``).
        k: Picks per problem.
        k1: Term-frequency saturation.
        b: Length normalisation.

    Returns:
        One list of at most ``k`` candidate indices per problem, best first.

    Example:
        >>> from dgn.data import Problem
        >>> p = Problem("c1", "Paris is in France", ["Rome is in Italy.", "Paris is in France."], [[1]])
        >>> bm25_rankings([p], 1)
        [[1]]
    """
    from dgn.features.lexical import bm25_scores

    return [top_k(bm25_scores(p.query, p.candidates, k1, b), k) for p in problems]


@dataclass(frozen=True)
class TfidfConfig:
    """One TF-IDF cosine configuration of :data:`TFIDF_CONFIGS`.

    Args:
        idf: ``"per-problem"``: IDF from each problem's claim and candidates;
            ``"corpus"``: IDF fitted once on a corpus (``fit_texts``, e.g. the training texts).
        ngram_range: ``(1, 1)`` unigrams or ``(1, 2)`` unigrams and bigrams.
        sublinear_tf: ``1 + log(tf)`` instead of raw counts.
        sklearn_defaults: Plain ``TfidfVectorizer()`` (its own lowercase
            ``\\b\\w\\w+\\b`` tokens: one-character tokens dropped, no FEVER unescaping;
            smooth IDF, raw tf, unigrams) instead of :class:`~dgn.features.TfidfScorer`
            with the package tokenizer; ``ngram_range`` and ``sublinear_tf`` then are
            the scikit-learn defaults they state.
    """

    idf: Literal["per-problem", "corpus"]  # where the IDF comes from
    ngram_range: tuple[int, int]  # (1, 1) or (1, 2)
    sublinear_tf: bool  # 1 + log(tf) instead of tf
    sklearn_defaults: bool = False  # plain TfidfVectorizer(), no package tokenizer


def _tfidf_config_name(config: TfidfConfig) -> str:
    lo, hi = config.ngram_range
    return f"{config.idf},{lo}-{hi},{'sublinear-tf' if config.sublinear_tf else 'raw-tf'}"


#: TF-IDF cosine configurations by name: IDF per problem or fitted on a corpus, unigrams
#: or uni+bigrams, raw or sublinear tf (8, named like ``"per-problem,1-1,raw-tf"``), and
#: ``"sklearn-defaults-per-problem"``: scikit-learn's ``TfidfVectorizer()`` as it comes,
#: fitted on each problem. :func:`select_tfidf_config` picks one on a dev set.
TFIDF_CONFIGS: dict[str, TfidfConfig] = {
    _tfidf_config_name(c): c
    for c in (
        TfidfConfig(idf, ngrams, sublinear)
        for idf in ("per-problem", "corpus")
        for ngrams in ((1, 1), (1, 2))
        for sublinear in (False, True)
    )
}
TFIDF_CONFIGS["sklearn-defaults-per-problem"] = TfidfConfig(
    "per-problem", (1, 1), False, sklearn_defaults=True
)


def _sklearn_default_scores(query: str, candidates: Sequence[str]) -> np.ndarray:
    """Cosine of plain ``TfidfVectorizer()`` vectors fitted on ``[query, *candidates]``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not candidates:
        return np.zeros(0, dtype=np.float64)
    vectorizer = TfidfVectorizer()
    try:
        vectorizer.fit([query, *candidates])
    except ValueError:  # empty vocabulary: no text has a token
        return np.zeros(len(candidates), dtype=np.float64)
    q = vectorizer.transform([query])
    s = vectorizer.transform(list(candidates))
    return np.clip(np.asarray((s @ q.T).toarray(), dtype=np.float64).ravel(), 0.0, 1.0)


def _config_scorer(
    name: str, fit_texts: Sequence[str] | None
) -> Callable[[str, Sequence[str]], np.ndarray]:
    """A ``score(query, candidates)`` callable for configuration ``name``."""
    from dgn.features import TfidfScorer

    if name not in TFIDF_CONFIGS:
        raise DgnUserError(
            f"unknown TF-IDF configuration {name!r}; choose from {', '.join(TFIDF_CONFIGS)}"
        )
    config = TFIDF_CONFIGS[name]
    if config.sklearn_defaults:
        return _sklearn_default_scores
    scorer = TfidfScorer(ngram_range=config.ngram_range, sublinear_tf=config.sublinear_tf)
    if config.idf == "corpus":
        if fit_texts is None:
            raise DgnUserError(f"TF-IDF configuration {name!r} needs fit_texts (a corpus)")
        scorer.fit(fit_texts)
    return scorer.score


def tfidf_rankings_config(
    problems: Iterable[Any], k: int, config_name: str, fit_texts: Iterable[str] | None = None
) -> list[list[int]]:
    """TF-IDF cosine top-k per problem under one configuration of :data:`TFIDF_CONFIGS`.

    Args:
        problems: :class:`dgn.data.Problem` objects (``query``, ``candidates``).
        k: Picks per problem.
        config_name: A key of :data:`TFIDF_CONFIGS`, e.g. ``"corpus,1-2,sublinear-tf"``.
        fit_texts: The corpus of the ``"corpus,..."`` configurations (ignored by the
            per-problem ones).

    Returns:
        One list of at most ``k`` candidate indices per problem, best first (ties: lowest
        index).

    Raises:
        DgnUserError: Unknown ``config_name``, or a corpus configuration without
            ``fit_texts`` (or with texts that leave no term).

    Example:
        >>> from dgn.data import Problem
        >>> p = Problem("c1", "Paris is in France", ["Rome is in Italy.", "Paris is in France."], [[1]])
        >>> tfidf_rankings_config([p], 2, "per-problem,1-1,raw-tf")
        [[1, 0]]
    """
    texts = None if fit_texts is None else list(fit_texts)
    score = _config_scorer(config_name, texts)
    return [top_k(score(p.query, p.candidates), k) for p in problems]


def select_tfidf_config(
    dev_problems: Iterable[Any],
    fit_texts: Iterable[str] | None,
    ks: Sequence[int] = (1, 3, 5, 7),
) -> tuple[str, dict[str, float]]:
    """The TF-IDF configuration with the best mean recall over ``ks`` on dev problems.

    Every configuration of :data:`TFIDF_CONFIGS` ranks the dev problems (top ``max(ks)``);
    its score is ``mean_k recall@k`` (:func:`dgn.metrics.evaluate_rankings`, over the
    problems with gold). Ties go to the configuration listed first.

    Args:
        dev_problems: :class:`dgn.data.Problem` objects with gold.
        fit_texts: The corpus for the ``"corpus,..."`` configurations (e.g. the training
            claims and candidates); None skips those configurations.
        ks: Recall cutoffs.

    Returns:
        ``(best name, {name: mean recall})`` over the configurations evaluated.

    Raises:
        DgnUserError: No dev problem has gold, or ``ks`` is empty.
    """
    from dgn.metrics import evaluate_rankings

    problems = list(dev_problems)
    ks = tuple(ks)
    if not ks:
        raise DgnUserError("select_tfidf_config needs at least one cutoff in ks")
    if not any(p.gold for p in problems):
        raise DgnUserError("select_tfidf_config: no dev problem has gold evidence")
    texts = None if fit_texts is None else list(fit_texts)
    golds = [p.gold for p in problems]
    scores: dict[str, float] = {}
    for name, config in TFIDF_CONFIGS.items():
        if config.idf == "corpus" and texts is None:
            continue
        rankings = tfidf_rankings_config(problems, max(ks), name, texts)
        metrics = evaluate_rankings(rankings, golds, ks=ks, names=("recall",))
        scores[name] = float(np.mean([metrics[f"recall@{k}"] for k in ks]))
    best = max(scores, key=lambda n: scores[n])  # first of the best, in TFIDF_CONFIGS order
    return best, scores


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


@dataclass
class RankingOutput:
    """What a ranking model (:class:`EncoderScorer`) returns.

    ``outputs.logits.argsort(dim=-1, descending=True)`` ranks the candidates, best first.

    Attributes:
        logits: ``(B, N)`` one score per candidate, ``-inf`` on padding.
    """

    logits: Tensor


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
        - output: a :class:`RankingOutput` whose ``logits`` are ``(B, N)``, ``-inf`` on padding

    Example:
        >>> scorer = EncoderScorer(4, 8, 6)
        >>> out = scorer(torch.randn(2, 5, 4))
        >>> out.logits.argsort(dim=-1, descending=True).shape
        torch.Size([2, 5])
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
        self.config = {
            "in_features": in_features,
            "hidden_features": hidden_features,
            "encoded_features": encoded_features,
            "deep": bool(deep),
            "dropout": float(dropout),
        }
        #: Settings stored beside the weights (how features were built), as for the DGN.
        self.extra: dict[str, Any] = {}

    def forward(self, features: Tensor, mask: Tensor | None = None) -> RankingOutput:
        logits = self.scorer(self.encoder(features)).squeeze(-1)  # (B, N)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        return RankingOutput(logits)

    def save_pretrained(self, directory: Any, extra: dict[str, Any] | None = None) -> Any:
        """Write ``config.json`` and ``model.safetensors`` (as :meth:`dgn.DGN.save_pretrained`)."""
        from dgn.checkpoint import write_checkpoint

        return write_checkpoint(self, directory, "encoder", dict(self.config), self.extra if extra is None else extra)

    @classmethod
    def from_pretrained(cls, directory: Any, map_location: Any = "cpu") -> EncoderScorer:
        """Load a checkpoint written by :meth:`save_pretrained`.

        Raises:
            DgnUserError: As :meth:`dgn.DGN.from_pretrained`, or a checkpoint of a DGN.
        """
        from dgn.checkpoint import read_checkpoint

        return cls._from_checkpoint(*read_checkpoint(directory, map_location), map_location)

    @classmethod
    def _from_checkpoint(cls, meta: dict[str, Any], state: dict[str, Tensor], source: str, weights_path: Path,
                         map_location: Any) -> EncoderScorer:
        """:meth:`from_pretrained` on a checkpoint :func:`dgn.checkpoint.read_checkpoint` has read."""
        from dgn.checkpoint import load_weights

        if meta.get("model_type", "dgn") != "encoder":
            raise DgnUserError(
                f"{source}: field 'model_type': a {meta.get('model_type', 'dgn')!r} checkpoint, not an encoder scorer"
            )
        config = meta.get("config")
        names = ("in_features", "hidden_features", "encoded_features", "deep", "dropout")
        if not isinstance(config, dict) or set(config) != set(names):
            raise DgnUserError(f"{source}: field 'config': expected the keys {', '.join(names)}")
        try:
            model = cls(**config)
        except (TypeError, ValueError) as exc:
            raise DgnUserError(f"{source}: field 'config': {exc}") from None
        load_weights(model, state, weights_path, map_location)
        model.extra = meta["extra"]
        model.eval()
        return model

    def num_parameters(self) -> int:
        """The number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
