"""Training losses for the greedy layers.

* :func:`layerwise_cross_entropy`: the DGN paper's layer-wise loss (Powers et al., 2018,
  eq. 5 as its text describes it).
* :func:`soft_label_cross_entropy`: the graded variant after the FGA-NDCG model card:
  the target at each layer is the relevance of the gold items still unpicked,
  normalised into a distribution.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

__all__ = [
    "layerwise_cross_entropy",
    "soft_label_cross_entropy",
    "LayerwiseCrossEntropy",
    "SoftLabelCrossEntropy",
]

Reduction = Literal["none", "mean", "sum"]


def _log_probs(states: Tensor, from_logits: bool) -> Tensor:
    if from_logits:
        # Rows that are all -inf (no candidate left) would give NaN: zero them.
        finite_row = torch.isfinite(states).any(-1, keepdim=True)
        safe = torch.where(finite_row, states, torch.zeros_like(states))
        return torch.log_softmax(safe, dim=-1).masked_fill(~finite_row, float("-inf"))
    return torch.log(states.clamp_min(torch.finfo(states.dtype).tiny))


def _picks(states: Tensor, indices: Tensor | None, from_logits: bool) -> Tensor:
    N = states.shape[-1]
    if indices is not None:
        if not isinstance(indices, Tensor) or indices.is_floating_point() or indices.is_complex() \
                or indices.dtype == torch.bool:
            raise ValueError(f"indices must be an integer tensor, got {_describe(indices)}")
        if tuple(indices.shape) != tuple(states.shape[:2]):
            raise ValueError(
                f"indices must have shape {tuple(states.shape[:2])}, got {tuple(indices.shape)}"
            )
        if indices.numel() and not bool(((indices >= -1) & (indices < N)).all()):
            raise ValueError(f"indices must be candidate indices in [0, {N}) or -1 for no pick")
        return indices.long()
    if N == 0:  # no candidate: no layer picks anything
        return torch.full(states.shape[:2], -1, dtype=torch.long, device=states.device)
    # The argmax of each layer is the layer's pick in both relaxations.
    has = torch.isfinite(states).any(-1) if from_logits else (states > 0).any(-1)
    best = states.argmax(-1)
    return torch.where(has, best, torch.full_like(best, -1))


def _unpicked_before(picks: Tensor, N: int) -> Tensor:
    """``(B, K, N)`` bool: True for items not picked by any layer before k."""
    B, K = picks.shape
    onehot = torch.zeros(B, K, N + 1, dtype=torch.bool, device=picks.device)
    onehot.scatter_(2, torch.where(picks < 0, N, picks).unsqueeze(-1), True)
    onehot = onehot[..., :N]
    before = torch.cumsum(onehot.to(torch.int32), dim=1) - onehot.to(torch.int32)
    return before == 0


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


def _check(states: Tensor, target: Tensor, name: str, from_logits: bool) -> None:
    if not isinstance(states, Tensor) or not states.is_floating_point():
        raise ValueError(f"states must be a floating-point tensor, got {_describe(states)}")
    if not isinstance(target, Tensor) or target.is_complex():
        raise ValueError(f"{name} must be a real tensor, got {_describe(target)}")
    if states.dim() != 3:
        raise ValueError(f"states must have shape (B, K, N), got {tuple(states.shape)}")
    B, _, N = states.shape
    if tuple(target.shape) != (B, N):
        raise ValueError(f"{name} must have shape ({B}, {N}), got {tuple(target.shape)}")
    # NaN (and, for logits, +inf) would turn the loss into NaN or inf without a word.
    bad = torch.isnan(states) | (states == float("inf")) if from_logits else torch.isnan(states)
    if bool(bad.any()):
        what = "NaN or +inf" if from_logits else "NaN"
        raise ValueError(f"states contain {what} values")


def _reduce(per_problem: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return per_problem
    if reduction == "sum":
        return per_problem.sum()
    if reduction == "mean":
        return per_problem.mean()
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def layerwise_cross_entropy(
    states: Tensor,
    gold: Tensor,
    indices: Tensor | None = None,
    reduction: Reduction = "mean",
    from_logits: bool = True,
) -> Tensor:
    r"""The DGN's layer-wise cross entropy.

    .. math::

        \mathcal{L} = -\sum_{k=1}^{K} \sum_{v \in L \setminus A_{k-1}} \log s^k_v

    where ``L`` is the gold set and ``A_{k-1}`` the items picked by layers before k: each
    gold item still unpicked is treated, at each layer, as if it were the only correct
    one. Layers after all gold is picked add nothing. (Powers et al., 2018, eq. 5; the
    paper notes this penalises all but one of several valid items at each step, which
    :func:`soft_label_cross_entropy` fixes.)

    Args:
        states: ``(B, K, N)`` layer logits (``SoftSelection.logits``, ``-inf`` where
            unavailable) or, with ``from_logits=False``, layer distributions.
        gold: ``(B, N)`` bool, True for gold items.
        indices: ``(B, K)`` the picks of each layer; default: each layer's argmax.
        reduction: ``"none"`` (``(B,)``), ``"mean"`` or ``"sum"``.
        from_logits: Whether ``states`` are logits (default) or probabilities.

    Returns:
        The loss, ``(B,)`` or a scalar.

    Raises:
        ValueError: Non-tensor inputs, wrong shapes, NaN (or, for logits, ``+inf``) in
            ``states``, ``indices`` that are not integers in ``[-1, N)``, or an unknown
            ``reduction``.

    Example:
        >>> logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.0, 0.5, 0.5]]]))
        >>> gold = torch.tensor([[True, True, False]])
        >>> round(float(layerwise_cross_entropy(logits, gold)), 4)  # -(log .5 + log .25) - log .5
        2.7726
    """
    _check(states, gold, "gold", from_logits)
    B, K, N = states.shape
    logp = _log_probs(states, from_logits)  # (B, K, N)
    open_gold = gold.bool().unsqueeze(1) & _unpicked_before(_picks(states, indices, from_logits), N)  # (B, K, N)
    terms = torch.where(open_gold, -logp, torch.zeros_like(logp))
    return _reduce(terms.sum(dim=(1, 2)), reduction)


def soft_label_cross_entropy(
    states: Tensor,
    relevance: Tensor,
    indices: Tensor | None = None,
    reduction: Reduction = "mean",
    from_logits: bool = True,
) -> Tensor:
    r"""Layer-wise soft-label cross entropy for graded relevance.

    At layer k the target is ``p_k = r / sum(r)`` over the relevant items (``r > 0``) not
    yet picked, and the loss is ``-sum_v p_k[v] log s^k_v`` (the soft-label cross entropy
    of the FGA-NDCG model card, applied per greedy layer). With a binary ``r`` this is the
    layer-wise loss with each layer's terms averaged instead of summed.

    Args:
        states: ``(B, K, N)`` logits or probabilities (see ``from_logits``).
        relevance: ``(B, N)`` nonnegative graded relevance.
        indices: ``(B, K)`` picks; default each layer's argmax.
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
        from_logits: Whether ``states`` are logits.

    Returns:
        The loss, ``(B,)`` or a scalar.

    Raises:
        ValueError: As :func:`layerwise_cross_entropy`, or ``relevance`` negative, NaN or inf.
    """
    _check(states, relevance, "relevance", from_logits)
    if bool((relevance < 0).any()) or not bool(torch.isfinite(relevance).all()):
        raise ValueError("relevance must be finite and nonnegative")
    B, K, N = states.shape
    logp = _log_probs(states, from_logits)
    open_items = _unpicked_before(_picks(states, indices, from_logits), N)  # (B, K, N)
    r = relevance.to(logp.dtype).unsqueeze(1) * open_items.to(logp.dtype)  # (B, K, N)
    total = r.sum(-1, keepdim=True)
    p = r / torch.where(total > 0, total, torch.ones_like(total))  # sums to 1 (or all 0)
    terms = torch.where(p > 0, -p * logp, torch.zeros_like(logp))
    return _reduce(terms.sum(dim=(1, 2)), reduction)


class LayerwiseCrossEntropy(nn.Module):
    """Module form of :func:`layerwise_cross_entropy`."""

    def __init__(self, reduction: Reduction = "mean", from_logits: bool = True) -> None:
        super().__init__()
        self.reduction = reduction
        self.from_logits = from_logits

    def forward(self, states: Tensor, gold: Tensor, indices: Tensor | None = None) -> Tensor:
        return layerwise_cross_entropy(states, gold, indices, self.reduction, self.from_logits)


class SoftLabelCrossEntropy(nn.Module):
    """Module form of :func:`soft_label_cross_entropy`."""

    def __init__(self, reduction: Reduction = "mean", from_logits: bool = True) -> None:
        super().__init__()
        self.reduction = reduction
        self.from_logits = from_logits

    def forward(self, states: Tensor, relevance: Tensor, indices: Tensor | None = None) -> Tensor:
        return soft_label_cross_entropy(states, relevance, indices, self.reduction, self.from_logits)
