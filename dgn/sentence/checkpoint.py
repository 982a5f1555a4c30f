"""Saving and loading a model trained end to end: the encoder in the sentence-transformers
layout, the head's weights and ``selector.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dgn.checkpoint import END_TO_END_CONFIG, load_weights
from dgn.errors import DgnUserError
from dgn.features.sentence import (
    load_sentence_model,
)
from dgn.model import DGNConfig

__all__ = ["head_state", "load_head_state", "save_model", "load_model"]

_HEAD_WEIGHTS = "head.safetensors"
_FACILITY_KEY = "facility.raw_weights"
_ENCODER_DIR = "encoder"
_FORMAT = "dgn-end-to-end"


def head_state(model: Any) -> dict[str, Tensor]:
    """What ``head.safetensors`` holds: the DGN's weights (and the facility term's
    under ``facility.raw_weights``), the listwise head's lexical term, or nothing (the
    plain listwise head has no weights of its own)."""
    head = model.dgn if model.dgn is not None else model.lexical_head
    state = {} if head is None else {k: v.detach().contiguous() for k, v in head.state_dict().items()}
    if model.facility is not None:
        state[_FACILITY_KEY] = model.facility.raw_weights.detach().contiguous()
    return state


def load_head_state(model: Any, state: dict[str, Tensor], source: Path) -> None:
    """Load what :func:`head_state` wrote (``source``: the file, for error messages)."""

    state = dict(state)
    if model.facility is not None:
        if _FACILITY_KEY not in state:
            raise DgnUserError(f"{source}: no {_FACILITY_KEY!r} for the facility term")
        with torch.no_grad():
            model.facility.raw_weights.copy_(state.pop(_FACILITY_KEY))
    head = model.dgn if model.dgn is not None else model.lexical_head
    if head is not None:
        load_weights(head, state, source)


def save_model(model: Any, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
    """Write ``model``'s encoder (sentence-transformers layout, safetensors) and its head.

    ``extra``: JSON-ready settings stored in ``selector.json`` (default: ``model.extra``).
    """
    from safetensors.torch import save

    from dgn.data.io import atomic_write

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.encoder.save(str(path / _ENCODER_DIR))
    meta = {
        "format": _FORMAT,
        "head": model.head,
        "init": model.init,
        "scale": model.scale,
        "lexical": model.lexical,
        "facility": None if model.facility is None else float(model.facility.base_weights(torch.zeros(1))[1].detach()),
        "diversity_scale": model.diversity_scale,
        "dgn_config": None if model.dgn is None else model.dgn.config.to_dict(),
        "extra": model.extra if extra is None else extra,
    }
    tensors = head_state(model)
    with atomic_write(path / END_TO_END_CONFIG) as fh:
        fh.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    with atomic_write(path / _HEAD_WEIGHTS, "wb") as fh:
        fh.write(save(tensors, metadata={"format": "pt"}))
    return path


def load_model(
    cls: Any, directory: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> Any:
    """Load a model written by :func:`save_model` as ``cls``, in ``eval()`` mode on ``map_location``.

    Raises:
        DgnUserError: No ``selector.json`` in ``directory``, one that cannot be read or
            is not an end-to-end model's, or head weights that do not fit it.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from dgn.errors import one_line

    path = Path(directory)
    config_path = path / END_TO_END_CONFIG
    if not config_path.is_file():
        raise DgnUserError(f"{config_path}: not found (is {path} an end-to-end dgn model?)")
    try:
        meta = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DgnUserError(f"{config_path}: cannot read: {one_line(exc)}") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise DgnUserError(f"{config_path}: field 'format': not an end-to-end dgn model")
    missing = [key for key in ("head", "scale", "dgn_config") if key not in meta]
    if missing:
        raise DgnUserError(f"{config_path}: field {missing[0]!r} missing")
    encoder = load_sentence_model(path / _ENCODER_DIR)
    config = None if meta["dgn_config"] is None else DGNConfig.from_dict(
        meta["dgn_config"], source=f"{config_path}: field 'dgn_config'")
    model = cls(encoder, meta["head"], config, meta["scale"], meta.get("init", "coverage"),
                lexical=bool(meta.get("lexical", False)), facility=meta.get("facility"))
    try:
        state = load_file(str(path / _HEAD_WEIGHTS))
    except (SafetensorError, OSError) as exc:
        raise DgnUserError(f"{path / _HEAD_WEIGHTS}: cannot read weights: {one_line(exc)}") from None
    load_head_state(model, state, path / _HEAD_WEIGHTS)
    scale = meta.get("diversity_scale", 1.0)  # models written before the field: as trained
    try:
        model.diversity_scale = scale
    except (TypeError, ValueError) as exc:
        raise DgnUserError(f"{config_path}: field 'diversity_scale': {one_line(exc)}") from None
    model.extra = meta.get("extra") or {}
    return model.to(map_location).eval()
