"""The end-to-end model's training loss (what :meth:`~dgn.sentence.EndToEndModel.loss` computes)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from dgn.sentence.config import DENSE_LOSSES

__all__ = ["head_loss"]


def _scale_grad(x: Tensor, share: float) -> Tensor:
    """``x`` in the forward pass (exactly), ``share`` times its gradient in the backward pass."""
    if share == 0:
        return x.detach()
    return x.detach() + share * (x - x.detach())


def head_loss(
    model: Any,
    query: Tensor,
    sentences: Tensor,
    mask: Tensor,
    gold: Tensor,
    loss: str = "layerwise",
    lexical: Tensor | None = None,
    gold_sets: Tensor | None = None,
    first_layer_weight: float = 0.0,
    relevance: Tensor | None = None,
    dense: str | None = None,
    sparse_weight: float = 0.0,
    ndcg_temperature: float = 1.0,
    ndcg_k: int | None = None,
    encoder_grad_scale: float = 1.0,
) -> Tensor:
    """The training loss of one batch of ``model`` (an :class:`~dgn.sentence.EndToEndModel`;
    its method ``loss``).

    Args:
        query, sentences, mask: As :meth:`EndToEndModel.score <dgn.sentence.EndToEndModel.score>` takes them.
        gold: ``(B, N)`` bool, the union of the gold sets.
        loss: The DGN head's layer-wise loss, as :class:`FinetuneConfig` names it:
            ``"listwise"``, ``"layerwise"`` or ``"set_recall"``
            (:func:`~dgn.losses.set_recall_cross_entropy`, which needs
            ``gold_sets``). The listwise head takes ``"set_recall"`` as its one
            layer's target too, and any other value as ``gold / |gold|``.
        lexical: As in ``model.score``.
        gold_sets: ``(B, G, N)`` bool (:func:`~dgn.losses.gold_set_tensor`).
        first_layer_weight: Add this multiple of the first layer's term of the loss
            again (the DGN head; its first layer is a listwise ranking).
        relevance: ``(B, N)`` nonnegative grades, the target of ``dense``.
        dense: A graded loss on ``relevance`` over the layer logits ``(B, K, N)`` (the
            listwise head's ``(B, 1, N)``): ``"soft_label"``
            (:func:`~dgn.losses.soft_label_cross_entropy`) or ``"approx_ndcg"``
            (:func:`~dgn.losses.layerwise_approx_ndcg_loss` with ``ndcg_temperature``
            and ``ndcg_k``). The batch's loss is then
            ``mix_sparse_dense(dense, sparse, sparse_weight)``, the sparse term being
            ``loss`` on ``gold`` as above (left out when ``sparse_weight`` is 0).
            None: ``loss`` alone.
        sparse_weight, ndcg_temperature, ndcg_k: As in :class:`FinetuneConfig`.
        encoder_grad_scale: As in :class:`FinetuneConfig`: the DGN head's layers run
            on ``query`` and ``sentences`` whose gradient is scaled by it (the forward
            values are the same), and the first-layer term, when
            ``first_layer_weight`` is set, runs the first layer again on them as
            given.
    """
    from dgn.losses import (
        layerwise_approx_ndcg_loss,
        layerwise_cross_entropy,
        mix_sparse_dense,
        set_recall_cross_entropy,
        soft_label_cross_entropy,
    )

    if loss == "set_recall" and gold_sets is None:
        raise ValueError("loss='set_recall' needs gold_sets")
    if dense is not None and dense not in DENSE_LOSSES:
        raise ValueError(f"dense must be one of {DENSE_LOSSES} or None, got {dense!r}")
    if dense is not None and relevance is None:
        raise ValueError(f"dense={dense!r} needs relevance")

    def of(logits: Tensor) -> Tensor:  # (B, K, N) layer logits
        if loss == "set_recall":
            assert gold_sets is not None
            return set_recall_cross_entropy(logits, gold_sets)
        if loss == "listwise" or model.dgn is None:
            return soft_label_cross_entropy(logits, gold.to(logits.dtype))
        return layerwise_cross_entropy(logits, gold)

    scaled = model.dgn is not None and encoder_grad_scale != 1
    if model.dgn is None:
        logits = model.score(query, sentences, mask, lexical=lexical).unsqueeze(1)  # (B, 1, N)
    else:
        steps = min(model.dgn.config.steps, int(mask.sum(1).max()))
        q_in, s_in = (_scale_grad(query, encoder_grad_scale), _scale_grad(sentences, encoder_grad_scale)) \
            if scaled else (query, sentences)
        logits = model.score(q_in, s_in, mask, steps=steps, lexical=lexical).logits  # (B, K, N)

    def sparse() -> Tensor:
        total = of(logits)
        if first_layer_weight and model.dgn is not None:
            first = model.score(query, sentences, mask, steps=1, lexical=lexical).logits if scaled \
                else logits[:, :1]
            total = total + first_layer_weight * of(first)
        return total

    if dense is None:
        return sparse()
    assert relevance is not None
    r = relevance.to(logits.dtype)
    if dense == "soft_label":
        graded = soft_label_cross_entropy(logits, r)
    else:
        graded = layerwise_approx_ndcg_loss(logits, r, temperature=ndcg_temperature, k=ndcg_k)
    if not sparse_weight:
        return graded
    return mix_sparse_dense(graded, sparse(), sparse_weight)
