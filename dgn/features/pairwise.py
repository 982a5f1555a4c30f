"""Claim-sentence features and the word-embedding cosine baseline (paper section 4).

For a claim (query) ``q`` and candidate sentences ``s_1..s_N``, each text is represented
by the mean of its words' vectors (:func:`~dgn.features.vectors.embed_texts`) and the
input feature of candidate ``v`` is the element-wise product

    X[v] = q * s_v            (shape (D,), D = 300 for the fastText vectors)

The product is **signed**: word-vector coordinates are negative as often as positive, so
``X`` has negative entries. The SCMM objective needs nonnegative features; the model's
encoder (``H = relu(W2 relu(W1 X + b1) + b2)``) maps ``X`` to a nonnegative ``H``. Do not
feed ``X`` to the objective directly.

Everything here takes plain strings, so it does not depend on the data schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from dgn.errors import DgnUserError
from dgn.features.text import TOKENIZER_VERSION
from dgn.features.vectors import WordVectors, embed_texts

__all__ = [
    "FEATURIZER_NAME",
    "claim_sentence_features",
    "cosine_scores",
    "featurizer_settings",
    "iter_claim_sentence_features",
]

#: Name of the ``q * s_v`` featurizer in :func:`featurizer_settings`.
FEATURIZER_NAME = "claim_sentence_product/mean_word_vectors"


def _check_inputs(query: str, candidates: Sequence[str]) -> None:
    if not isinstance(query, str):
        raise DgnUserError(f"query must be a str, got {type(query).__name__}")
    if isinstance(candidates, (str, bytes)):
        raise DgnUserError("candidates must be a list of strings, got a single string")
    if not isinstance(candidates, Iterable):
        raise DgnUserError(f"candidates must be a list of strings, got {type(candidates).__name__}")


def claim_sentence_features(
    query: str, candidates: Sequence[str], vectors: WordVectors
) -> np.ndarray:
    """The paper's input features ``X[v] = q * s_v`` for one problem.

    Args:
        query: The claim.
        candidates: The candidate sentences, in the problem's order.
        vectors: Word vectors (a ``.vec`` table or a fastText model).

    Returns:
        ``(N, D)`` float32 array; row ``v`` is the element-wise product of the mean-pooled
        claim vector and the mean-pooled vector of ``candidates[v]``. Entries can be
        negative (see the module docstring). A claim or sentence with no known word
        has a zero vector, so its rows are zero. ``N = 0`` gives shape ``(0, D)``.

    Raises:
        DgnUserError: ``query`` is not a str or ``candidates`` is not a list of str.
    """
    _check_inputs(query, candidates)
    q = embed_texts([query], vectors)[0]
    s = embed_texts(candidates, vectors)
    return s * q[None, :]


def cosine_scores(query: str, candidates: Sequence[str], vectors: WordVectors) -> np.ndarray:
    """Cosine similarity between the mean-pooled claim and each candidate (the baseline).

    Args:
        query: The claim.
        candidates: The candidate sentences.
        vectors: Word vectors.

    Returns:
        ``(N,)`` float64 scores in ``[-1, 1]``; 0 where either side has a zero vector
        (no known word).

    Raises:
        DgnUserError: ``query`` is not a str or ``candidates`` is not a list of str.
    """
    _check_inputs(query, candidates)
    q = embed_texts([query], vectors)[0].astype(np.float64)
    s = embed_texts(candidates, vectors).astype(np.float64)
    denom = np.linalg.norm(s, axis=1) * np.linalg.norm(q)
    dots = s @ q
    out = np.zeros(len(s), dtype=np.float64)
    nz = denom > 0
    out[nz] = dots[nz] / denom[nz]
    return np.clip(out, -1.0, 1.0)


def iter_claim_sentence_features(
    problems: Iterable[tuple[str, Sequence[str]]], vectors: WordVectors
) -> Iterator[np.ndarray]:
    """Yield :func:`claim_sentence_features` for each ``(query, candidates)`` pair, lazily.

    Suited as the ``build_fn`` body of :meth:`dgn.features.cache.FeatureCache.get_or_build`.

    Args:
        problems: ``(query, candidates)`` pairs in file order.
        vectors: Word vectors.

    Yields:
        One ``(N_i, D)`` float32 array per problem.
    """
    for query, candidates in problems:
        yield claim_sentence_features(query, candidates, vectors)


def featurizer_settings(vectors: WordVectors) -> dict[str, Any]:
    """The settings that identify :func:`claim_sentence_features` output (a cache key part).

    Args:
        vectors: The word vectors used.

    Returns:
        A JSON-able dict: featurizer name, tokenizer version and
        :meth:`WordVectors.fingerprint`.
    """
    return {
        "featurizer": FEATURIZER_NAME,
        "tokenizer_version": TOKENIZER_VERSION,
        "vectors": vectors.fingerprint(),
    }
