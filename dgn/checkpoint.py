"""Checkpoint files: how every dgn model is written and read, and what kind a directory holds.

A frozen-feature checkpoint (a :class:`~dgn.model.DGN` or a
:class:`~dgn.baselines.EncoderScorer`) is ``config.json`` beside ``model.safetensors``,
which carries a copy of the config in its metadata and is written last. A model trained end
to end (:class:`~dgn.sentence.EndToEndModel`) is a ``selector.json`` with its head's
weights and the fine-tuned encoder in a folder. This module knows the files of each kind
and nothing of the models themselves, so every model module can use it and it imports none
of them; :func:`dgn.load` reads any kind as a :class:`~dgn.selector.Selector`.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from dgn._version import __version__
from dgn.data.io import atomic_write
from dgn.errors import DgnUserError, one_line

__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "END_TO_END_CONFIG",
    "checkpoint_kind",
    "is_end_to_end_model",
    "load_weights",
    "read_checkpoint",
    "write_checkpoint",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
#: The file that marks a model trained end to end (its head's config).
END_TO_END_CONFIG = "selector.json"
_FORMAT = "dgn-model"
_FORMAT_VERSION = 1
#: Key of the config copy inside the safetensors metadata.
_META_KEY = "dgn"


def is_end_to_end_model(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a model trained end to end
    (:meth:`dgn.sentence.EndToEndModel.save_pretrained`)."""
    return (Path(directory) / END_TO_END_CONFIG).is_file()


def checkpoint_kind(directory: str | os.PathLike[str]) -> Literal["end-to-end", "dgn", "encoder"]:
    """What ``directory`` holds, from its files alone (no weights are read): ``"end-to-end"``
    (a sentence encoder under its head), or a frozen-feature checkpoint's ``model_type``
    (``"dgn"`` or ``"encoder"``).

    Raises:
        DgnUserError: No such directory, no config in it, or an unknown ``model_type``.
    """
    path = Path(directory)
    if not path.is_dir():
        raise DgnUserError(f"{path}: model directory not found")
    if is_end_to_end_model(path):
        return "end-to-end"
    config_path = path / CONFIG_NAME
    if not config_path.is_file():
        raise DgnUserError(f"{config_path}: no model config found (is {path} a dgn checkpoint?)")
    meta = _read_config_json(config_path)
    kind = meta.get("model_type", "dgn") if isinstance(meta, dict) else None
    if kind not in ("dgn", "encoder"):
        raise DgnUserError(f"{config_path}: field 'model_type': unknown model type {kind!r} (known: dgn, encoder)")
    return kind


def write_checkpoint(
    model: nn.Module, directory: str | os.PathLike[str], model_type: str, config: dict[str, Any], extra: dict[str, Any]
) -> Path:
    """Write ``model``'s checkpoint (``config.json`` + ``model.safetensors``), weights last."""
    from safetensors.torch import save

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "dgn_version": __version__,
        "config": config,
        "extra": extra,
    }
    if model_type != "dgn":  # DGN checkpoints keep the layout they always had
        meta["model_type"] = model_type
    text = json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n"
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    blob = save(tensors, metadata={"format": "pt", _META_KEY: json.dumps(meta, sort_keys=True)})
    with atomic_write(path / CONFIG_NAME) as fh:
        fh.write(text)
    with atomic_write(path / WEIGHTS_NAME, "wb") as fh:
        fh.write(blob)
    return path


def read_checkpoint(
    directory: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any], dict[str, Tensor], str, Path]:
    """The checked metadata, the tensors, the metadata's source and the weights path."""
    from safetensors import SafetensorError, safe_open

    path = Path(directory)
    config_path = path / CONFIG_NAME
    weights_path = path / WEIGHTS_NAME
    if not path.is_dir():
        raise DgnUserError(f"{path}: model directory not found")
    if not weights_path.is_file():
        if is_end_to_end_model(path):
            raise DgnUserError(
                f"{path}: a model trained end to end (a sentence encoder under its head), not a "
                "frozen-feature checkpoint; load any kind with dgn.load(path)"
            )
        if config_path.is_file():
            raise DgnUserError(f"{weights_path}: model weights missing")
        raise DgnUserError(f"{config_path}: no model config found (is {path} a dgn checkpoint?)")
    try:  # one read of the weights file: the config stored in it, and the tensors
        with safe_open(str(weights_path), framework="pt", device=str(map_location)) as handle:
            stored = (handle.metadata() or {}).get(_META_KEY)
            state = {name: handle.get_tensor(name) for name in handle.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise DgnUserError(f"{weights_path}: cannot read weights: {one_line(exc)}") from None
    file_meta = _read_config_json(config_path) if config_path.is_file() else None
    if stored is not None:
        try:
            meta = json.loads(stored)
        except json.JSONDecodeError as exc:
            raise DgnUserError(f"{weights_path}: metadata field {_META_KEY!r} is not JSON: {exc}") from None
        source = f"{weights_path} (metadata)"
        if file_meta is not None and file_meta != meta:
            warnings.warn(
                f"{config_path} does not match the config stored in {weights_path} "
                "(an interrupted save?); using the weights' own config",
                stacklevel=3,
            )
    elif file_meta is not None:
        meta, source = file_meta, str(config_path)
    else:
        raise DgnUserError(f"{config_path}: no model config found (is {path} a dgn checkpoint?)")
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise DgnUserError(f"{source}: field 'format': not a dgn model config")
    if meta.get("format_version") != _FORMAT_VERSION:
        raise DgnUserError(
            f"{source}: field 'format_version': checkpoint format "
            f"{meta.get('format_version')!r} is not supported (this dgn {__version__} reads {_FORMAT_VERSION})"
        )
    extra = meta.get("extra") or {}
    if not isinstance(extra, dict):
        raise DgnUserError(f"{source}: field 'extra': expected an object")
    meta["extra"] = extra
    return meta, state, source, weights_path


def load_weights(model: nn.Module, state: dict[str, Tensor], weights_path: Path,
                 map_location: str | torch.device = "cpu") -> None:
    """``model.load_state_dict(state)``, with a one-line error when they do not fit, then the
    model moved to ``map_location`` (the weights are copied into its parameters, which a
    new model has on the CPU)."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:3])
        raise DgnUserError(f"{weights_path}: weights do not match the config: {detail}") from None
    model.to(map_location)


def _read_config_json(config_path: Path) -> Any:
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DgnUserError(f"{config_path}: cannot read config: {one_line(exc)}") from None
