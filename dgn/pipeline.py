"""From selection JSONL files to model inputs: featurizing, caching and batching.

A :class:`Featurizer` turns each problem into the paper's ``X[v] = q * s_v`` (mean-pooled
word vectors, Powers et al. 2018, sec. 4), standardised per dimension with statistics of
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

from dgn.errors import DgnUserError

__all__ = [
    "ProblemInfo",
    "Featurizer",
    "SelectionDataset",
    "Batch",
    "read_infos",
    "default_cache_dir",
]


def default_cache_dir() -> Path:
    """``$DGN_CACHE_DIR``, else ``~/.cache/dgn``."""
    env = os.environ.get("DGN_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dgn"


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


class Featurizer:
    """Claim-sentence features ``X[v] = q * s_v`` from word vectors, standardised.

    Args:
        vectors_path: A fastText ``.vec`` / ``.vec.gz`` text file or ``.bin`` model.
        expected_dim: Reject vectors of another dimension (e.g. a model's ``in_features``).
        cache_dir: Where feature caches live (default :func:`default_cache_dir`).
        mean: Per-dimension mean to subtract (set by :meth:`fit_scaler` or a checkpoint).
        std: Per-dimension standard deviation to divide by.
    """

    def __init__(
        self,
        vectors_path: str | os.PathLike[str],
        *,
        expected_dim: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        progress: bool = True,
    ) -> None:
        from dgn.features import WordVectors

        self.vectors_path = Path(vectors_path)
        self.vectors = WordVectors.load(self.vectors_path, expected_dim=expected_dim)
        self.dim = self.vectors.dim
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.progress = progress
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float32)
        self.std = None if std is None else np.asarray(std, dtype=np.float32)
        for name, arr in (("mean", self.mean), ("std", self.std)):
            if arr is not None and arr.shape != (self.dim,):
                raise DgnUserError(
                    f"featurizer {name} has {arr.shape[0]} values but the vectors have dimension {self.dim}"
                )

    def cache_settings(self) -> dict[str, Any]:
        """Settings that identify the raw (unstandardised) features in the cache."""
        from dgn.features import featurizer_settings

        return featurizer_settings(self.vectors)

    def raw(self, data_path: str | os.PathLike[str]) -> Any:
        """The memory-mapped raw features of every problem of ``data_path`` (cached)."""
        from dgn.data import read_problems
        from dgn.features import FeatureCache, claim_sentence_features

        def build() -> Iterator[tuple[str, np.ndarray]]:
            for p in read_problems(data_path):
                yield p.id, claim_sentence_features(p.query, p.candidates, self.vectors)

        cache = FeatureCache(self.cache_dir)
        return cache.get_or_build(data_path, self.cache_settings(), build, progress=self.progress)

    def fit_scaler(self, data_path: str | os.PathLike[str]) -> None:
        """Set the per-dimension mean and std from the raw features of ``data_path``."""
        raw = self.raw(data_path)
        total = np.zeros(self.dim, dtype=np.float64)
        sq = np.zeros(self.dim, dtype=np.float64)
        count = 0
        for x in raw:
            x64 = np.asarray(x, dtype=np.float64)
            total += x64.sum(0)
            sq += (x64 * x64).sum(0)
            count += x64.shape[0]
        if count == 0:
            raise DgnUserError(f"{data_path}: no candidates to fit the feature scaler on")
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

    def settings(self) -> dict[str, Any]:
        """Everything needed to featurize again exactly as now (stored in checkpoints)."""
        return {
            "kind": "word_vectors_product",
            "vectors": str(self.vectors_path.resolve()),
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
        """Rebuild the featurizer a checkpoint recorded (optionally with moved vectors)."""
        if not isinstance(settings, dict) or settings.get("kind") != "word_vectors_product":
            raise DgnUserError("checkpoint has no featurizer settings (field 'extra.featurizer')")
        path = vectors_path if vectors_path is not None else settings.get("vectors")
        if not path:
            raise DgnUserError("checkpoint records no vectors file: pass --vectors")
        if not Path(path).exists():
            raise DgnUserError(
                f"vectors file {path} recorded in the checkpoint does not exist: pass --vectors PATH"
            )
        return cls(
            path,
            expected_dim=settings.get("dim"),
            cache_dir=cache_dir,
            mean=settings.get("mean"),
            std=settings.get("std"),
            progress=progress,
        )


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


class SelectionDataset:
    """Problems of one file with their (standardised) features, batched on demand.

    Args:
        data_path: A selection JSONL file.
        featurizer: The :class:`Featurizer` (its raw features are cached on disk).
        max_candidates: Truncate problems to this many candidates when batching for
            training (the file's order is already shuffled at conversion time);
            evaluation always uses every candidate.
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

    def batch(self, indices: Sequence[int], truncate: bool = False) -> Batch:
        """Pad the problems ``indices`` into one :class:`Batch`."""
        feats = [self.features(i) for i in indices]
        if truncate and self.max_candidates is not None:
            feats = [f[: self.max_candidates] for f in feats]
        n_max = max((f.shape[0] for f in feats), default=0)
        B, F = len(indices), self.featurizer.dim
        X = np.zeros((B, n_max, F), dtype=np.float32)
        mask = np.zeros((B, n_max), dtype=bool)
        gold = np.zeros((B, n_max), dtype=bool)
        rel = np.zeros((B, n_max), dtype=np.float32)
        for b, (i, f) in enumerate(zip(indices, feats, strict=True)):
            n = f.shape[0]
            X[b, :n] = f
            mask[b, :n] = True
            info = self.infos[i]
            for group in info.gold:
                for v in group:
                    if v < n:
                        gold[b, v] = True
            if info.relevance is not None:
                rel[b, :n] = np.asarray(info.relevance[:n], dtype=np.float32)
            else:
                rel[b, :n] = gold[b, :n]
        return Batch(
            torch.from_numpy(X),
            torch.from_numpy(mask),
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
        order = list(range(len(self)))
        if only_with_gold:
            order = [i for i in order if any(self.infos[i].gold)]
        if shuffle:
            perm = torch.randperm(len(order), generator=generator).tolist()
            order = [order[j] for j in perm]
        for start in range(0, len(order), batch_size):
            yield self.batch(order[start : start + batch_size], truncate=truncate)
