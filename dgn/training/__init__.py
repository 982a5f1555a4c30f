"""Training: one loop (:func:`fit`) for every model, a :class:`Task` per kind of model, and
the training state that lets a run resume exactly.

* :func:`fit` - the loop: batches across processes, clipping, schedule, ``save_every``,
  patience, the best epoch restored, history, progress.
* :class:`Task` - what a kind of model supplies: its loss, optimiser, dev metrics and
  per-run settings. The frozen-feature models' task is :class:`dgn.train.FrozenFeatureTask`,
  the end-to-end model's :class:`dgn.sentence.EndToEndTask`.
* :mod:`dgn.training.state` - the state file's schema, reading and writing.
* :func:`clip_gradients` - the clipping policy.
"""

from __future__ import annotations

from dgn.training.clip import clip_gradients
from dgn.training.loop import (
    LOG_EVERY_SECONDS,
    Task,
    TrainResult,
    check_global_batch,
    check_save_every,
    fit,
    usable_problems,
)
from dgn.training.state import (
    END_TO_END_KIND,
    HISTORY_NAME,
    STATE_NAME,
    check_resumable,
    load_training_state,
    write_history,
    write_training_state,
)

__all__ = [
    "END_TO_END_KIND",
    "HISTORY_NAME",
    "LOG_EVERY_SECONDS",
    "STATE_NAME",
    "Task",
    "TrainResult",
    "check_global_batch",
    "check_resumable",
    "check_save_every",
    "clip_gradients",
    "fit",
    "load_training_state",
    "usable_problems",
    "write_history",
    "write_training_state",
]
