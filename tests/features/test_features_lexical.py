"""Lexical match features and BM25, against hand-computed values and brute-force references."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from dgn.errors import DgnUserError
from dgn.features import LEXICAL_FEATURES as EXPORTED_FEATURES
from dgn.features.lexical import LEXICAL_FEATURES, bm25_scores, fit_idf, lexical_features
from dgn.features.text import tokenize

ATOL = 1e-6  # float32 features against float64 references
BM25_ATOL = 1e-12  # float64 BM25 against the float64 brute force
COL = {name: j for j, name in enumerate(LEXICAL_FEATURES)}


def _bm25_reference(query: list[str], docs: list[list[str]], k1: float, b: float) -> np.ndarray:
    """Lucene BM25 written out term by term (no shared code with the library)."""
    n = len(docs)
    out = np.zeros(n)
    if n == 0:
        return out
    avgdl = sum(len(d) for d in docs) / n
    for i, d in enumerate(docs):
        score = 0.0
        for t in query:  # repeats in the query count again
            df = sum(1 for e in docs if t in e)
            tf = d.count(t)
            if df == 0 or tf == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
        out[i] = score
    return out


def _sklearn_cosine(query: str, cands: list[str]) -> np.ndarray:
    """TF-IDF cosine of sklearn's defaults with the package tokenizer, fitted per problem."""
    vec = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None)
    vec.fit([query, *cands])
    q = vec.transform([query]).toarray()[0]
    s = vec.transform(cands).toarray()
    out = np.zeros(len(cands))
    for i, row in enumerate(s):
        denom = np.linalg.norm(row) * np.linalg.norm(q)
        out[i] = row @ q / denom if denom else 0.0
    return out


# --- BM25 --------------------------------------------------------------------------------


def test_bm25_hand_computed() -> None:
    # docs "a b" and "a", query "b": N = 2, df(b) = 1, avgdl = 1.5, |d0| = 2.
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))  # ln 2
    expected0 = idf * 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * 2 / 1.5))
    scores = bm25_scores("b", ["a b", "a"])
    assert scores.dtype == np.float64 and scores.shape == (2,)
    np.testing.assert_allclose(scores, [expected0, 0.0], rtol=0, atol=BM25_ATOL)
    assert expected0 == pytest.approx(math.log(2) / 2.875)
    # a term twice in the query counts twice
    np.testing.assert_allclose(bm25_scores("b b", ["a b", "a"]), 2 * scores, atol=BM25_ATOL)


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0), (0.0, 0.5)])
def test_bm25_matches_brute_force_on_random_corpora(k1: float, b: float) -> None:
    rng = np.random.default_rng(int(k1 * 100 + b * 10))
    vocab = ["w0", "w1", "w2", "w3", "w4", "w5", "w6"]
    for _ in range(40):
        n = int(rng.integers(1, 9))
        docs = [list(rng.choice(vocab, size=int(rng.integers(0, 8)))) for _ in range(n)]
        query = list(rng.choice(vocab + ["zz"], size=int(rng.integers(0, 5))))
        got = bm25_scores(" ".join(query), [" ".join(d) for d in docs], k1=k1, b=b)
        np.testing.assert_allclose(got, _bm25_reference(query, docs, k1, b), rtol=1e-12, atol=BM25_ATOL)


def test_bm25_uses_the_package_tokenizer() -> None:
    query = "Coster-Waldau -LRB- born 1970 -RRB-"
    cands = ["Nikolaj Coster-Waldau was born in 1970.", "The film -LRB- 2011 -RRB- .", "lrb rrb"]
    expected = _bm25_reference(tokenize(query), [tokenize(c) for c in cands], 1.5, 0.75)
    np.testing.assert_allclose(bm25_scores(query, cands), expected, atol=BM25_ATOL)
    assert bm25_scores(query, cands)[2] == 0.0  # escapes are undone, never the token "lrb"


def test_bm25_edge_cases() -> None:
    assert bm25_scores("x", []).shape == (0,)
    np.testing.assert_array_equal(bm25_scores("", ["a b", "c"]), [0.0, 0.0])
    np.testing.assert_array_equal(bm25_scores("a", ["", "..."]), [0.0, 0.0])
    np.testing.assert_array_equal(bm25_scores("zzz", ["a b", "c"]), [0.0, 0.0])
    with pytest.raises(DgnUserError, match="query must be a str"):
        bm25_scores(3, ["a"])  # type: ignore[arg-type]
    with pytest.raises(DgnUserError, match="single string"):
        bm25_scores("a", "a b")
    with pytest.raises(DgnUserError, match="candidate 1"):
        bm25_scores("a", ["a", None])  # type: ignore[list-item]
    with pytest.raises(DgnUserError, match="k1"):
        bm25_scores("a", ["a"], k1=-1.0)
    with pytest.raises(DgnUserError, match="b must"):
        bm25_scores("a", ["a"], b=1.5)


