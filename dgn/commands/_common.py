"""Helpers shared by the command modules (not a command itself)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from dgn.errors import DgnUserError

if TYPE_CHECKING:
    from dgn.model import DGN
    from dgn.pipeline import Featurizer

T = TypeVar("T")

_FIELD_RE = re.compile(r"\b(DGNConfig|TrainConfig)\.(\w+)")


def build_config(factory: Callable[..., T], overrides: Mapping[str, Any], options: Mapping[str, str]) -> T:
    """``factory(**overrides)``, with a ``ValueError`` turned into a user error naming the option.

    Args:
        factory: Builds the config (e.g. ``lambda **kw: replace(DGNConfig(...), **kw)``).
        overrides: Only the fields the user passed.
        options: Field name -> command-line option (``"tau"`` -> ``"--tau"``).
    """
    try:
        return factory(**overrides)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, DgnUserError):
            raise
        message = str(exc)
        match = _FIELD_RE.search(message)
        if match and match.group(2) in options:
            option = options[match.group(2)]
            message = _FIELD_RE.sub(option, message, count=1)
            raise DgnUserError(message) from None
        raise DgnUserError(f"bad option value: {message}") from None


def load_model(directory: str) -> DGN:
    """A saved DGN, in eval mode."""
    from dgn.model import DGN

    return DGN.from_pretrained(directory)


def load_featurizer(
    model: DGN,
    model_dir: str,
    *,
    vectors: str | None,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
) -> Featurizer:
    """The featurizer recorded in a checkpoint (``extra.featurizer``), vectors optionally moved."""
    from dgn.pipeline import Featurizer

    settings = model.extra.get("featurizer")
    if settings is None:
        raise DgnUserError(
            f"{model_dir}: the checkpoint records no featurizer (field 'extra.featurizer'); "
            "was it written by `dgn train`?"
        )
    if vectors is None and isinstance(settings, dict):
        # A model directory moved together with the vectors `dgn train` trained into it.
        from pathlib import Path

        recorded, local = settings.get("vectors"), Path(model_dir) / "vectors.bin"
        if recorded and not Path(recorded).exists() and local.is_file():
            vectors = str(local)
    featurizer = Featurizer.from_settings(
        settings, vectors_path=vectors, cache_dir=cache_dir, progress=progress
    )
    if featurizer.dim != model.config.in_features:
        raise DgnUserError(
            f"vectors file {featurizer.vectors_path} has dimension {featurizer.dim}, "
            f"but the model in {model_dir} expects {model.config.in_features}"
        )
    return featurizer


def format_metrics(results: Mapping[str, float], names: tuple[str, ...] = ("recall", "precision", "f1", "strict")) -> str:
    """A small table: one row per cutoff found in ``results`` (keys like ``"recall@5"``)."""
    ks = sorted({int(key.split("@", 1)[1]) for key in results if "@" in key})
    lines = [f"{'k':>4}  " + "  ".join(f"{name:>9}" for name in names)]
    for k in ks:
        cells = []
        for name in names:
            value = results.get(f"{name}@{k}")
            cells.append(f"{'-':>9}" if value is None else f"{value:>9.4f}")
        lines.append(f"{k:>4}  " + "  ".join(cells))
    return "\n".join(lines)
