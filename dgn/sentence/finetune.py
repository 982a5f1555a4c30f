"""The end-to-end model's code under its old module name.

The code lives in one module per concern: :mod:`dgn.sentence.config` (settings),
:mod:`dgn.sentence.model` (:class:`~dgn.sentence.model.EndToEndModel`),
:mod:`dgn.sentence.loss`, :mod:`dgn.sentence.checkpoint`, :mod:`dgn.sentence.training`
(the task in the training loop, :func:`finetune`, :func:`train_end_to_end`),
:mod:`dgn.sentence.predict` and :mod:`dgn.sentence.explain`. This module re-exports them
so that ``from dgn.sentence.finetune import ...`` keeps working.
"""

from __future__ import annotations

from dgn.checkpoint import is_end_to_end_model
from dgn.sentence.config import (
    DEFAULT_FACILITY,
    DEFAULT_INIT,
    DENSE_LOSSES,
    DIVERSE_COVERAGE_WEIGHT,
    HEADS,
    INITS,
    LOSSES,
    RECORDED_BEFORE,
    TRAIN_BUCKET,
    FinetuneConfig,
    FinetuneResult,
    config_from_record,
    default_facility,
    default_init,
)
from dgn.sentence.explain import EndToEndFeatures
from dgn.sentence.model import EndToEndModel, EndToEndSelector, _default_dgn_config
from dgn.sentence.predict import cut_candidates, rank_problems, ranked_problems
from dgn.sentence.training import (
    EndToEndTask,
    _batch_loss,
    _model_settings,
    _with_gradients,
    bottom_modules,
    finetune,
    frozen_bottom,
    train_end_to_end,
    transformer_dropout,
)

__all__ = [
    "DEFAULT_FACILITY",
    "DEFAULT_INIT",
    "DENSE_LOSSES",
    "DIVERSE_COVERAGE_WEIGHT",
    "HEADS",
    "INITS",
    "LOSSES",
    "RECORDED_BEFORE",
    "TRAIN_BUCKET",
    "EndToEndFeatures",
    "EndToEndModel",
    "EndToEndSelector",
    "EndToEndTask",
    "FinetuneConfig",
    "FinetuneResult",
    "bottom_modules",
    "config_from_record",
    "cut_candidates",
    "default_facility",
    "default_init",
    "finetune",
    "frozen_bottom",
    "is_end_to_end_model",
    "rank_problems",
    "ranked_problems",
    "train_end_to_end",
    "transformer_dropout",
    "_batch_loss",
    "_default_dgn_config",
    "_model_settings",
    "_with_gradients",
]
