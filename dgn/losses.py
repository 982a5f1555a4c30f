"""Training losses for the greedy layers.

* :func:`layerwise_cross_entropy`: the DGN paper's layer-wise loss (Powers et al., 2018,
  eq. 5 as its text describes it).
* :func:`soft_label_cross_entropy`: the graded variant after the FGA-NDCG model card:
  the target at each layer is the relevance of the gold items still unpicked,
  normalised into a distribution.
* :func:`set_recall_cross_entropy`: for alternative gold sets: the target at each layer
  is the items that raise recall (the best coverage of one gold set) the most.
* :func:`soft_cross_entropy`: the card's loss for one ranking layer ``(B, N)``.
* :func:`approx_ndcg_loss` and :func:`layerwise_approx_ndcg_loss`: ApproxNDCG (Qin, Liu
  and Li, 2010), for one ranking layer and per greedy layer.
* :func:`mix_sparse_dense`: the card's mixing, ``dense + sparse_weight * sparse``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

__all__ = [
    "layerwise_cross_entropy",
    "soft_label_cross_entropy",
    "set_recall_cross_entropy",
    "gold_set_tensor",
    "soft_cross_entropy",
    "approx_ndcg_loss",
    "layerwise_approx_ndcg_loss",
    "mix_sparse_dense",
    "LayerwiseCrossEntropy",
    "SoftLabelCrossEntropy",
    "SoftCrossEntropy",
    "ApproxNDCGLoss",
    "LayerwiseApproxNDCGLoss",
    "LayerwiseApproxNDCG",
    "SetRecallCrossEntropy",
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
    onehot = picks.unsqueeze(-1) == torch.arange(N, device=picks.device)  # (B, K, N); -1 matches nothing
    hits = torch.cumsum(onehot, dim=1)  # picks up to and including layer k
    return hits == onehot  # nothing before k


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


def _check(states: Tensor, target: Tensor, name: str, from_logits: bool, values: bool = True) -> None:
    """Types and shapes; with ``values``, NaN (and, for logits, +inf) in ``states`` too."""
    if not isinstance(states, Tensor) or not states.is_floating_point():
        raise ValueError(f"states must be a floating-point tensor, got {_describe(states)}")
    if not isinstance(target, Tensor) or target.is_complex():
        raise ValueError(f"{name} must be a real tensor, got {_describe(target)}")
    if states.dim() != 3:
        raise ValueError(f"states must have shape (B, K, N), got {tuple(states.shape)}")
    B, _, N = states.shape
    if tuple(target.shape) != (B, N):
        raise ValueError(f"{name} must have shape ({B}, {N}), got {tuple(target.shape)}")
    # NaN (and, for logits, +inf) would turn the loss into NaN or inf without a word. The
    # maximum shows both in one pass (NaN propagates through it).
    if not values:
        return
    top = float(states.detach().amax()) if states.numel() else 0.0
    if math.isnan(top) or (from_logits and top == float("inf")):
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

    Float32 logits on the CPU take a C kernel (one pass a problem for the loss, one for
    its gradient; built with the others of :mod:`dgn._kernels`, ``DGN_KERNELS=0`` turns
    it off): the same values up to float rounding, a second derivative through the
    PyTorch composition.

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
    from dgn import _kernels

    # float32 logits on the CPU: one pass in the kernel, which checks the values as it reads them
    kernel = from_logits and isinstance(states, Tensor) and _kernels.layerwise_ce_applies(states)
    _check(states, gold, "gold", from_logits, values=not kernel)
    try:
        picks = None if indices is None else _picks(states, indices, from_logits)
    except ValueError:
        if kernel:  # the value check comes first, as without the kernel
            _check(states, gold, "gold", from_logits)
        raise
    if kernel:
        per_problem = _kernels.layerwise_ce(states, gold, picks, _layerwise_terms)
        if per_problem is not None:
            return _reduce(per_problem, reduction)
        _check(states, gold, "gold", from_logits)  # a NaN or +inf logit: the error
    if picks is None:
        picks = _picks(states, None, from_logits)
    return _reduce(_layerwise_terms(states, gold.bool(), picks, from_logits), reduction)


def _layerwise_terms(states: Tensor, gold: Tensor, picks: Tensor, from_logits: bool = True) -> Tensor:
    """``(B,)`` each problem's layer-wise cross entropy, composed of PyTorch operations."""
    logp = _log_probs(states, from_logits)  # (B, K, N)
    open_gold = gold.unsqueeze(1) & _unpicked_before(picks, states.shape[-1])  # (B, K, N)
    return torch.where(open_gold, -logp, torch.zeros_like(logp)).sum(dim=(1, 2))


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


