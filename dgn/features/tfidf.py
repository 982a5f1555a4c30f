"""TF-IDF cosine scoring of candidate sentences (the FEVER baseline's sentence ranking).

:class:`TfidfScorer` wraps scikit-learn's ``TfidfVectorizer`` with the package tokenizer
(:func:`~dgn.features.text.tokenize`). Defaults follow the FEVER baseline, whose
retrieval uses DrQA-style TF-IDF: unigrams and bigrams, log-scaled term frequency
(``sublinear_tf=True``: ``1 + log(tf)``), L2-normalised vectors, so the score of a
candidate is the cosine between its vector and the claim's. IDF is scikit-learn's smooth
IDF ``1 + log((1 + n) / (1 + df))`` (DrQA hashes n-grams and uses a BM25-like IDF;
the ranking behaviour is close, the numbers are not identical).

IDF needs a corpus: call :meth:`TfidfScorer.fit` on the sentence collection (e.g. all
candidates of a training file). Unfitted, :meth:`TfidfScorer.score` fits a throw-away
vectorizer on that one problem (the claim plus its candidates), which is what a
per-problem baseline with no corpus can do.

scikit-learn is imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dgn.errors import DgnUserError
from dgn.features.text import tokenize

__all__ = ["TfidfScorer"]


class TfidfScorer:
    """Cosine similarity of TF-IDF vectors between a query and its candidates.

    Args:
        ngram_range: Smallest and largest n-gram length (``(1, 2)``: unigrams + bigrams).
        sublinear_tf: Use ``1 + log(tf)`` instead of raw counts.
        min_df: Ignore terms in fewer documents than this (int) or this share (float),
            when fitting on a corpus.
        max_df: Ignore terms in more documents than this share (float) or count (int),
            when fitting on a corpus.
        max_features: Keep only the most frequent terms (None: all).

    Example:
        >>> scorer = TfidfScorer().fit(["a cat sat", "a dog ran", "birds fly"])
        >>> int(scorer.score("cat sat", ["a dog ran", "the cat sat down"]).argmax())
        1
    """

    def __init__(
        self,
        *,
        ngram_range: tuple[int, int] = (1, 2),
        sublinear_tf: bool = True,
        min_df: int | float = 1,
        max_df: int | float = 1.0,
        max_features: int | None = None,
    ) -> None:
        lo, hi = ngram_range
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise DgnUserError(
                f"ngram_range must be (lo, hi) with 1 <= lo <= hi, got {ngram_range}"
            )
        self.ngram_range = (lo, hi)
        self.sublinear_tf = bool(sublinear_tf)
        self.min_df = min_df
        self.max_df = max_df
        self.max_features = max_features
        self._vectorizer: Any = None

    def _make_vectorizer(self, *, corpus: bool) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(
            tokenizer=tokenize,
            lowercase=False,  # tokenize lowercases
            token_pattern=None,
            ngram_range=self.ngram_range,
            sublinear_tf=self.sublinear_tf,
            min_df=self.min_df if corpus else 1,
            max_df=self.max_df if corpus else 1.0,
            max_features=self.max_features if corpus else None,
            norm="l2",
            dtype=np.float64,
        )

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has been called."""
        return self._vectorizer is not None

    @property
    def vectorizer(self) -> Any:
        """The fitted ``TfidfVectorizer`` (None before :meth:`fit`)."""
        return self._vectorizer

    def fit(self, texts: Iterable[str]) -> TfidfScorer:
        """Learn the vocabulary and IDF weights from a corpus.

        Args:
            texts: The documents (sentences); iterated once.

        Returns:
            ``self``.

        Raises:
            DgnUserError: ``texts`` is a single string, or no term survives (empty
                corpus, or ``min_df``/``max_df`` prune everything).
        """
        if isinstance(texts, (str, bytes)):
            raise DgnUserError("fit expects a list of texts, got a single string")
        vectorizer = self._make_vectorizer(corpus=True)
        try:
            vectorizer.fit(texts)
        except ValueError as e:
            raise DgnUserError(f"cannot fit TF-IDF: {e}") from e
        self._vectorizer = vectorizer
        return self

    def transform(self, texts: Sequence[str]) -> Any:
        """TF-IDF rows (L2-normalised, ``scipy.sparse`` CSR) of ``texts`` with the fitted model.

        Raises:
            DgnUserError: Not fitted.
        """
        if self._vectorizer is None:
            raise DgnUserError("TfidfScorer is not fitted; call fit(texts) first")
        return self._vectorizer.transform(list(texts))

    def score(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        """Cosine similarity between the query's and each candidate's TF-IDF vector.

        With a fitted scorer, terms outside the fitted vocabulary are ignored. Unfitted,
        a vectorizer is fitted on ``[query] + candidates`` for this call only (IDF from
        these ``N + 1`` texts; ``min_df``/``max_df``/``max_features`` are not applied)
        and the scorer stays unfitted.

        Args:
            query: The claim.
            candidates: The candidate sentences.

        Returns:
            ``(N,)`` float64 scores in ``[0, 1]``; 0 for a candidate sharing no term with
            the query (or if the query has no term at all).

        Raises:
            DgnUserError: ``query`` is not a str or ``candidates`` not a list of str.
        """
        if not isinstance(query, str):
            raise DgnUserError(f"query must be a str, got {type(query).__name__}")
        if isinstance(candidates, (str, bytes)):
            raise DgnUserError("candidates must be a list of strings, got a single string")
        candidates = list(candidates)
        for i, c in enumerate(candidates):
            if not isinstance(c, str):
                raise DgnUserError(f"candidate {i} is {type(c).__name__}, expected str")
        if not candidates:
            return np.zeros(0, dtype=np.float64)
        vectorizer = self._vectorizer
        if vectorizer is None:
            vectorizer = self._make_vectorizer(corpus=False)
            try:
                vectorizer.fit([query, *candidates])
            except ValueError:  # empty vocabulary: no text has a token
                return np.zeros(len(candidates), dtype=np.float64)
        q = vectorizer.transform([query])
        s = vectorizer.transform(candidates)
        scores = np.asarray((s @ q.T).toarray(), dtype=np.float64).ravel()
        return np.clip(scores, 0.0, 1.0)
