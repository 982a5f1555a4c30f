"""Gradient clipping: the one policy of :func:`dgn.training.fit` (the total 2-norm at most
the config's ``max_grad_norm``), and a fast path for the common case where nothing is clipped."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["clip_gradients"]


def clip_gradients(parameters: torch.Tensor | Iterable[torch.Tensor], max_norm: float) -> float:
    """Scale the gradients so that their total 2-norm is at most ``max_norm``; return the
    norm before. The gradients come out as ``torch.nn.utils.clip_grad_norm_`` leaves them,
    bit for bit, without its passes when they are within the bound (its factor is then
    exactly 1).

    Float32 CPU gradients are first measured in one C pass (:func:`dgn._kernels.sum_squares`,
    summed in double). Where that norm is below ``max_norm`` by more than PyTorch's float32
    norm can be off by in any order of summation (``n + k + 6`` units of float32 rounding,
    ``n`` the largest gradient's size and ``k`` their number: 0.5% for a 300 x 300 weight),
    nothing is scaled and that norm is returned: it equals ``clip_grad_norm_``'s up to float
    rounding. Otherwise (near or above the bound, NaN, inf or squares beyond float range,
    other dtypes or devices, no kernel) PyTorch measures the norm, whose value is then
    returned bit for bit, and scales; torch before 2.6, which lacks the two halves of
    ``clip_grad_norm_``, runs it whole."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return 0.0
    from dgn import _kernels

    grads = [p.grad for p in params]
    squares = _kernels.sum_squares(grads)
    if squares is not None and squares <= 1e38:  # False for NaN; torch's float32 sum cannot overflow
        norm = math.sqrt(squares)
        slack = (max(g.numel() for g in grads) + len(grads) + 6) * 2.0**-24
        if norm * (1 + slack) * (1 + 1e-4) + 1e-6 <= max_norm:
            return norm
    if not hasattr(nn.utils, "get_total_norm"):
        return float(nn.utils.clip_grad_norm_(params, max_norm))
    total = nn.utils.get_total_norm(grads)
    factor = float(max_norm / (total + 1e-6))  # as clip_grads_with_norm_ computes it, before its clamp at 1
    if not factor >= 1.0:  # below 1, or NaN
        nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return float(total)