def set_recall_cross_entropy(
    states: Tensor,
    gold_sets: Tensor,
    indices: Tensor | None = None,
    reduction: Reduction = "mean",
    from_logits: bool = True,
) -> Tensor:
    r"""Layer-wise cross entropy against the picks that raise recall the most.

    With alternative gold sets :math:`G_1, \dots, G_m` (any one of which is complete
    evidence) recall after the picks ``A`` is :math:`R(A) = \max_j |G_j \cap A| / |G_j|`.
    At layer k, with ``A`` the items picked by the layers before it, the target is

    .. math::

        p_k[v] \propto R(A \cup \{v\}) - R(A)

    over the items not yet picked: the items that complete the best-covered set fastest.
    Where no item raises recall (a gold set is complete, or no set has anything left
    that would overtake it), the target falls back to the gold items not yet picked
    (each equally), which still raise precision; a layer with neither adds nothing. With
    a single gold set this is :func:`soft_label_cross_entropy` with binary relevance.
    The union target of that loss treats a second sentence of an *other* gold set as
    good as one that completes the set begun; this one does not.

    Args:
        states: ``(B, K, N)`` layer logits (``-inf`` where unavailable) or, with
            ``from_logits=False``, layer distributions.
        gold_sets: ``(B, G, N)`` bool, ``gold_sets[b, j, v]`` True when item v is in
            problem b's j-th gold set; all-False rows are padding (see
            :func:`gold_set_tensor`).
        indices: ``(B, K)`` the picks of each layer; default: each layer's argmax.
        reduction: ``"none"`` (``(B,)``), ``"mean"`` or ``"sum"``.
        from_logits: Whether ``states`` are logits (default) or probabilities.

    Returns:
        The loss, ``(B,)`` or a scalar.

    Raises:
        ValueError: As :func:`layerwise_cross_entropy`, or ``gold_sets`` not a
            ``(B, G, N)`` bool tensor.

    Example:
        >>> logits = torch.zeros(1, 2, 4)                  # uniform layers, picks 0 then 1
        >>> logits[0, 1, 0] = float("-inf")
        >>> sets = torch.tensor([[[1, 1, 0, 0], [0, 0, 1, 1]]]).bool()  # {0, 1} or {2, 3}
        >>> loss = set_recall_cross_entropy(logits, sets, torch.tensor([[0, 1]]))
        >>> round(float(loss), 4)  # layer 1: any gold item (log 4); layer 2: item 1 only (log 3)
        2.4849
    """
    if not isinstance(gold_sets, Tensor) or gold_sets.dtype != torch.bool or gold_sets.dim() != 3:
        raise ValueError(f"gold_sets must be a (B, G, N) bool tensor, got {_describe(gold_sets)}")
    _check(states, gold_sets.any(1), "gold_sets.any(1)", from_logits)
    B, K, N = states.shape
    logp = _log_probs(states, from_logits)
    open_items = _unpicked_before(_picks(states, indices, from_logits), N)  # (B, K, N)
    sets = gold_sets.to(logp.dtype)  # (B, G, N)
    size = sets.sum(-1)  # (B, G)
    share = torch.where(size > 0, 1.0 / size.clamp_min(1.0), torch.zeros_like(size))  # (B, G)
    picked = (~open_items).to(logp.dtype)  # (B, K, N) picked before layer k
    cover = torch.einsum("bkn,bgn->bkg", picked, sets) * share.unsqueeze(1)  # (B, K, G)
    best = cover.amax(-1, keepdim=True) if cover.shape[-1] else cover.new_zeros(B, K, 1)
    # recall after adding v through set j: cover_j + 1/|G_j| where v is an open item of G_j
    through = (cover - best + share.unsqueeze(1)).unsqueeze(-1) * sets.unsqueeze(1)  # (B, K, G, N)
    gain = through.amax(2).clamp_min(0.0) if through.shape[2] else logp.new_zeros(B, K, N)
    gain = gain * open_items.to(gain.dtype)
    union = (gold_sets.any(1).unsqueeze(1) & open_items).to(gain.dtype)  # (B, K, N)
    has_gain = gain.sum(-1, keepdim=True) > 1e-9
    r = torch.where(has_gain, gain, union)
    total = r.sum(-1, keepdim=True)
    p = r / torch.where(total > 0, total, torch.ones_like(total))
    terms = torch.where(p > 0, -p * logp, torch.zeros_like(logp))
    return _reduce(terms.sum(dim=(1, 2)), reduction)


