"""Text features: tokenisation, word vectors, claim-sentence features, TF-IDF, feature cache.

Importing this package is light (the standard library and numpy); ``fasttext``,
scikit-learn and tqdm are imported inside the functions that use them.

Main entry points:

* :func:`tokenize` - the one tokenizer every feature uses.
* :class:`WordVectors` - fastText ``.vec``/``.vec.gz``/``.bin`` vectors; :func:`embed_texts`
  (mean pooling); :func:`train_fasttext_vectors`.
* :func:`claim_sentence_features` - the paper's ``X[v] = q * s_v``; :func:`cosine_scores`
  (word-embedding cosine baseline).
* :class:`TfidfScorer` - TF-IDF cosine baseline.
* :func:`lexical_features` - per-candidate exact-match features (:data:`LEXICAL_FEATURES`:
  TF-IDF cosine, BM25, claim-term coverage, number and capitalised-token overlap, ...);
  :func:`bm25_scores` (Okapi BM25, ``bm25s`` imported lazily); :func:`fit_idf`.
* :class:`FeatureCache` / :class:`CachedFeatures` - memory-mapped on-disk features.
"""

from __future__ import annotations

from dgn.features.cache import CachedFeatures, FeatureCache, file_sha256
from dgn.features.lexical import LEXICAL_FEATURES, bm25_scores, fit_idf, lexical_features
from dgn.features.pairwise import (
    claim_sentence_features,
    cosine_scores,
    featurizer_settings,
    iter_claim_sentence_features,
)
from dgn.features.text import TOKENIZER_VERSION, tokenize, unescape_fever
from dgn.features.tfidf import TfidfScorer
from dgn.features.vectors import WordVectors, embed_texts, train_fasttext_vectors

__all__ = [
    "LEXICAL_FEATURES",
    "TOKENIZER_VERSION",
    "CachedFeatures",
    "FeatureCache",
    "TfidfScorer",
    "WordVectors",
    "bm25_scores",
    "claim_sentence_features",
    "cosine_scores",
    "embed_texts",
    "featurizer_settings",
    "file_sha256",
    "fit_idf",
    "iter_claim_sentence_features",
    "lexical_features",
    "tokenize",
    "train_fasttext_vectors",
    "unescape_fever",
]
