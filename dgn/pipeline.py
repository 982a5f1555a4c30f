"""From selection JSONL files to model inputs: featurizing, caching and batching.

A :class:`Featurizer` turns each problem into features from a set of blocks (the paper's
``X[v] = q * s_v`` from mean-pooled word vectors, Powers et al. 2018, sec. 4; lexical
match scores; a pretrained sentence encoder), standardised per column with statistics of
the training set. Features live in an on-disk, memory-mapped cache
(:class:`dgn.features.FeatureCache`) keyed by the data file's content and the featurizer
settings, and :class:`SelectionDataset` streams padded batches from it, so nothing needs
a whole dataset in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dgn._paths import default_cache_dir
from dgn.errors import DgnUserError

__all__ = [
    "ProblemInfo",
    "Featurizer",
    "SelectionDataset",
    "Batch",
    "read_infos",
    "default_cache_dir",
    "featurizer_for_model",
    "pad_features",
    "FEATURIZER_KINDS",
]


@dataclass(frozen=True)
class ProblemInfo:
    """What training and evaluation need of a problem besides its features."""

    id: str
    num_candidates: int
    gold: list[list[int]]
    relevance: list[float] | None


def read_infos(path: str | os.PathLike[str]) -> list[ProblemInfo]:
    """Read ids, sizes and labels of every problem of a selection JSONL file (no texts)."""
    from dgn.data import read_problems

    return [
        ProblemInfo(p.id, len(p.candidates), [list(g) for g in p.gold], p.relevance)
        for p in read_problems(path)
    ]


class _Concat:
    """Per-problem concatenation of several memory-mapped feature blocks (read on access)."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)
        sizes = {len(p) for p in self.parts}
        if len(sizes) > 1:
            raise DgnUserError(f"feature blocks disagree on the number of problems: {sorted(sizes)}")

    def __len__(self) -> int:
        return len(self.parts[0])

    def __getitem__(self, i: int) -> np.ndarray:
        if len(self.parts) == 1:
            return self.parts[0][i]  # type: ignore[no-any-return]
        return np.concatenate([np.asarray(p[i], dtype=np.float32) for p in self.parts], axis=1)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


