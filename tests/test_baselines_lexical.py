"""BM25 rankings and the TF-IDF configurations chosen on a dev set."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from dgn.baselines import (
    TFIDF_CONFIGS,
    bm25_rankings,
    select_tfidf_config,
    tfidf_rankings_config,
)
from dgn.data import Problem
from dgn.errors import DgnUserError
from dgn.features.lexical import bm25_scores
from dgn.features.text import tokenize

SCORE_TOL = 1e-12

DEV = [
    Problem("d1", "The Eiffel Tower is in Paris", [
        "The tower is tall and the tower is old and the tower is the tower.",
        "Paris hosts the Eiffel Tower.",
        "The museum is in Paris, the capital.",
        "Towers in Paris are rare.",
    ], [[1]]),
    Problem("d2", "Nolan directed Inception in 2010", [
        "Inception is a 2010 film.",
        "It was directed by Christopher Nolan.",
        "The film was directed in a studio.",
        "Nolan was born in London.",
    ], [[0, 1]]),
    Problem("d3", "A cat sat on a mat", [
        "A dog sat on a log.",
        "The cat was on the mat.",
        "a a a a a a",
        "Mats are sold here.",
    ], [[1]]),
    Problem("d4", "Danish actor Coster-Waldau starred in Game of Thrones", [
        "Game of Thrones is an HBO series.",
        "Nikolaj Coster-Waldau is a Danish actor.",
        "He starred in a Danish film.",
        "Thrones of games are a board game.",
        "The actor is tall.",
    ], [[1, 0], [2]]),
    Problem("d5", "New York City is the most populous city", [
        "York is a city in England.",
        "New York City has the largest population in the United States.",
        "The city of New York is most populous.",
        "City life is new.",
    ], [[2]]),
    Problem("d6", "A problem without gold", ["a", "b"], []),
]
CORPUS = [t for p in DEV for t in (p.query, *p.candidates)] + [
    "The tower, the city, the film, the actor.",
    "Paris Paris Paris city",
    "the the the a a a",
    "game game game series",
    "Danish Danish film",
    "New city new town",
]


# --- independent references ---------------------------------------------------------------


def _reference_vectorizer(name: str) -> TfidfVectorizer:
    if name == "sklearn-defaults-per-problem":
        return TfidfVectorizer()
    idf, ngrams, tf = name.split(",")
    lo, hi = (int(x) for x in ngrams.split("-"))
    return TfidfVectorizer(
        tokenizer=tokenize,
        lowercase=False,
        token_pattern=None,
        ngram_range=(lo, hi),
        sublinear_tf={"raw-tf": False, "sublinear-tf": True}[tf],
    )


def _reference_rankings(name: str, problems: list[Problem], k: int) -> list[list[int]]:
    corpus_vec = None if name.startswith("per-problem") or name.startswith("sklearn") else (
        _reference_vectorizer(name).fit(CORPUS)
    )
    out = []
    for p in problems:
        vec = corpus_vec or _reference_vectorizer(name).fit([p.query, *p.candidates])
        q = vec.transform([p.query]).toarray()[0]
        s = vec.transform(p.candidates).toarray()
        scores = [float(row @ q) for row in s]  # rows are L2-normalised
        out.append(sorted(range(len(scores)), key=lambda i: (-round(scores[i], 12), i))[:k])
    return out


def _mean_recall(rankings: list[list[int]], problems: list[Problem], ks: tuple[int, ...]) -> float:
    per_k = []
    for k in ks:
        values = [
            max(len(set(g) & set(r[:k])) / len(g) for g in p.gold)
            for r, p in zip(rankings, problems, strict=True)
            if p.gold
        ]
        per_k.append(sum(values) / len(values))
    return sum(per_k) / len(per_k)


# --- BM25 ---------------------------------------------------------------------------------


def test_bm25_rankings_put_the_exact_match_first() -> None:
    problems = [
        Problem("a", "Nolan directed Inception", [
            "Inception is a film.", "Nolan directed Inception", "Nolan was born in London."
        ], [[1]]),
        Problem("b", "the cat sat", ["a dog", "the cat sat", "the cat", "cat"], [[1]]),
        Problem("c", "zzz", ["a", "b", "c"], [[2]]),  # no match: ties go to the lowest index
    ]
    assert bm25_rankings(problems, 1) == [[1], [1], [0]]
    rankings = bm25_rankings(problems, 3, k1=0.9, b=0.4)
    assert rankings[2] == [0, 1, 2]
    for p, r in zip(problems, rankings, strict=True):
        scores = bm25_scores(p.query, p.candidates, 0.9, 0.4)
        assert r == sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:3]


# --- TF-IDF configurations ----------------------------------------------------------------


def test_the_nine_configurations() -> None:
    assert len(TFIDF_CONFIGS) == 9
    for idf in ("per-problem", "corpus"):
        for ngrams, rng in (("1-1", (1, 1)), ("1-2", (1, 2))):
            for tf, sub in (("raw-tf", False), ("sublinear-tf", True)):
                c = TFIDF_CONFIGS[f"{idf},{ngrams},{tf}"]
                assert (c.idf, c.ngram_range, c.sublinear_tf, c.sklearn_defaults) == (idf, rng, sub, False)
    assert TFIDF_CONFIGS["sklearn-defaults-per-problem"].sklearn_defaults


@pytest.mark.parametrize("name", list(TFIDF_CONFIGS))
def test_config_rankings_match_a_direct_vectorizer(name: str) -> None:
    problems = DEV[:5]
    assert tfidf_rankings_config(problems, 4, name, CORPUS) == _reference_rankings(name, problems, 4)


def test_sklearn_defaults_tokenise_differently() -> None:
    # TfidfVectorizer() keeps "lrb"/"rrb" and drops one-character tokens; the package does not.
    p = Problem("x", "a b film -LRB- 2011 -RRB-", ["-LRB- -RRB- noise", "a b", "film"], [[2]])
    assert tfidf_rankings_config([p], 3, "sklearn-defaults-per-problem") == [[0, 2, 1]]
    assert tfidf_rankings_config([p], 3, "per-problem,1-1,raw-tf")[0][0] != 0


def test_select_picks_the_best_config_by_direct_evaluation() -> None:
    ks = (1, 3, 5, 7)
    best, scores = select_tfidf_config(DEV, CORPUS, ks=ks)
    assert set(scores) == set(TFIDF_CONFIGS)
    direct = {n: _mean_recall(_reference_rankings(n, DEV, max(ks)), DEV, ks) for n in TFIDF_CONFIGS}
    for n in TFIDF_CONFIGS:
        assert scores[n] == pytest.approx(direct[n], abs=SCORE_TOL), n
    top = max(direct.values())
    assert best == next(n for n in TFIDF_CONFIGS if direct[n] == top)
    assert len(set(np.round(list(direct.values()), 9))) > 1  # the dev set does discriminate
    assert best == "corpus,1-1,sublinear-tf"  # the unique best on this dev set


def test_select_without_a_corpus_skips_corpus_configs() -> None:
    best, scores = select_tfidf_config(DEV, None, ks=(1, 3))
    assert set(scores) == {n for n in TFIDF_CONFIGS if not n.startswith("corpus")}
    direct = {n: _mean_recall(_reference_rankings(n, DEV, 3), DEV, (1, 3)) for n in scores}
    assert scores == pytest.approx(direct, abs=SCORE_TOL)
    assert best == max(scores, key=lambda n: scores[n])


def test_errors() -> None:
    with pytest.raises(DgnUserError, match="unknown TF-IDF configuration"):
        tfidf_rankings_config(DEV, 1, "bm25")
    with pytest.raises(DgnUserError, match="needs fit_texts"):
        tfidf_rankings_config(DEV, 1, "corpus,1-1,raw-tf")
    with pytest.raises(DgnUserError, match="no dev problem has gold"):
        select_tfidf_config(DEV[5:], CORPUS)
    with pytest.raises(DgnUserError, match="at least one cutoff"):
        select_tfidf_config(DEV, CORPUS, ks=())