def gold_set_tensor(gold: list[list[list[int]]], n: int, device: torch.device | str | None = None) -> Tensor:
    """``(B, G, n)`` bool from each problem's gold sets (lists of candidate indices), padded
    with all-False sets to the largest G; indices ``>= n`` are left out."""
    G = max((len(g) for g in gold), default=0)
    out = torch.zeros(len(gold), G, n, dtype=torch.bool)
    for b, groups in enumerate(gold):
        for j, group in enumerate(groups):
            for v in group:
                if 0 <= v < n:
                    out[b, j, v] = True
    return out if device is None else out.to(device)


class _LayerwiseLoss(nn.Module):
    """A layer-wise loss's module form: its ``reduction`` and ``from_logits`` kept, the
    function of the same name (:attr:`function`) applied in ``forward``."""

    function: Any  # set by each subclass (a staticmethod)

    def __init__(self, reduction: Reduction = "mean", from_logits: bool = True) -> None:
        super().__init__()
        self.reduction = reduction
        self.from_logits = from_logits

    def forward(self, states: Tensor, target: Tensor, indices: Tensor | None = None) -> Tensor:
        return self.function(states, target, indices, self.reduction, self.from_logits)


class LayerwiseCrossEntropy(_LayerwiseLoss):
    """Module form of :func:`layerwise_cross_entropy` (``target``: the gold, ``(B, N)``)."""

    function = staticmethod(layerwise_cross_entropy)


class SetRecallCrossEntropy(_LayerwiseLoss):
    """Module form of :func:`set_recall_cross_entropy` (the end-to-end DGN's default loss;
    ``target``: the gold sets, ``(B, G, N)``)."""

    function = staticmethod(set_recall_cross_entropy)


class SoftLabelCrossEntropy(_LayerwiseLoss):
    """Module form of :func:`soft_label_cross_entropy` (``target``: the relevance, ``(B, N)``)."""

    function = staticmethod(soft_label_cross_entropy)


# -- one ranking layer: soft cross entropy and ApproxNDCG ---------------------------------