class Featurizer:
    """Claim-sentence features from a set of feature blocks, standardised per column.

    The blocks (:mod:`dgn.features.family`) are ``wordvec`` (the paper's ``q * s_v`` from
    word vectors), ``lexical`` (exact-match scores) and ``sentence`` (a pretrained sentence
    encoder); their columns are concatenated in the order given.

    Args:
        vectors_path: A fastText ``.vec`` / ``.vec.gz`` text file or ``.bin`` model
            (needed by ``wordvec`` only).
        features: Block names, e.g. ``("sentence", "lexical")`` (default: ``("wordvec",)``,
            the paper's features).
        encoder_model: The ``sentence`` block's encoder (default all-MiniLM-L6-v2).
        expected_dim: Reject word vectors of another dimension.
        cache_dir: Where feature caches live (default :func:`default_cache_dir`).
        mean: Per-column mean to subtract (set by :meth:`fit_scaler` or a checkpoint).
        std: Per-column standard deviation to divide by.
    """

    def __init__(
        self,
        vectors_path: str | os.PathLike[str] | None = None,
        *,
        features: Sequence[str] = ("wordvec",),
        encoder_model: str | os.PathLike[str] | None = None,
        expected_dim: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        progress: bool = True,
    ) -> None:
        from dgn.features.family import (
            LexicalBlock,
            SentenceBlock,
            WordvecBlock,
            parse_feature_names,
        )

        self.features = parse_feature_names(list(features))
        self.vectors_path = None if vectors_path is None else Path(vectors_path)
        self.vectors: Any = None
        self.encoder_model = None if encoder_model is None else str(encoder_model)
        self.blocks: list[Any] = []
        for name in self.features:
            if name == "wordvec":
                if self.vectors_path is None:
                    raise DgnUserError("the wordvec features need word vectors: pass --vectors PATH")
                from dgn.features import WordVectors

                self.vectors = WordVectors.load(self.vectors_path, expected_dim=expected_dim)
                self.blocks.append(WordvecBlock(self.vectors))
            elif name == "lexical":
                self.blocks.append(LexicalBlock())
            else:
                self.blocks.append(SentenceBlock(self.encoder_model))
        self.dim = sum(b.dim for b in self.blocks)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.progress = progress
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float32)
        self.std = None if std is None else np.asarray(std, dtype=np.float32)
        for name, arr in (("mean", self.mean), ("std", self.std)):
            if arr is not None and arr.shape != (self.dim,):
                raise DgnUserError(
                    f"featurizer {name} has {arr.shape[0]} values but the features have dimension {self.dim}"
                )

    def cache_settings(self) -> dict[str, Any]:
        """Settings that identify the raw (unstandardised) features, block by block."""
        return {b.name: b.cache_settings() for b in self.blocks}

    def columns(self) -> list[str]:
        """The name of every column, in order."""
        return [c for b in self.blocks for c in b.columns()]

    def raw(self, data_path: str | os.PathLike[str]) -> Any:
        """The raw features of every problem of ``data_path``: each block memory-mapped from its cache."""
        from dgn.data import read_problems
        from dgn.features import FeatureCache

        cache = FeatureCache(self.cache_dir)
        parts = []
        for block in self.blocks:

            def build(block: Any = block) -> Iterator[tuple[str, np.ndarray]]:
                # Streams: a block sees the problems in chunks, never the whole file at once.
                from itertools import islice

                problems = iter(read_problems(data_path))
                while chunk := list(islice(problems, _BUILD_CHUNK)):
                    for p, x in zip(chunk, block.build(chunk, self.progress), strict=True):
                        yield p.id, x

            parts.append(cache.get_or_build(data_path, block.cache_settings(), build, progress=self.progress))
        return _Concat(parts)

    def problem_features(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        """The raw ``(N, F)`` features of one problem, computed directly (no cache)."""
        from types import SimpleNamespace

        problem = SimpleNamespace(query=query, candidates=list(candidates))
        parts = [next(iter(b.build([problem], False))) for b in self.blocks]
        return np.concatenate([np.asarray(x, dtype=np.float32) for x in parts], axis=1)

    def fit_scaler(self, data_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> None:
        """Set the per-column mean and std from the raw features of ``data_path`` (one file or several)."""
        paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
        total = np.zeros(self.dim, dtype=np.float64)
        sq = np.zeros(self.dim, dtype=np.float64)
        count = 0
        for path in paths:
            for x in self.raw(path):
                x64 = np.asarray(x, dtype=np.float64)
                total += x64.sum(0)
                sq += (x64 * x64).sum(0)
                count += x64.shape[0]
        if count == 0:
            raise DgnUserError(f"{paths[0]}: no candidates to fit the feature scaler on")
        mean = total / count
        var = np.maximum(sq / count - mean * mean, 0.0)
        self.mean = mean.astype(np.float32)
        self.std = np.sqrt(var + 1e-12).astype(np.float32)
        self.std[self.std < 1e-8] = 1.0

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardise raw features (identity before :meth:`fit_scaler`)."""
        if self.mean is None or self.std is None:
            return np.asarray(x, dtype=np.float32)
        return ((np.asarray(x, dtype=np.float32) - self.mean) / self.std).astype(np.float32)

    def describe(self) -> str:
        """``"sentence (769) + lexical (8) = 777 features"``."""
        return " + ".join(f"{b.name} ({b.dim})" for b in self.blocks) + f" = {self.dim} features"

    def settings(self) -> dict[str, Any]:
        """Everything needed to featurize again exactly as now (stored in checkpoints)."""
        return {
            "kind": "feature_set",
            "features": list(self.features),
            "vectors": None if self.vectors_path is None else str(self.vectors_path.resolve()),
            "encoder_model": self.encoder_model,
            "wordvec_dim": None if self.vectors is None else int(self.vectors.dim),
            "dim": self.dim,
            "cache": self.cache_settings(),
            "mean": None if self.mean is None else [float(v) for v in self.mean],
            "std": None if self.std is None else [float(v) for v in self.std],
        }

    @classmethod
    def from_settings(
        cls,
        settings: dict[str, Any],
        *,
        vectors_path: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        progress: bool = True,
    ) -> Featurizer:
        """Rebuild the featurizer a checkpoint recorded (optionally with moved vectors).

        Reads ``"feature_set"`` settings and the ``"word_vectors_product"`` settings of
        checkpoints written before feature sets existed (``wordvec`` alone).
        """
        kind = settings.get("kind") if isinstance(settings, dict) else None
        if kind not in FEATURIZER_KINDS:
            raise DgnUserError("checkpoint has no featurizer settings (field 'extra.featurizer')")
        features = ["wordvec"] if kind == "word_vectors_product" else settings.get("features") or []
        path = vectors_path if vectors_path is not None else settings.get("vectors")
        if "wordvec" in features:
            if not path:
                raise DgnUserError("checkpoint records no vectors file: pass --vectors")
            if not Path(path).exists():
                raise DgnUserError(
                    f"vectors file {path} recorded in the checkpoint does not exist: pass --vectors PATH"
                )
        wordvec_dim = settings.get("dim") if kind == "word_vectors_product" else settings.get("wordvec_dim")
        return cls(
            path if "wordvec" in features else None,
            features=features,
            encoder_model=settings.get("encoder_model"),
            expected_dim=wordvec_dim,
            cache_dir=cache_dir,
            mean=settings.get("mean"),
            std=settings.get("std"),
            progress=progress,
        )


#: Problems a feature block builds at a time (bounds memory on FEVER-size files).
_BUILD_CHUNK = 4096
#: Featurizer settings kinds a checkpoint may record.
FEATURIZER_KINDS = ("feature_set", "word_vectors_product")


@dataclass
class Batch:
    """A padded batch.

    Attributes:
        features: ``(B, N, F)`` float32, zero on padding.
        mask: ``(B, N)`` bool, True for real candidates.
        gold: ``(B, N)`` bool, True for candidates in any gold set.
        relevance: ``(B, N)`` float graded relevance (binary gold if none is given).
        index: ``(B,)`` positions of the problems in the dataset.
    """

    features: Tensor
    mask: Tensor
    gold: Tensor
    relevance: Tensor
    index: Tensor


def pad_features(features: Sequence[np.ndarray], dim: int) -> tuple[Tensor, Tensor]:
    """Pad per-problem ``(N_i, F)`` feature arrays into one batch.

    Args:
        features: One ``(N_i, F)`` array per problem (``F == dim``).
        dim: F (the width of a batch of no problems or only empty ones).

    Returns:
        ``(X, mask)``: ``X (B, N, F)`` float32, zero on padding, and ``mask (B, N)`` bool,
        True for real candidates, with ``N = max N_i``.
    """
    n_max = max((f.shape[0] for f in features), default=0)
    X = np.zeros((len(features), n_max, dim), dtype=np.float32)
    mask = np.zeros((len(features), n_max), dtype=bool)
    for b, f in enumerate(features):
        X[b, : f.shape[0]] = f
        mask[b, : f.shape[0]] = True
    return torch.from_numpy(X), torch.from_numpy(mask)


class SelectionDataset:
    """Problems of one file with their (standardised) features, batched on demand.

    Args:
        data_path: A selection JSONL file.
        featurizer: The :class:`Featurizer` (its raw features are cached on disk).
        max_candidates: Cap training problems at this many candidates: every gold one
            plus seeded random negatives (:meth:`training_candidates`); evaluation always
            uses every candidate.
    """

    def __init__(
        self,
        data_path: str | os.PathLike[str],
        featurizer: Featurizer,
        max_candidates: int | None = None,
    ) -> None:
        self.path = Path(data_path)
        self.featurizer = featurizer
        self.infos = read_infos(self.path)
        self.raw = featurizer.raw(self.path)
        if len(self.raw) != len(self.infos):
            raise DgnUserError(f"{self.path}: feature cache does not match the file; delete {featurizer.cache_dir}")
        self.max_candidates = max_candidates

    def __len__(self) -> int:
        return len(self.infos)

    def features(self, i: int) -> np.ndarray:
        """``(N_i, F)`` standardised features of problem ``i``."""
        return self.featurizer.transform(self.raw[i])

    def training_candidates(self, i: int) -> np.ndarray:
        """The candidates of problem ``i`` a training batch keeps under ``max_candidates``.

        Every gold candidate, plus negatives drawn without replacement (seeded by the
        problem's position, so every epoch and a resumed run see the same ones) up to
        ``max_candidates`` in all, in the file's order. All candidates when the problem has
        no more than ``max_candidates``.
        """
        n = self.infos[i].num_candidates
        if self.max_candidates is None or n <= self.max_candidates:
            return np.arange(n)
        gold = sorted({v for g in self.infos[i].gold for v in g if v < n})
        negatives = np.setdiff1d(np.arange(n), np.asarray(gold, dtype=np.int64))
        room = max(0, self.max_candidates - len(gold))
        drawn = np.random.default_rng(i).choice(negatives, size=min(room, len(negatives)), replace=False)
        return np.sort(np.concatenate([np.asarray(gold, dtype=np.int64), drawn]))

    def batch(self, indices: Sequence[int], truncate: bool = False) -> Batch:
        """Pad the problems ``indices`` into one :class:`Batch`.

        ``truncate`` keeps only :meth:`training_candidates` of each problem (training).
        """
        keeps = [
            self.training_candidates(i) if truncate else np.arange(self.infos[i].num_candidates) for i in indices
        ]
        feats = [self.features(i)[keep] if truncate else self.features(i) for i, keep in zip(indices, keeps, strict=True)]
        X, mask = pad_features(feats, self.featurizer.dim)
        B, n_max = mask.shape
        gold = np.zeros((B, n_max), dtype=bool)
        rel = np.zeros((B, n_max), dtype=np.float32)
        for b, (i, f, keep) in enumerate(zip(indices, feats, keeps, strict=True)):
            n = f.shape[0]
            info = self.infos[i]
            gold_items = {v for group in info.gold for v in group}
            gold[b, :n] = [int(v) in gold_items for v in keep]
            if info.relevance is not None:
                rel[b, :n] = np.asarray(info.relevance, dtype=np.float32)[keep]
            else:
                rel[b, :n] = gold[b, :n]
        return Batch(
            X,
            mask,
            torch.from_numpy(gold),
            torch.from_numpy(rel),
            torch.as_tensor(list(indices), dtype=torch.long),
        )

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        truncate: bool = False,
        only_with_gold: bool = False,
    ) -> Iterator[Batch]:
        """Iterate over padded batches (optionally in a seeded random order)."""
        for indices in self.batch_indices(batch_size, shuffle=shuffle, generator=generator,
                                          only_with_gold=only_with_gold):
            yield self.batch(indices, truncate=truncate)

    def batch_indices(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        only_with_gold: bool = False,
    ) -> Iterator[list[int]]:
        """The problem indices of each batch of :meth:`batches`, in the same order."""
        order = list(range(len(self)))
        if only_with_gold:
            order = [i for i in order if any(self.infos[i].gold)]
        if shuffle:
            perm = torch.randperm(len(order), generator=generator).tolist()
            order = [order[j] for j in perm]
        for start in range(0, len(order), batch_size):
            yield order[start : start + batch_size]


#: Featurizer kinds a checkpoint may record (``extra.featurizer.kind``).
FEATURIZER_KINDS = ("feature_set", "word_vectors_product")


def featurizer_for_model(
    model: Any,
    model_dir: str | os.PathLike[str],
    *,
    vectors: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> Featurizer:
    """The featurizer a checkpoint records (``extra.featurizer``), as :func:`dgn.train.train_from_files`
    set it up, so that new data is featurized exactly as the training data was.

    Args:
        model: The loaded model (:func:`dgn.model.load_model`).
        model_dir: Its directory (for messages, and for ``vectors.bin`` where ``dgn train``
            trained fastText vectors into it and the directory has moved since).
        vectors: The word vectors, where they are no longer at the recorded path.
        cache_dir: The feature cache (default :func:`default_cache_dir`).

    Raises:
        DgnUserError: No featurizer recorded, an unknown kind, a vectors file that is
            missing, or features whose width is not the model's ``in_features``.
    """
    from dgn._paths import require_file
    from dgn.errors import DataError

    settings = (getattr(model, "extra", None) or {}).get("featurizer")
    if settings is None:
        raise DgnUserError(
            f"{model_dir}: the checkpoint records no featurizer (field 'extra.featurizer'); "
            "was it written by `dgn train`?"
        )
    if not isinstance(settings, dict):
        raise DgnUserError(
            f"{model_dir}: field 'extra.featurizer': expected an object, got {type(settings).__name__}"
        )
    kind = settings.get("kind")
    if kind not in FEATURIZER_KINDS:
        raise DgnUserError(
            f"{model_dir}: field 'extra.featurizer.kind': unknown featurizer {kind!r}; "
            f"this dgn knows {', '.join(FEATURIZER_KINDS)}"
        )
    uses_vectors = kind == "word_vectors_product" or "wordvec" in (settings.get("features") or [])
    if uses_vectors:
        if vectors is not None:
            require_file(vectors, "--vectors")
        else:
            # A model directory moved together with the vectors `dgn train` trained into it.
            recorded, local = settings.get("vectors"), Path(model_dir) / "vectors.bin"
            if recorded and not Path(recorded).exists() and local.is_file():
                vectors = str(local)
            elif not recorded or not isinstance(recorded, str):
                raise DgnUserError(
                    f"{model_dir}: field 'extra.featurizer.vectors': no vectors file recorded; "
                    "pass --vectors PATH"
                )
            elif not Path(recorded).is_file():
                raise DgnUserError(
                    f"{model_dir}: the vectors file {recorded} recorded in the checkpoint is "
                    "missing; pass --vectors PATH"
                )
    try:
        featurizer = Featurizer.from_settings(
            settings, vectors_path=vectors, cache_dir=cache_dir, progress=progress
        )
    except DataError:
        raise  # names its file (the vectors) already
    except DgnUserError as exc:  # a bad recorded setting (dim, mean, std)
        raise DgnUserError(f"{model_dir}: field 'extra.featurizer': {exc}") from None
    expected = model.config["in_features"] if isinstance(model.config, dict) else model.config.in_features
    if featurizer.dim != expected:
        raise DgnUserError(
            f"the features ({featurizer.describe()}"
            + (f", vectors file {featurizer.vectors_path}" if featurizer.vectors_path else "")
            + f") do not match the model in {model_dir}, which expects {expected}"
        )
    return featurizer
