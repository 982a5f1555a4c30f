"""TF-IDF cosine scorer."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from dgn.errors import DgnUserError
from dgn.features.text import tokenize
from dgn.features.tfidf import TfidfScorer

CORPUS = [
    "Nikolaj Coster-Waldau is a Danish actor.",
    "He was born in Rudkobing.",
    "The film was released in 2011 -LRB- in Denmark -RRB- .",
    "Game of Thrones is an American fantasy drama television series.",
    "The series premiered on HBO.",
    "Proteins are large biomolecules.",
]


def _manual_scores(fit_texts: list[str], query: str, cands: list[str], **kw: object) -> np.ndarray:
    vec = TfidfVectorizer(
        tokenizer=tokenize, lowercase=False, token_pattern=None, ngram_range=(1, 2), **kw
    ).fit(fit_texts)
    q = vec.transform([query]).toarray()[0]
    s = vec.transform(cands).toarray()
    out = np.zeros(len(cands))
    for i, row in enumerate(s):
        denom = np.linalg.norm(row) * np.linalg.norm(q)
        out[i] = row @ q / denom if denom else 0.0
    return out


def test_fitted_scores_match_manual_cosine() -> None:
    scorer = TfidfScorer().fit(CORPUS)
    assert scorer.fitted
    query = "Coster-Waldau is a Danish actor in Game of Thrones"
    scores = scorer.score(query, CORPUS)
    assert scores.shape == (len(CORPUS),) and scores.dtype == np.float64
    np.testing.assert_allclose(scores, _manual_scores(CORPUS, query, CORPUS, sublinear_tf=True))
    assert scores[0] == scores.max() and scores[-1] == 0.0


def test_unfitted_scores_fit_on_the_problem() -> None:
    scorer = TfidfScorer(sublinear_tf=False)
    query = "the series premiered on HBO"
    cands = CORPUS[3:]
    scores = scorer.score(query, cands)
    np.testing.assert_allclose(scores, _manual_scores([query, *cands], query, cands))
    assert not scorer.fitted  # the per-problem vectorizer is not kept


def test_ranking_sanity() -> None:
    query = "Danish actor born in Rudkobing"
    cands = [
        "Proteins are large.",
        "The series premiered.",
        "A Danish actor born in Rudkobing.",
        "Danish food.",
    ]
    for scorer in (TfidfScorer(), TfidfScorer().fit(CORPUS + cands)):
        scores = scorer.score(query, cands)
        assert int(np.argmax(scores)) == 2
        assert scores[2] > scores[3] > scores[0] == 0.0


def test_edge_cases() -> None:
    scorer = TfidfScorer()
    assert scorer.score("x", []).shape == (0,)
    np.testing.assert_array_equal(scorer.score("...", ["!!", ""]), [0.0, 0.0])
    fitted = TfidfScorer().fit(CORPUS)
    np.testing.assert_array_equal(fitted.score("zzz qqq", CORPUS[:2]), [0.0, 0.0])
    with pytest.raises(DgnUserError, match="^fit expects a list of texts, got a single string$"):
        TfidfScorer().fit("a single string")
    with pytest.raises(DgnUserError, match="^cannot fit TF-IDF: empty vocabulary"):
        TfidfScorer().fit(["", "..."])
    with pytest.raises(DgnUserError, match="^candidates must be a list of strings, got a single string$"):
        scorer.score("q", "not a list")
    with pytest.raises(DgnUserError, match=r"^ngram_range must be \(lo, hi\) with 1 <= lo <= hi, got \(2, 1\)$"):
        TfidfScorer(ngram_range=(2, 1))
    with pytest.raises(DgnUserError, match=r"^TfidfScorer is not fitted; call fit\(texts\) first$"):
        TfidfScorer().transform(["x"])
