"""Ranking with a trained frozen-feature model: what prediction and training's dev evaluation share.

A DGN ranks by exact hard greedy on its learned objective (``eval()`` mode), each pick
scored by its marginal gain; an encoder scorer ranks by its logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from dgn.baselines import EncoderScorer
from dgn.model import DGN
from dgn.pipeline import SelectionDataset

__all__ = ["Model", "rank", "ranked", "rank_batch", "evaluate_model"]

#: The frozen-feature models.
Model = DGN | EncoderScorer


@torch.no_grad()
def rank(model: Model, data: SelectionDataset, k: int, batch_size: int = 64) -> list[list[int]]:
    """The first ``k`` picks of ``model`` for every problem of ``data`` (file order).

    The DGN runs exact hard greedy on its learned objective (``eval()`` mode); the encoder
    scorers rank by score. Problems with fewer than ``k`` candidates get shorter lists.
    """
    return [picks for _, picks, _ in ranked(model, data, k, batch_size)]


def ranked(
    model: Model,
    data: SelectionDataset,
    k: int,
    batch_size: int = 64,
    forward: Callable[[DGN, torch.Tensor, torch.Tensor, int], Any] | None = None,
) -> Iterator[tuple[int, list[int], list[float]]]:
    """Stream :func:`rank`'s picks with their scores: ``(i, picks, scores)`` for the ``i``-th
    problem of ``data``, in file order. A DGN's scores are the picks' marginal gains; an
    encoder scorer's, their logits. Each batch is ranked by :func:`rank_batch`, which
    ``forward`` is passed to."""
    for batch in data.batches(batch_size):
        for i, (picks, scores) in zip(batch.index.tolist(), rank_batch(model, batch.features, batch.mask, k, forward),
                                      strict=True):
            yield i, picks, scores


def rank_batch(
    model: Model,
    features: torch.Tensor,
    mask: torch.Tensor,
    k: int,
    forward: Callable[[DGN, torch.Tensor, torch.Tensor, int], Any] | None = None,
) -> list[tuple[list[int], list[float]]]:
    """The first ``k`` picks of each problem of one padded batch, with their scores.

    A DGN runs exact hard greedy on its learned objective (``eval()`` mode), and its scores
    are the picks' marginal gains; an encoder scorer ranks by logit (ties: the lower index
    first), and its scores are those logits. A problem with fewer than ``k`` candidates
    gets a shorter list. The model is put in ``eval()`` mode for the call, without
    gradients, and the batch moved to its device.

    Args:
        model: A DGN or an encoder scorer.
        features: ``(B, N, F)`` standardised features, zero on padding.
        mask: ``(B, N)`` bool, True for real candidates.
        k: Picks per problem.
        forward: ``forward(model, features, mask, k)`` replaces the DGN's call
            ``model(features, mask, steps=k)`` (:func:`dgn.predict.predict_dataset` turns a
            compiled kernel's build failure into a user error there).

    Returns:
        One ``(picks, scores)`` pair per problem.
    """
    was_training = model.training
    model.eval()
    param = next(model.parameters(), None)
    if param is not None and features.device != param.device:
        features, mask = features.to(param.device), mask.to(param.device)
    out: list[tuple[list[int], list[float]]] = []
    try:
        with torch.no_grad():
            if isinstance(model, DGN):
                result = forward(model, features, mask, k) if forward else model(features, mask, steps=k)
                picks, scores = result.indices, result.gains
            else:
                logits = model(features, mask).logits
                kk = min(k, logits.shape[1])
                # stable descending sort: ties keep the lower index first
                order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :kk]
                picks = torch.where(mask.gather(1, order), order, torch.full_like(order, -1))
                scores = logits.gather(1, order)
            for row, values in zip(picks.tolist(), scores.tolist(), strict=True):
                keep = [j for j, pick in enumerate(row) if pick >= 0]  # -1: no candidate left
                out.append(([row[j] for j in keep], [float(values[j]) for j in keep]))
    finally:
        model.train(was_training)
    return out


def evaluate_model(model: Model, data: SelectionDataset, ks: tuple[int, ...] = (1, 3, 5, 7)) -> dict[str, float]:
    """Recall, precision, F1 and strict accuracy at ``ks`` on ``data``."""
    from dgn.metrics import evaluate_rankings

    rankings = rank(model, data, max(ks))
    return evaluate_rankings(rankings, [info.gold for info in data.infos], ks=ks)
