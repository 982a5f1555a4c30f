"""The sentence encoder's loading and encoding, kept under its old name.

The code is :mod:`dgn.features.sentence` (a feature source, beside the word vectors and
the lexical features); this module re-exports it so that ``from dgn.sentence.encoder
import ...`` keeps working.
"""

from __future__ import annotations

from dgn.features.sentence import (
    DEFAULT_MAX_SEQ_LENGTH,
    DEFAULT_MODEL,
    embed,
    embedding_dim,
    encode_texts,
    load_sentence_model,
    pair_features,
    resolve_model_path,
)

__all__ = [
    "DEFAULT_MAX_SEQ_LENGTH",
    "DEFAULT_MODEL",
    "embed",
    "embedding_dim",
    "encode_texts",
    "load_sentence_model",
    "pair_features",
    "resolve_model_path",
]
