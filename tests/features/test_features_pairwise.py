"""Claim-sentence features (q * s_v) and the word-embedding cosine baseline."""

from __future__ import annotations

import numpy as np
import pytest

from dgn.errors import DgnUserError
from dgn.features.pairwise import (
    claim_sentence_features,
    cosine_scores,
    featurizer_settings,
    iter_claim_sentence_features,
)
from dgn.features.text import tokenize
from dgn.features.vectors import WordVectors


@pytest.fixture
def vectors() -> WordVectors:
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "dog", "film", "movie", "actor", "protein"]
    return WordVectors(words, rng.normal(size=(len(words), 6)))


def _mean(text: str, wv: WordVectors) -> np.ndarray:
    rows = [wv.matrix[wv.words.index(t)] for t in tokenize(text) if t in wv]
    return np.mean(rows, axis=0) if rows else np.zeros(wv.dim)


def test_features_equal_q_times_s(vectors: WordVectors) -> None:
    query = "The cat sat"
    cands = ["the dog", "A film, a movie!", "nothing known here", "cat cat actor"]
    x = claim_sentence_features(query, cands, vectors)
    assert x.shape == (4, 6) and x.dtype == np.float32
    q = _mean(query, vectors)
    expected = np.stack([q * _mean(c, vectors) for c in cands])
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x[2], 0)  # no known word
    assert (x < 0).any()  # the product is signed; the encoder makes it nonnegative


def test_features_edge_cases(vectors: WordVectors) -> None:
    assert claim_sentence_features("cat", [], vectors).shape == (0, 6)
    np.testing.assert_array_equal(claim_sentence_features("zzz", ["cat"], vectors), 0)
    with pytest.raises(DgnUserError, match="^candidates must be a list of strings, got a single string$"):
        claim_sentence_features("cat", "cat sat", vectors)
    with pytest.raises(DgnUserError, match="^query must be a str, got NoneType$"):
        claim_sentence_features(None, ["cat"], vectors)  # type: ignore[arg-type]


def test_cosine_scores(vectors: WordVectors) -> None:
    cands = ["the cat sat", "protein", "unknown", "sat the cat"]
    s = cosine_scores("cat sat the", cands, vectors)
    assert s.shape == (4,)
    assert s[0] == pytest.approx(1.0) and s[3] == pytest.approx(1.0)
    assert s[2] == 0.0
    q, p = _mean("cat sat the", vectors), _mean("protein", vectors)
    assert s[1] == pytest.approx(q @ p / np.linalg.norm(q) / np.linalg.norm(p), rel=1e-5)
    assert np.all(np.abs(s) <= 1.0)
    assert cosine_scores("zzz", ["cat"], vectors)[0] == 0.0


def test_iter_and_settings(vectors: WordVectors) -> None:
    problems = [("cat", ["dog", "film"]), ("film", ["movie"])]
    arrays = list(iter_claim_sentence_features(problems, vectors))
    assert [a.shape for a in arrays] == [(2, 6), (1, 6)]
    settings = featurizer_settings(vectors)
    assert settings["vectors"]["dim"] == 6 and "tokenizer_version" in settings