# --- lexical_features ---------------------------------------------------------------------


def test_feature_names() -> None:
    assert EXPORTED_FEATURES == LEXICAL_FEATURES
    assert len(set(LEXICAL_FEATURES)) == len(LEXICAL_FEATURES) == 8
    assert LEXICAL_FEATURES[:2] == ("tfidf_cosine", "bm25")


def test_every_feature_on_a_hand_computed_example() -> None:
    query = "Paris hosted 1900 Games"
    cands = ["Paris hosted 1900 Games.", "games in Rome", ""]
    X = lexical_features(query, cands)
    assert X.shape == (3, len(LEXICAL_FEATURES)) and X.dtype == np.float32

    # per-problem smooth IDF over 4 documents (claim + 3 candidates)
    a = math.log(5 / 3) + 1  # paris, hosted, 1900: df 2
    g = math.log(5 / 4) + 1  # games: df 3
    r = math.log(5 / 2) + 1  # in, rome: df 1
    tfidf1 = g * g / (math.sqrt(3 * a * a + g * g) * math.sqrt(g * g + 2 * r * r))
    # BM25 over the 3 candidates: lengths 4, 3, 0, avgdl 7/3
    avgdl = 7 / 3
    idf1, idf2 = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5)  # df 1, df 2
    s0 = (3 * idf1 + idf2) / (1 + 1.5 * (0.25 + 0.75 * 4 / avgdl))
    s1 = idf2 / (1 + 1.5 * (0.25 + 0.75 * 3 / avgdl))
    expected = {
        "tfidf_cosine": [1.0, tfidf1, 0.0],
        "bm25": [1.0, s1 / s0, 0.0],
        "bm25_rank_share": [1.0, 0.5, 0.0],
        "idf_claim_coverage": [1.0, g / (3 * a + g), 0.0],
        "number_overlap": [1.0, 0.0, 0.0],
        "capitalised_overlap": [1.0, 1.0, 0.0],  # {"games"}; "Paris" starts the claim
        "position": [0.0, 0.5, 1.0],
        "length": [math.log(5), math.log(4), 0.0],
    }
    assert set(expected) == set(LEXICAL_FEATURES)
    for name, want in expected.items():
        np.testing.assert_allclose(X[:, COL[name]], want, atol=ATOL, err_msg=name)


def test_tfidf_cosine_matches_sklearn_defaults_with_package_tokenizer() -> None:
    query = "Nikolaj Coster-Waldau is a Danish actor born in 1970"
    cands = [
        "Nikolaj Coster-Waldau -LRB- born 27 July 1970 -RRB- is a Danish actor.",
        "He played Jaime Lannister in the HBO series.",
        "Danish actor Danish actor Danish actor.",
        "Proteins are large biomolecules.",
    ]
    X = lexical_features(query, cands)
    np.testing.assert_allclose(X[:, COL["tfidf_cosine"]], _sklearn_cosine(query, cands), atol=ATOL)


def test_bm25_columns_are_normalised_scores_and_ranks() -> None:
    query = "Danish actor born in 1970"
    cands = ["He is an actor.", "A Danish actor born in 1970.", "Proteins.", "Danish food."]
    raw = bm25_scores(query, cands)
    X = lexical_features(query, cands)
    np.testing.assert_allclose(X[:, COL["bm25"]], raw / raw.max(), atol=ATOL)
    # scores: 1 > {0, 3} > 2 = 0; rank share = share of the 3 others scored strictly lower
    lower = [sum(raw[u] < raw[v] for u in range(4)) / 3 for v in range(4)]
    np.testing.assert_allclose(X[:, COL["bm25_rank_share"]], lower, atol=ATOL)
    assert X[1, COL["bm25_rank_share"]] == 1.0 and X[2, COL["bm25_rank_share"]] == 0.0
    # all tied (no match at all): no candidate beats another
    Y = lexical_features("zzz", ["a", "b", "c"])
    np.testing.assert_array_equal(Y[:, COL["bm25"]], 0.0)
    np.testing.assert_array_equal(Y[:, COL["bm25_rank_share"]], 0.0)


@pytest.mark.parametrize(
    "query, cand, expected",
    [
        ("Born in 1970 with 3 kids", "born 1970", 0.5),
        ("Born in 1970 with 3 kids", "3 kids born in 1970", 1.0),
        ("It sold 3.5 million", "3 items", 0.5),  # tokens "3" and "5"
        ("The 1990s band", "in the 1990s", 1.0),  # a token with a digit is a number
        ("The 1990s band", "in the 1990", 0.0),
        ("No numbers here", "1 2 3", 0.0),
        ("The 12 films", "", 0.0),
    ],
)
def test_number_overlap(query: str, cand: str, expected: float) -> None:
    x = lexical_features(query, [cand])[0, COL["number_overlap"]]
    assert x == pytest.approx(expected, abs=ATOL)


