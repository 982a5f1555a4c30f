"""Input checks shared by the public functions.

Every public entry point validates at the boundary and raises :class:`ValueError` naming
what it received (shape, dtype, value), so a user sees the mistake, not a broadcasting
error three calls deeper.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_features", "as_mask", "check_k", "check_tau", "as_modular"]


def _describe(x: Any) -> str:
    if isinstance(x, (Tensor, np.ndarray)):
        return f"{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__}"


def as_features(
    features: Any, *, name: str = "features", nonnegative: bool = False, values: bool = True
) -> tuple[Tensor, bool]:
    """Turn ``(N, E)`` or ``(B, N, E)`` input into a floating ``(B, N, E)`` tensor.

    Args:
        features: A tensor or numpy array of rank 2 or 3.
        name: The argument's name, used in error messages.
        nonnegative: Reject negative entries (SCMM needs nonnegative features).
        values: Check the entries (NaN, inf, the sign); False leaves that to a caller whose
            kernel checks them as it reads them.

    Returns:
        The ``(B, N, E)`` tensor and whether a batch axis was added.

    Raises:
        ValueError: Wrong type or rank, NaN/inf entries, or negative entries when
            ``nonnegative`` is set.
    """
    if isinstance(features, np.ndarray):
        if not np.issubdtype(features.dtype, np.number):
            raise ValueError(f"{name} must be numeric, got {_describe(features)}")
        features = torch.from_numpy(np.ascontiguousarray(features))
    if not isinstance(features, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {_describe(features)}")
    if features.dim() not in (2, 3):
        raise ValueError(f"{name} must have shape (N, E) or (B, N, E), got {_describe(features)}")
    if features.is_complex():
        raise ValueError(f"{name} must be real, got {_describe(features)}")
    if not features.is_floating_point():
        features = features.to(torch.get_default_dtype())
    unbatched = features.dim() == 2
    if unbatched:
        features = features.unsqueeze(0)
    if values and features.numel():
        # Without a sign to check, a sum shows NaN and inf (in half the time of aminmax); a
        # non-finite sum, which finite values can also overflow to, is then looked at closely.
        if not nonnegative and math.isfinite(float(features.detach().sum())):
            return features, unbatched
        # One reduction pass: NaN propagates into min and max, inf shows in them.
        lowest, highest = (float(v) for v in torch.aminmax(features.detach()))
        if not (math.isfinite(lowest) and math.isfinite(highest)):
            raise ValueError(f"{name} contains NaN or inf values ({_describe(features)})")
        if nonnegative and lowest < 0:
            raise ValueError(
                f"{name} must be nonnegative for a sum-of-concave objective, got minimum {lowest:g}"
            )
    return features, unbatched


def as_mask(mask: Any, batch: int, items: int, device: torch.device) -> Tensor:
    """Check a ``(B, N)`` validity mask (True = real candidate); None means all valid.

    A rank-1 ``(N,)`` mask is accepted when ``B == 1``.
    """
    if mask is None:
        return torch.ones(batch, items, dtype=torch.bool, device=device)
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(mask)
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask must be a bool tensor of shape ({batch}, {items}), got {_describe(mask)}")
    if mask.dim() == 1 and batch == 1:
        mask = mask.unsqueeze(0)
    if tuple(mask.shape) != (batch, items):
        raise ValueError(f"mask must have shape ({batch}, {items}), got {_describe(mask)}")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"mask must be boolean (or 0/1 integers), got {_describe(mask)}")
        mask = mask.bool()
    return mask.to(device)


def as_modular(modular: Any, batch: int, items: int, like: Tensor, values: bool = True) -> Tensor | None:
    """Check an optional per-item modular bonus of shape ``(B, N)`` (its entries finite
    unless ``values`` is False, as in :func:`as_features`)."""
    if modular is None:
        return None
    if isinstance(modular, np.ndarray):
        modular = torch.from_numpy(modular)
    if not isinstance(modular, Tensor):
        raise ValueError(f"modular must be a tensor of shape ({batch}, {items}), got {_describe(modular)}")
    if modular.dim() == 1 and batch == 1:
        modular = modular.unsqueeze(0)
    if tuple(modular.shape) != (batch, items):
        raise ValueError(f"modular must have shape ({batch}, {items}), got {_describe(modular)}")
    modular = modular.to(dtype=like.dtype, device=like.device)  # checked after: float64 may overflow float32
    if values and not bool(torch.isfinite(modular).all()):
        raise ValueError("modular contains NaN or inf values")
    return modular


def check_k(k: Any) -> int:
    """A budget must be an integer >= 0."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer >= 0, got {k!r} ({type(k).__name__})")
    if k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k}")
    return int(k)


def check_tau(tau: Any) -> float:
    """A temperature must be a finite number > 0."""
    try:
        value = float(tau)
    except (TypeError, ValueError):
        raise ValueError(f"tau must be a positive number, got {tau!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    return value
