"""Per-candidate lexical (exact-match) features of a claim and its candidate sentences.

Word vectors and sentence encoders blur exactly what decides many evidence choices: the
same name, the same year, the same rare word. These columns measure that exact overlap.
All of them are computed from :func:`~dgn.features.text.tokenize` tokens (lowercase runs
of letters and digits, FEVER escapes undone), except ``capitalised_overlap``, which looks
at the original case. ``T(x)`` below is the set of distinct tokens of text ``x``, ``q`` the
claim, ``s_v`` candidate ``v`` of ``N``.

Columns, in the order of :data:`LEXICAL_FEATURES`:

1. ``tfidf_cosine`` - cosine of the TF-IDF vectors of ``q`` and ``s_v``: unigrams, raw
   term counts ``tf``, weight ``tf * idf(t)``, L2-normalised; in ``[0, 1]``. With the
   per-problem IDF this equals scikit-learn's ``TfidfVectorizer`` defaults (smooth IDF,
   raw tf, unigrams, ``norm="l2"``) with the package tokenizer, fitted on the claim and
   its candidates. Why: the FEVER baseline's score, the strongest single lexical signal.
2. ``bm25`` - Okapi BM25 of ``s_v`` for the query ``q`` (:func:`bm25_scores`, Lucene
   variant, ``k1 = 1.5``, ``b = 0.75``, the candidates as the collection), divided by the
   largest score in the problem (0 for every candidate when that largest score is 0);
   in ``[0, 1]``. Why: BM25 saturates repeated terms and normalises for length, which
   cosine does not; the division makes scales comparable across problems, whose raw
   BM25 ranges depend on N and the sentence lengths.
3. ``bm25_rank_share`` - share of the other candidates whose BM25 score is strictly lower:
   ``|{u != v : bm25(u) < bm25(v)}| / max(1, N - 1)``; 1 for the unique best, 0 for the
   worst and for every candidate of a problem where all scores tie. Why: a rank is
   insensitive to the score's scale and outliers, and ties stay ties.
4. ``idf_claim_coverage`` - IDF-weighted share of the claim's distinct terms present in
   the candidate: ``sum_{t in T(q) & T(s_v)} idf(t) / sum_{t in T(q)} idf(t)``; in
   ``[0, 1]``, 0 when the claim has no token. Why: recall of the claim's content,
   where a shared rare name counts more than a shared "the".
5. ``number_overlap`` - share of the claim's distinct number tokens (tokens with a digit,
   e.g. ``1970``, ``3``, ``1990s``) present in the candidate's tokens; 0 when the claim
   has none. Why: dates, counts and amounts are what many claims are about, and
   mean-pooled vectors barely separate one number from another.
6. ``capitalised_overlap`` - share of the claim's distinct capitalised tokens (first
   character uppercase in the ORIGINAL text, e.g. ``Paris``, ``NASA``; the claim's first
   token is left out because a sentence starts with a capital anyway) whose lowercase
   form is among the candidate's tokens (case-insensitive match); 0 when the claim has
   none. Why: a proxy for named-entity overlap (people, places, titles) with no tagger.
7. ``position`` - ``v / max(1, N - 1)``: 0 for the first candidate, 1 for the last.
   Why: lead sentences of a page carry evidence more often. Only meaningful where the
   order of the candidates is the document order (shuffle lists that put gold last).
8. ``length`` - ``log(1 + |tokens(s_v)|)`` (repeats counted). Why: lets a model learn the
   bias of the overlap scores toward long or short sentences.

IDF: with ``idf=None`` it is per problem, on the ``N + 1`` documents ``[q, s_1..s_N]``, with
scikit-learn's smooth formula ``idf(t) = ln((1 + n) / (1 + df(t))) + 1`` (:func:`fit_idf`).
A corpus IDF (e.g. ``fit_idf`` of the training sentences) may be passed instead; it is used
by ``tfidf_cosine`` and ``idf_claim_coverage``, while BM25 keeps the per-problem collection.

scikit-learn is not needed; ``bm25s`` is imported lazily by :func:`bm25_scores`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dgn.errors import DgnUserError
from dgn.features.text import _token_re, tokenize, unescape_fever

__all__ = ["LEXICAL_FEATURES", "LEXICAL_VERSION", "bm25_scores", "fit_idf", "lexical_features"]

#: Feature names, in column order of :func:`lexical_features` (see the module docstring).
LEXICAL_FEATURES: tuple[str, ...] = (
    "tfidf_cosine",
    "bm25",
    "bm25_rank_share",
    "idf_claim_coverage",
    "number_overlap",
    "capitalised_overlap",
    "position",
    "length",
)

#: Bumped whenever :func:`lexical_features` changes its output; part of feature-cache keys.
LEXICAL_VERSION = 1

# The ASCII fast path of ``tokenize`` without the lowercasing (same tokens, original case).
_ASCII_CASED_TOKEN_RE = re.compile(r"[A-Za-z0-9]+")


def _check_texts(query: object, candidates: object) -> list[str]:
    """Validate ``query`` (str) and ``candidates`` (sequence of str); return the list."""
    if not isinstance(query, str):
        raise DgnUserError(f"query must be a str, got {type(query).__name__}")
    if isinstance(candidates, (str, bytes)):
        raise DgnUserError("candidates must be a list of strings, got a single string")
    if not isinstance(candidates, Iterable):
        raise DgnUserError(
            f"candidates must be a list of strings, got {type(candidates).__name__}"
        )
    out = list(candidates)
    for i, c in enumerate(out):
        if not isinstance(c, str):
            raise DgnUserError(f"candidate {i} must be a str, got {type(c).__name__}")
    return out


def _cased_tokens(text: str) -> list[str]:
    """The tokens of :func:`tokenize` with their original case (lowercasing skipped)."""
    text = unescape_fever(text)
    if text.isascii():
        return _ASCII_CASED_TOKEN_RE.findall(text)
    return _token_re().findall(unicodedata.normalize("NFKC", text))


def _smooth_idf(documents: Sequence[Sequence[str]]) -> dict[str, float]:
    """``ln((1 + n) / (1 + df)) + 1`` for every token of the tokenised ``documents``."""
    n = len(documents)
    df: Counter[str] = Counter()
    for doc in documents:
        df.update(set(doc))
    return {t: math.log((1 + n) / (1 + d)) + 1.0 for t, d in df.items()}


def fit_idf(texts: Iterable[str]) -> dict[str, float]:
    """Smooth IDF of every token of a corpus, as scikit-learn's ``TfidfVectorizer``.

    ``idf(t) = ln((1 + n) / (1 + df(t))) + 1`` with ``n`` texts and ``df(t)`` the number of
    texts holding token ``t`` (:func:`~dgn.features.text.tokenize`).

    Args:
        texts: The corpus (e.g. every claim and sentence of a training file).

    Returns:
        ``{token: idf}``, every value ``>= 1``; pass it as ``idf`` to :func:`lexical_features`.

    Raises:
        DgnUserError: ``texts`` is a single string or holds a non-string.

    Example:
        >>> idf = fit_idf(["a cat", "a dog"])
        >>> round(idf["a"], 3), round(idf["cat"], 3)
        (1.0, 1.405)
    """
    if isinstance(texts, (str, bytes)):
        raise DgnUserError("fit_idf expects a list of texts, got a single string")
    docs = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise DgnUserError(f"text {i} must be a str, got {type(t).__name__}")
        docs.append(tokenize(t))
    return _smooth_idf(docs)


def _bm25_from_tokens(
    query_tokens: Sequence[str], docs: Sequence[Sequence[str]], k1: float, b: float
) -> np.ndarray:
    """BM25 (Lucene) of every tokenised document for the tokenised query, with ``bm25s``."""
    n = len(docs)
    vocab: dict[str, int] = {}
    doc_ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in docs]
    query_ids = [vocab[t] for t in query_tokens if t in vocab]
    if not query_ids:  # no shared term (also: no document has a token, or N = 0)
        return np.zeros(n, dtype=np.float64)
    import bm25s

    model = bm25s.BM25(k1=k1, b=b, method="lucene", idf_method="lucene", dtype="float64")
    model.index((doc_ids, vocab), create_empty_token=False, show_progress=False)
    scores = model.get_scores_from_ids(query_ids)
    return np.asarray(scores, dtype=np.float64)


def bm25_scores(
    query: str, candidates: Sequence[str], k1: float = 1.5, b: float = 0.75
) -> np.ndarray:
    """Okapi BM25 score of each candidate for the query, the candidates as the collection.

    Lucene's variant (Robertson et al., 1994, "Okapi at TREC-3"; as in Lucene's
    ``BM25Similarity`` and Kamphuis et al., 2020, "Which BM25 do you mean?")::

        score(q, d) = sum_{t in q} idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
        idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

    over the claim's tokens with repeats (a term twice in the claim counts twice, as two
    query clauses do in Lucene); ``tf(t, d)`` is the count of ``t`` in ``d``, ``|d|`` its
    number of tokens, ``avgdl`` the mean over the ``N`` candidates and ``df(t)`` the number
    of candidates holding ``t``. The IDF is always positive, so scores are ``>= 0`` and 0
    exactly for a candidate sharing no token with the claim. Tokens come from
    :func:`~dgn.features.text.tokenize`; the scoring is the ``bm25s`` package's
    (``method="lucene"``), in float64.

    Args:
        query: The claim.
        candidates: The candidate sentences (the collection).
        k1: Term-frequency saturation, ``>= 0``.
        b: Length normalisation, in ``[0, 1]``.

    Returns:
        ``(N,)`` float64 scores; all 0 when ``N = 0`` gives ``(0,)``, or when the claim
        shares no token with any candidate.

    Raises:
        DgnUserError: ``query`` is not a str, ``candidates`` not a list of str, or ``k1``
            or ``b`` out of range.

    Example:
        >>> bm25_scores("cat sat", ["the cat sat", "a dog ran", "a cat"]).round(3)
        array([0.549, 0.   , 0.212])
    """
    cands = _check_texts(query, candidates)
    if not (isinstance(k1, (int, float)) and math.isfinite(k1) and k1 >= 0):
        raise DgnUserError(f"k1 must be a finite number >= 0, got {k1!r}")
    if not (isinstance(b, (int, float)) and 0.0 <= b <= 1.0):
        raise DgnUserError(f"b must be a number in [0, 1], got {b!r}")
    return _bm25_from_tokens(tokenize(query), [tokenize(c) for c in cands], float(k1), float(b))


def _share_found(wanted: set[str], found_in: set[str]) -> float:
    """``|wanted & found_in| / |wanted|``, 0 for an empty ``wanted``."""
    return len(wanted & found_in) / len(wanted) if wanted else 0.0


def lexical_features(
    query: str, candidates: Sequence[str], idf: Mapping[str, float] | None = None
) -> np.ndarray:
    """The lexical match features of every candidate (columns: :data:`LEXICAL_FEATURES`).

    See the module docstring for each column's formula. Every value is finite: an empty
    claim or candidate gives 0 in the overlap columns, never NaN.

    Args:
        query: The claim.
        candidates: The candidate sentences, in the problem's order.
        idf: ``{token: idf}`` fitted on a corpus (:func:`fit_idf`), used by
            ``tfidf_cosine`` and ``idf_claim_coverage``; a token missing from it gets the
            largest IDF of the mapping (rarer than anything seen). None: per-problem
            smooth IDF on ``[query, *candidates]``.

    Returns:
        ``(N, F)`` float32 array, ``F = len(LEXICAL_FEATURES)``; ``(0, F)`` when ``N = 0``.

    Raises:
        DgnUserError: ``query`` is not a str, ``candidates`` not a list of str, or ``idf``
            not a mapping.

    Shape:
        - output: ``(N, F)``

    Example:
        >>> X = lexical_features("Paris hosted the 1900 Olympics.",
        ...                      ["Paris is in France.", "The 1900 Summer Olympics were in Paris."])
        >>> X.shape
        (2, 8)
        >>> {n: round(float(x), 3) for n, x in zip(LEXICAL_FEATURES, X[1])}  # doctest: +NORMALIZE_WHITESPACE
        {'tfidf_cosine': 0.55, 'bm25': 1.0, 'bm25_rank_share': 1.0, 'idf_claim_coverage': 0.742,
         'number_overlap': 1.0, 'capitalised_overlap': 1.0, 'position': 1.0, 'length': 2.079}
    """
    cands = _check_texts(query, candidates)
    if idf is not None and not isinstance(idf, Mapping):
        raise DgnUserError(f"idf must be a mapping of token -> idf, got {type(idf).__name__}")
    N, F = len(cands), len(LEXICAL_FEATURES)
    if N == 0:
        return np.zeros((0, F), dtype=np.float32)

    q_tokens = tokenize(query)
    c_tokens = [tokenize(c) for c in cands]
    q_set = set(q_tokens)
    c_sets = [set(t) for t in c_tokens]

    # IDF weights of every token that occurs in this problem.
    if idf is None:
        weight = _smooth_idf([q_tokens, *c_tokens])
    else:
        present = q_set.union(*c_sets)
        missing = [t for t in present if t not in idf]
        unseen = max((float(v) for v in idf.values()), default=1.0) if missing else 0.0
        weight = {t: float(idf[t]) if t in idf else unseen for t in present}

    # tfidf_cosine: raw tf * idf, L2-normalised, unigrams.
    q_vec = {t: c * weight[t] for t, c in Counter(q_tokens).items()}
    q_norm = math.sqrt(sum(w * w for w in q_vec.values()))
    tfidf = np.zeros(N, dtype=np.float64)
    for v, toks in enumerate(c_tokens):
        c_vec = {t: c * weight[t] for t, c in Counter(toks).items()}
        c_norm = math.sqrt(sum(w * w for w in c_vec.values()))
        if q_norm > 0 and c_norm > 0:
            dot = sum(w * q_vec[t] for t, w in c_vec.items() if t in q_vec)
            tfidf[v] = dot / (q_norm * c_norm)

    # bm25 (max-normalised) and bm25_rank_share.
    bm25 = _bm25_from_tokens(q_tokens, c_tokens, 1.5, 0.75)
    top = bm25.max()
    bm25_norm = bm25 / top if top > 0 else np.zeros(N, dtype=np.float64)
    beaten = (bm25[None, :] < bm25[:, None]).sum(axis=1)  # (N,) candidates scored lower
    rank_share = beaten / max(1, N - 1)

    # idf_claim_coverage.
    q_mass = sum(weight[t] for t in q_set)
    coverage = np.array(
        [sum(weight[t] for t in q_set & s) / q_mass if q_mass > 0 else 0.0 for s in c_sets]
    )

    # number_overlap and capitalised_overlap.
    q_numbers = {t for t in q_set if any(ch.isdigit() for ch in t)}
    q_capitals = {t.lower() for t in _cased_tokens(query)[1:] if t[0].isupper()}
    numbers = np.array([_share_found(q_numbers, s) for s in c_sets])
    capitals = np.array([_share_found(q_capitals, s) for s in c_sets])

    columns = {
        "tfidf_cosine": np.clip(tfidf, 0.0, 1.0),
        "bm25": bm25_norm,
        "bm25_rank_share": rank_share,
        "idf_claim_coverage": np.clip(coverage, 0.0, 1.0),
        "number_overlap": numbers,
        "capitalised_overlap": capitals,
        "position": np.arange(N) / max(1, N - 1),
        "length": np.log1p([len(t) for t in c_tokens]),
    }
    out = np.stack([np.asarray(columns[name], dtype=np.float64) for name in LEXICAL_FEATURES], 1)
    return out.astype(np.float32)  # (N, F)