@pytest.mark.parametrize(
    "query, cand, expected",
    [
        ("The film stars Tom Hanks and NASA", "tom hanks was in it", 2 / 3),
        ("The film stars Tom Hanks and NASA", "nasa TOM Hanks", 1.0),
        ("The film stars Tom Hanks and NASA", "the film stars", 0.0),  # "The" is the first token
        ("Paris is a city", "Paris is a city", 0.0),  # only a sentence-initial capital
        ("Nikolaj Coster-Waldau acted", "coster waldau", 1.0),  # coster, waldau
        ("A film -LRB- 2011 -RRB- by Nolan", "nolan lrb rrb", 1.0),  # escapes are no tokens
        ("Le film Amélie de Jean-Pierre Jeunet", "Amélie et Jeunet", 0.5),  # 2 of 4
        ("So Quiet Here", "", 0.0),
    ],
)
def test_capitalised_overlap(query: str, cand: str, expected: float) -> None:
    x = lexical_features(query, [cand])[0, COL["capitalised_overlap"]]
    assert x == pytest.approx(expected, abs=ATOL)


def test_given_idf_table() -> None:
    idf = {"a": 1.0, "b": 3.0}  # "c" is unseen: it gets the largest IDF, 3
    X = lexical_features("a b c", ["a c", "b"], idf=idf)
    np.testing.assert_allclose(X[:, COL["idf_claim_coverage"]], [4 / 7, 3 / 7], atol=ATOL)
    # q = (1, 3, 3), c0 = (1, 0, 3), c1 = (0, 3, 0)
    np.testing.assert_allclose(
        X[:, COL["tfidf_cosine"]], [10 / math.sqrt(19 * 10), 9 / math.sqrt(19 * 9)], atol=ATOL
    )
    # fit_idf is sklearn's smooth IDF
    texts = ["a cat", "a dog", "the cat sat"]
    table = fit_idf(texts)
    vec = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None).fit(texts)
    assert table == pytest.approx(dict(zip(vec.get_feature_names_out(), vec.idf_, strict=True)))
    # per-problem IDF == an explicit table fitted on the problem's texts
    query, cands = "the cat sat", ["a cat", "the dog sat down"]
    np.testing.assert_allclose(
        lexical_features(query, cands), lexical_features(query, cands, idf=fit_idf([query, *cands]))
    )


def test_edge_cases() -> None:
    F = len(LEXICAL_FEATURES)
    empty = lexical_features("a claim", [])
    assert empty.shape == (0, F) and empty.dtype == np.float32
    for query, cands in [("", ["", "a b"]), ("...", ["!!", ""]), ("a", [""]), ("", [""])]:
        X = lexical_features(query, cands)
        assert X.shape == (len(cands), F) and np.isfinite(X).all()
        for name in ("tfidf_cosine", "bm25", "idf_claim_coverage", "number_overlap", "capitalised_overlap"):
            np.testing.assert_array_equal(X[:, COL[name]], 0.0, err_msg=name)
    one = lexical_features("cat", ["cat"])
    assert one[0, COL["position"]] == 0.0 and one[0, COL["bm25"]] == 1.0
    assert one[0, COL["bm25_rank_share"]] == 0.0  # no other candidate to beat
    with pytest.raises(DgnUserError, match="query must be a str"):
        lexical_features(None, ["a"])  # type: ignore[arg-type]
    with pytest.raises(DgnUserError, match="single string"):
        lexical_features("a", "a b")
    with pytest.raises(DgnUserError, match="candidate 0"):
        lexical_features("a", [b"bytes"])  # type: ignore[list-item]
    with pytest.raises(DgnUserError, match="idf must be a mapping"):
        lexical_features("a", ["a"], idf=[("a", 1.0)])  # type: ignore[arg-type]
    with pytest.raises(DgnUserError, match="single string"):
        fit_idf("a cat")


def test_random_texts_are_finite_and_in_range() -> None:
    rng = np.random.default_rng(1)
    pieces = ["Paris", "the", "1970", "3.5", "Amélie", "-LRB-", "!", "", "cat", "NASA", "é"]
    for _ in range(30):
        query = " ".join(rng.choice(pieces, size=int(rng.integers(0, 6))))
        cands = [" ".join(rng.choice(pieces, size=int(rng.integers(0, 6)))) for _ in range(int(rng.integers(1, 7)))]
        X = lexical_features(query, cands)
        assert np.isfinite(X).all()
        assert (X[:, : COL["length"]] >= 0).all() and (X[:, : COL["length"]] <= 1 + ATOL).all()


def test_package_import_stays_light() -> None:
    code = (
        "import sys, dgn.features; "
        "bad = [m for m in ('sklearn', 'bm25s') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