def _check_flat(logits: Tensor, relevance: Tensor, mask: Tensor | None) -> Tensor:
    """Validate ``(B, N)`` inputs; the mask (all True when None) as a bool tensor."""
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point tensor, got {_describe(logits)}")
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, N), got {tuple(logits.shape)}")
    if not isinstance(relevance, Tensor) or relevance.is_complex() or relevance.dtype == torch.bool:
        raise ValueError(f"relevance must be a real tensor, got {_describe(relevance)}")
    if tuple(relevance.shape) != tuple(logits.shape):
        raise ValueError(f"relevance must have shape {tuple(logits.shape)}, got {tuple(relevance.shape)}")
    if mask is None:
        mask = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    elif not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != tuple(logits.shape):
        raise ValueError(f"mask must be a bool tensor of shape {tuple(logits.shape)}, got {_describe(mask)}")
    if not bool(torch.isfinite(relevance).all()) or bool((relevance < 0).any()):
        raise ValueError("relevance must be finite and nonnegative")
    real = logits[mask]
    if bool(torch.isnan(real).any()) or bool((real == float("inf")).any()):
        raise ValueError("logits contain NaN or +inf values at unmasked candidates")
    return mask


def _reduce_rows(per_row: Tensor, has: Tensor, reduction: str) -> Tensor:
    """Reduce per-row losses; ``"mean"`` averages over the rows that have a target only."""
    if reduction == "none":
        return per_row
    if reduction == "sum":
        return per_row.sum()
    if reduction == "mean":
        n = has.sum()
        return per_row.sum() / n.clamp_min(1).to(per_row.dtype)
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def soft_cross_entropy(
    logits: Tensor, relevance: Tensor, mask: Tensor | None = None, reduction: Reduction = "mean"
) -> Tensor:
    r"""Soft-label cross entropy of one ranking layer (the FGA-NDCG model card's loss).

    Per row, the target is ``p = r / sum(r)`` over the real candidates and the loss is
    ``-sum_v p_v log softmax(logits)_v``, the softmax taken over the real candidates only.
    On one-hot relevance it equals ``torch.nn.functional.cross_entropy``.

    Args:
        logits: ``(B, N)`` scores (anything, ``-inf`` included, where ``mask`` is False).
        relevance: ``(B, N)`` nonnegative grades (binary gold for the sparse loss).
        mask: ``(B, N)`` bool, True for real candidates; padded ones get no probability
            and no gradient. None: all real.
        reduction: ``"none"`` (``(B,)``), ``"sum"``, or ``"mean"`` over the rows with some
            relevance (rows without any add 0 and are not counted; 0.0 when none has).

    Returns:
        The loss.

    Raises:
        ValueError: Wrong types or shapes, NaN or ``+inf`` logits at real candidates,
            negative or non-finite relevance, or an unknown ``reduction``.

    Example:
        >>> logits = torch.tensor([[2.0, 0.0, 0.0]])
        >>> round(float(soft_cross_entropy(logits, torch.tensor([[1.0, 1.0, 0.0]]))), 4)
        1.2395
    """
    mask = _check_flat(logits, relevance, mask)
    r = torch.where(mask, relevance.to(logits.dtype), torch.zeros_like(logits))
    total = r.sum(-1, keepdim=True)
    has = total.squeeze(-1) > 0
    p = r / torch.where(total > 0, total, torch.ones_like(total))
    safe = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
    all_padding = ~mask.any(-1, keepdim=True)
    logp = torch.log_softmax(torch.where(all_padding, torch.zeros_like(safe), safe), dim=-1)
    terms = torch.where(p > 0, -p * logp, torch.zeros_like(logp))
    return _reduce_rows(terms.sum(-1), has, reduction)


def _gain(relevance: Tensor, gain: str) -> Tensor:
    if gain == "exp":
        return torch.expm1(relevance * math.log(2.0))
    if gain == "linear":
        return relevance
    raise ValueError(f"gain must be 'exp' or 'linear', got {gain!r}")


def _check_approx(temperature: float, k: int | None) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        raise ValueError(f"k must be a positive integer or None, got {k!r}")


