"""The training state: one file that lets any run, on frozen features or end to end, on one
process or under torchrun, continue exactly where it stopped.

:func:`dgn.training.fit` writes it after every epoch (and every ``save_every`` steps) and
reads it back on ``resume``. One schema for every task:

==================  ==========================================================================
``model_kind``      what trained (``"dgn"``, ``"EncoderScorer"``, ``"end-to-end"``)
``model_config``    the model's settings; a resumed run's must be the same
``train_config``    the task's config (``asdict``); only the task's ``resumable`` fields may change
``epoch``, ``step`` epochs done, and optimiser steps done of the next one (``save_every``)
``generator``       the shuffling generator as it was before that epoch's shuffle
``epoch_loss``      the next epoch's loss sum and count so far
``model``, ...      model, optimizer and schedule (None without one) state dicts
``rng``             every process's random state (CPU, and its GPU's), one per rank
``best_*``          the best epoch so far: number, dev score and metrics, weights
``stale``           epochs since the dev score last improved (``patience``)
``history``         one record per epoch
``extra``           the caller's JSON-like values (the run's files, the featurizer)
==================  ==========================================================================
"""

from __future__ import annotations

import io
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from dgn.errors import DgnUserError, one_line

__all__ = [
    "END_TO_END_KIND",
    "STATE_NAME",
    "check_resumable",
    "load_training_state",
    "rng_state",
    "write_training_state",
]

#: The training state's file name in a run's output directory.
STATE_NAME = "training_state.pt"
#: ``model_kind`` of an end-to-end run (a sentence encoder under its head).
END_TO_END_KIND = "end-to-end"
_STATE_FORMAT = "dgn-training-state"
_STATE_VERSION = 1


def write_training_state(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write a training state (tensors, numbers, strings, lists and dicts of them) that
    :func:`load_training_state` reads back, atomically: a temporary file in the same
    directory, renamed over ``path`` once complete, so a run killed while writing leaves
    the previous state."""
    from dgn.data.io import atomic_write

    buffer = io.BytesIO()
    torch.save({"format": _STATE_FORMAT, "format_version": _STATE_VERSION, **state}, buffer)
    with atomic_write(path, "wb") as fh:
        fh.write(buffer.getbuffer())


def load_training_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a training state written by :func:`write_training_state`.

    Raises:
        DgnUserError: The file is missing, unreadable or not a dgn training state.
    """
    p = Path(path)
    if not p.is_file():
        raise DgnUserError(f"{p}: no training state to resume from")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise DgnUserError(f"{p}: cannot read the training state: {one_line(exc)[:200]}") from None
    if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
        raise DgnUserError(f"{p}: field 'format': not a dgn training state")
    if state.get("format_version") != _STATE_VERSION:
        raise DgnUserError(
            f"{p}: field 'format_version': training state format {state.get('format_version')!r} "
            f"is not supported (this version reads {_STATE_VERSION})"
        )
    return state


def rng_state(device: torch.device) -> dict[str, torch.Tensor | None]:
    """This process's random state (dropout, random negatives): the CPU generator's and, on
    CUDA, its GPU's."""
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def saved_rng(saved: dict[str, Any], rank: int, world: int) -> dict[str, torch.Tensor | None]:
    """The random state this process resumes with: its own rank's where the saved run had as
    many processes, else rank 0's. A state written before every rank's was kept
    (``torch_rng``) has rank 0's alone."""
    if "rng" not in saved:
        return {"torch": saved["torch_rng"], "cuda": None}
    rngs = saved["rng"]
    return rngs[rank] if len(rngs) == world else rngs[0]


def check_resumable(
    saved: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    kind: str,
    model_config: dict[str, Any],
    train_config: Any,
    resumable: tuple[str, ...] = (),
    recorded_before: dict[str, Any] | None = None,
) -> None:
    """Refuse to resume ``saved`` with another model or config.

    Args:
        saved: The state read by :func:`load_training_state`.
        path: Its file, for the message.
        kind: This run's ``model_kind``.
        model_config: This run's model settings; each must equal the saved one.
        train_config: This run's config (a dataclass); each field must equal the saved one,
            except those in ``resumable`` (they only decide when to stop).
        recorded_before: The values that fields newer than a saved state had in effect
            (a state without one is read with these, not with today's defaults).

    Raises:
        DgnUserError: Naming the field and both values.
    """
    if saved.get("model_kind") != kind:
        raise DgnUserError(f"{path}: field 'model_kind': the saved run trained a {saved.get('model_kind')}, "
                           f"not a {kind}")
    before_fields = recorded_before or {}
    note = (f"(only {' and '.join(resumable)} may change on resume)" if resumable
            else "(the run resumes with its own settings)")
    for section, now in (("model_config", model_config), ("train_config", asdict(train_config))):
        for name, value in now.items():
            if section == "train_config" and name in resumable:
                continue
            before = saved[section].get(name, before_fields.get(name) if section == "train_config" else None)
            before, value = (list(v) if isinstance(v, tuple) else v for v in (before, value))
            if before != value:
                raise DgnUserError(
                    f"{path}: field '{section}.{name}': the saved run used {before!r}, this one {value!r} {note}"
                )


#: The run's history in its output directory, beside the model and the state.
HISTORY_NAME = "train_history.json"


def write_history(
    directory: str | os.PathLike[str],
    result: Any,
    *,
    train_config: Any,
    train: str | os.PathLike[str] | None,
    dev: str | os.PathLike[str] | None,
    **fields: Any,
) -> dict[str, Any]:
    """Write ``directory/train_history.json`` (rank 0 only, atomically) and return it.

    Every run's history has the same core, whatever trained: the result (best epoch, its
    dev score and metrics, one record per epoch with its train loss and dev metrics, the
    seconds), ``train_config`` (the config, ``asdict``), the ``train`` and ``dev`` files
    (absolute paths, or None), ``world_size`` and the process's ``peak_rss_mib``;
    ``fields`` add what is particular to the run (model type, featurizer, source model).
    """
    import json
    import resource

    from dgn import distributed
    from dgn.data.io import atomic_write, json_ready

    history = {
        **result.to_dict(),
        "train_config": asdict(train_config),
        "train": None if train is None else str(Path(train).resolve()),
        "dev": None if dev is None else str(Path(dev).resolve()),
        "world_size": distributed.world_size(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **fields,
    }
    if distributed.is_main():
        with atomic_write(Path(directory) / HISTORY_NAME) as fh:
            json.dump(json_ready(history), fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")
    return history