def _approx_ndcg_rows(logits: Tensor, relevance: Tensor, mask: Tensor, temperature: float, k: int | None,
                      gain: str) -> tuple[Tensor, Tensor]:
    """Per-row ``1 - approxNDCG`` and whether the row has an ideal DCG > 0."""
    g = torch.where(mask, _gain(relevance.to(logits.dtype), gain), torch.zeros_like(logits))
    s = torch.where(mask, logits, torch.zeros_like(logits))
    # smooth rank: 1 + sum over the other real items u of sigmoid((s_u - s_v) / T)
    diff = (s.unsqueeze(-2) - s.unsqueeze(-1)) / temperature  # [b, v, u] = s_u - s_v
    pair = torch.sigmoid(diff) * (mask.unsqueeze(-2) & mask.unsqueeze(-1)).to(s.dtype)
    rank = 1.0 + pair.sum(-1) - torch.sigmoid(torch.zeros((), dtype=s.dtype)) * mask.to(s.dtype)  # drop u = v
    weight = 1.0 / torch.log2(1.0 + rank)
    if k is not None:
        weight = weight * torch.sigmoid((k + 0.5 - rank) / temperature)
    dcg = (g * weight * mask.to(s.dtype)).sum(-1)
    ideal_gains = torch.sort(g, dim=-1, descending=True).values
    positions = torch.arange(1, g.shape[-1] + 1, dtype=s.dtype, device=s.device)
    discount = 1.0 / torch.log2(1.0 + positions)
    if k is not None:
        discount = torch.where(positions <= k, discount, torch.zeros_like(discount))
    ideal = (ideal_gains * discount).sum(-1)
    has = ideal > 0
    loss = torch.where(has, 1.0 - dcg / torch.where(has, ideal, torch.ones_like(ideal)), torch.zeros_like(ideal))
    return loss, has


def approx_ndcg_loss(
    logits: Tensor,
    relevance: Tensor,
    temperature: float = 1.0,
    k: int | None = None,
    mask: Tensor | None = None,
    reduction: Reduction = "mean",
    gain: str = "exp",
) -> Tensor:
    r"""ApproxNDCG (Qin, Liu and Li, 2010): ``1 -`` a smooth nDCG of one ranking layer.

    The rank of item v is replaced by the smooth rank
    ``1 + sum_{u != v} sigmoid((s_u - s_v) / temperature)`` over the real candidates, and
    nDCG's discount ``1 / log2(1 + rank)`` is taken of it. A cutoff ``k`` weights each
    item by the smooth indicator ``sigmoid((k + 0.5 - rank) / temperature)``; the ideal
    DCG is exact. As the temperature goes to 0 (scores without ties) the value tends to
    ``1 - nDCG@k`` of the ranking by score.

    Args:
        logits: ``(B, N)`` scores.
        relevance: ``(B, N)`` nonnegative grades.
        temperature: Smoothness of the ranks (> 0).
        k: Cutoff, or None for the whole list.
        mask: ``(B, N)`` bool, True for real candidates (padded ones are out of every rank).
        reduction: As :func:`soft_cross_entropy` (the mean is over rows with an ideal DCG > 0).
        gain: ``"exp"`` (``2**r - 1``) or ``"linear"`` (``r``), as :data:`dgn.metrics.GAINS`.

    Returns:
        The loss in ``[0, 1]`` per row (before reduction).

    Raises:
        ValueError: As :func:`soft_cross_entropy`, or a bad ``temperature``, ``k`` or ``gain``.
    """
    mask = _check_flat(logits, relevance, mask)
    _check_approx(temperature, k)
    _gain(relevance[:0], gain)  # validates the name
    loss, has = _approx_ndcg_rows(logits, relevance, mask, float(temperature), k, gain)
    return _reduce_rows(loss, has, reduction)


def layerwise_approx_ndcg_loss(
    states: Tensor,
    relevance: Tensor,
    temperature: float = 1.0,
    k: int | None = None,
    indices: Tensor | None = None,
    reduction: Reduction = "mean",
    gain: str = "exp",
) -> Tensor:
    """ApproxNDCG per greedy layer, summed over the layers (the DGN's graded ranking loss).

    Layer k ranks the candidates still open at that layer (finite logits, not picked by
    an earlier layer) by its logits; its loss is :func:`approx_ndcg_loss` over those
    candidates with their relevance. Layers with no open relevant candidate add 0.

    Args:
        states: ``(B, K, N)`` layer logits (``-inf`` where unavailable).
        relevance: ``(B, N)`` nonnegative grades.
        temperature, k, gain: As :func:`approx_ndcg_loss`.
        indices: ``(B, K)`` the picks; default each layer's argmax.
        reduction: ``"none"`` (``(B,)``), ``"mean"`` or ``"sum"`` over problems.

    Raises:
        ValueError: As :func:`layerwise_cross_entropy` and :func:`approx_ndcg_loss`.
    """
    _check(states, relevance, "relevance", True)
    if bool((relevance < 0).any()) or not bool(torch.isfinite(relevance).all()):
        raise ValueError("relevance must be finite and nonnegative")
    _check_approx(temperature, k)
    _gain(relevance[:0], gain)
    B, K, N = states.shape
    open_items = _unpicked_before(_picks(states, indices, True), N) & torch.isfinite(states)  # (B, K, N)
    flat_mask = open_items.reshape(B * K, N)
    flat_rel = relevance.to(states.dtype).unsqueeze(1).expand(B, K, N).reshape(B * K, N)
    loss, _ = _approx_ndcg_rows(states.reshape(B * K, N), flat_rel, flat_mask, float(temperature), k, gain)
    return _reduce(loss.reshape(B, K).sum(-1), reduction)


def mix_sparse_dense(dense: Tensor, sparse: Tensor, sparse_weight: float) -> Tensor:
    """The FGA-NDCG model card's mixing: ``dense + sparse_weight * sparse``.

    Raises:
        ValueError: ``sparse_weight`` negative or not finite.
    """
    if isinstance(sparse_weight, bool) or not isinstance(sparse_weight, (int, float)) \
            or not math.isfinite(sparse_weight) or sparse_weight < 0:
        raise ValueError(f"sparse_weight must be a finite number >= 0, got {sparse_weight!r}")
    return dense + sparse_weight * sparse


class SoftCrossEntropy(nn.Module):
    """Module form of :func:`soft_cross_entropy`."""

    def __init__(self, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, logits: Tensor, relevance: Tensor, mask: Tensor | None = None) -> Tensor:
        return soft_cross_entropy(logits, relevance, mask, self.reduction)


class ApproxNDCGLoss(nn.Module):
    """Module form of :func:`approx_ndcg_loss`."""

    def __init__(self, temperature: float = 1.0, k: int | None = None, reduction: Reduction = "mean",
                 gain: str = "exp") -> None:
        super().__init__()
        _check_approx(temperature, k)
        self.temperature, self.k, self.reduction, self.gain = temperature, k, reduction, gain

    def forward(self, logits: Tensor, relevance: Tensor, mask: Tensor | None = None) -> Tensor:
        return approx_ndcg_loss(logits, relevance, self.temperature, self.k, mask, self.reduction, self.gain)


class LayerwiseApproxNDCGLoss(nn.Module):
    """Module form of :func:`layerwise_approx_ndcg_loss`."""

    def __init__(self, temperature: float = 1.0, k: int | None = None, reduction: Reduction = "mean",
                 gain: str = "exp") -> None:
        super().__init__()
        _check_approx(temperature, k)
        self.temperature, self.k, self.reduction, self.gain = temperature, k, reduction, gain

    def forward(self, states: Tensor, relevance: Tensor, indices: Tensor | None = None) -> Tensor:
        return layerwise_approx_ndcg_loss(states, relevance, self.temperature, self.k, indices, self.reduction,
                                          self.gain)


#: The old name of :class:`LayerwiseApproxNDCGLoss`, kept so that code written against it runs.
LayerwiseApproxNDCG = LayerwiseApproxNDCGLoss
