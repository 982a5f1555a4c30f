"""Monotone submodular objectives that greedy selection maximises.

Two families share one interface, so hard greedy (:func:`dgn.greedy_select`) and the
relaxed, differentiable greedy layers (:func:`dgn.soft_greedy_select`) drive the same
objects:

* :class:`SCMM`, the sum of concave over modular functions ("feature-based" functions)
  of the Differentiable Greedy Networks paper (Powers et al., 2018, eq. 2)::

      f(A) = sum_e alpha_e * phi(c_e(A)) + sum_{v in A} beta_v,   c(A) = sum_{v in A} H[v]

* :class:`FacilityLocation`, ``f(A) = sum_i max_{v in A} S[i, v]`` with a nonnegative
  similarity ``S = H H^T`` between the items of a problem.

The interface (all batched over B problems of N candidates):

* ``init_state(features, mask)`` -> the state of the empty set,
* ``gains(features, state, mask)`` -> ``(B, N)`` marginal gains of every candidate,
* ``update(features, state, weights)`` -> the state after adding ``weights`` (``(B, N)``,
  a one-hot pick or a relaxed distribution over candidates),
* ``value(features, selected, mask)`` -> ``(B,)`` objective of a (possibly soft) set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dgn._validation import as_features, as_mask, as_modular

__all__ = [
    "CONCAVE_FUNCTIONS",
    "Objective",
    "SCMM",
    "FacilityLocation",
    "SumObjective",
    "make_objective",
    "concave",
]

# Below this input the derivative of sqrt / x**p is taken at the floor: the true slope at
# 0 is infinite, and ReLU encoders put exact (and near) zeros there. Forward values stay exact.
_GRAD_FLOOR = 1e-3
_SQRT_GRAD_FLOOR = math.sqrt(_GRAD_FLOOR)

# Without autograd, SCMM gains are computed in blocks of about this many feature entries,
# so the (rows, E) scratch buffer stays in cache (measured in benchmarks/greedy_speed.py).
_GAINS_BLOCK = 1 << 18


class _FlooredPow(torch.autograd.Function):
    """``x ** p`` (``0 < p <= 1``) whose derivative is floored at ``x = 1e-3``.

    ReLU encoders emit exact zeros, where the true derivative of ``sqrt`` (and of any
    ``x ** p`` with ``p < 1``) is infinite and would turn one gradient step into NaNs.
    The forward value is exact.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.p = p
        return x.pow(p)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        p = ctx.p
        return grad * p * x.clamp_min(_GRAD_FLOOR).pow(p - 1.0), None


class _FlooredSqrt(torch.autograd.Function):
    """``sqrt(x)`` whose derivative is floored at ``x = 1e-3``, as :class:`_FlooredPow` with
    ``p = 1/2``, in three passes instead of five: it keeps ``y = sqrt(x)`` and returns
    ``grad / (2 max(y, sqrt(1e-3)))`` (``sqrt`` is increasing, so flooring ``y`` at the root
    of the floor is flooring ``x``). The forward value is exact."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        y = x.sqrt()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        denom = y.clamp_min(_SQRT_GRAD_FLOOR)
        if torch.is_grad_enabled():  # create_graph: keep every step on the tape
            return grad / denom * 0.5
        return torch.div(grad, denom, out=denom).mul_(0.5)


def _sqrt(x: Tensor, inplace: bool) -> Tensor:
    if inplace:
        return x.sqrt_()
    if not x.requires_grad:
        return x.sqrt()
    return _FlooredSqrt.apply(x)  # type: ignore[no-any-return]


def _log1p(x: Tensor, inplace: bool, scale: float = 1.0) -> Tensor:
    if inplace:
        return x.div_(scale).log1p_() if scale != 1.0 else x.log1p_()
    return torch.log1p(x / scale)


def _exp(x: Tensor, inplace: bool, scale: float = 1.0) -> Tensor:
    # phi(x) = 1 - exp(-x / scale)
    if inplace:
        return x.mul_(-1.0 / scale).expm1_().neg_()
    return -torch.expm1(-x / scale)


def _saturate(x: Tensor, inplace: bool, cap: float = 1.0) -> Tensor:
    if inplace:
        return x.clamp_(max=cap)
    return torch.clamp(x, max=cap)


def _pow(x: Tensor, inplace: bool, p: float = 0.5) -> Tensor:
    if inplace:
        return x.pow_(p)
    if x.requires_grad and p < 1.0:
        return _FlooredPow.apply(x, p)  # type: ignore[no-any-return]
    return x.pow(p)


ConcaveFn = Callable[..., Tensor]

#: Concave, nondecreasing functions with ``phi(0) = 0``: name -> (function, default params).
CONCAVE_FUNCTIONS: dict[str, tuple[ConcaveFn, dict[str, float]]] = {
    "sqrt": (_sqrt, {}),
    "log1p": (_log1p, {"scale": 1.0}),
    "exp": (_exp, {"scale": 1.0}),
    "saturate": (_saturate, {"cap": 1.0}),
    "pow": (_pow, {"p": 0.5}),
}

# Right derivatives phi'(c) for c >= 0 (inf where unbounded): by concavity
# phi(c + x) - phi(c) <= phi'(c) x, the tangent bound lazy greedy prunes with.
_DERIVATIVES: dict[str, Callable[..., Tensor]] = {
    "sqrt": lambda c: 0.5 / c.sqrt(),
    "log1p": lambda c, scale: 1.0 / (scale + c),
    "exp": lambda c, scale: torch.exp(-c / scale) / scale,
    "saturate": lambda c, cap: (c < cap).to(c.dtype),
    "pow": lambda c, p: p * c.pow(p - 1.0),
}


def _check_concave(name: str, params: dict[str, Any]) -> dict[str, float]:
    if name not in CONCAVE_FUNCTIONS:
        known = ", ".join(sorted(CONCAVE_FUNCTIONS))
        raise ValueError(f"unknown concave function {name!r}; known: {known}")
    _, defaults = CONCAVE_FUNCTIONS[name]
    unknown = set(params) - set(defaults)
    if unknown:
        allowed = ", ".join(sorted(defaults)) or "none"
        raise ValueError(
            f"unknown parameter(s) {sorted(unknown)} for concave function {name!r}; allowed: {allowed}"
        )
    merged = {**defaults, **{k: float(v) for k, v in params.items()}}
    for key, value in merged.items():
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"parameter {key} of concave function {name!r} must be > 0, got {value}")
    if name == "pow" and merged["p"] > 1.0:
        raise ValueError(f"parameter p of 'pow' must be in (0, 1] to stay concave, got {merged['p']}")
    return merged


def concave(name: str, x: Tensor, **params: float) -> Tensor:
    """Apply a named concave function elementwise.

    Args:
        name: One of ``sqrt``, ``log1p`` (``log(1 + x / scale)``), ``exp``
            (``1 - exp(-x / scale)``), ``saturate`` (``min(x, cap)``), ``pow`` (``x ** p``,
            ``0 < p <= 1``).
        x: Nonnegative input of any shape.
        **params: The function's parameters (``scale``, ``cap`` or ``p``).

    Example:
        >>> concave("saturate", torch.tensor([0.5, 2.0]), cap=1.0)
        tensor([0.5000, 1.0000])
    """
    merged = _check_concave(name, params)
    fn, _ = CONCAVE_FUNCTIONS[name]
    return fn(x, False, **merged)


class Objective(nn.Module):
    """Base class of the batched set functions greedy selection maximises."""

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> Any:
        """The state of the empty set for ``features`` of shape ``(B, N, E)``."""
        raise NotImplementedError

    def gains(
        self,
        features: Tensor,
        state: Any,
        mask: Tensor | None = None,
        modular: Tensor | None = None,
    ) -> Tensor:
        """Marginal gain ``f(A + v) - f(A)`` of every candidate, shape ``(B, N)``."""
        raise NotImplementedError

    def _gain_upper_bounds(
        self, features: Tensor, state: Any, index: Tensor | None = None
    ) -> Tensor | None:
        """Cheap upper bounds on the gains of the candidates ``index`` (``(B, M)``; None:
        all), or None: lazy greedy then prunes by stale gains only."""
        return None

    def candidate_gains(self, features: Tensor, state: Any, index: Tensor) -> Tensor:
        """Gains of the candidates ``index`` (``(B, M)`` long) only; ``(B, M)``.

        The default computes every gain and gathers; subclasses override it when a
        subset is cheaper (lazy greedy evaluates one candidate at a time).
        """
        return self.gains(features, state).gather(1, index)

    def update(self, features: Tensor, state: Any, weights: Tensor) -> Any:
        """The state after adding ``weights`` (``(B, N)``: one-hot or a distribution)."""
        raise NotImplementedError

    def _add_items(self, features: Tensor, state: Any, index: Tensor, present: Tensor) -> Any:
        """The state after adding item ``index[b]`` to problem ``b`` where ``present[b]``
        (hard greedy's step): :meth:`update` with the one-hot weights."""
        B = features.shape[0]
        rows = torch.arange(B, device=features.device)
        onehot = features.new_zeros(B, features.shape[1])
        onehot[rows[present], index[present]] = 1.0
        return self.update(features, state, onehot)

    def value(
        self,
        features: Any,
        selected: Any,
        mask: Any = None,
        modular: Any = None,
    ) -> Tensor:
        """``f(S)`` for ``selected``, a ``(B, N)`` bool set or nonnegative soft weights.

        Args:
            features: ``(B, N, E)`` or ``(N, E)``.
            selected: ``(B, N)`` (or ``(N,)``) bool or float weights.
            mask: Optional ``(B, N)`` validity mask; masked items never count.
            modular: Optional ``(B, N)`` per-item bonus added for selected items.

        Returns:
            ``(B,)`` objective values (``()`` for unbatched input).

        Raises:
            ValueError: Bad features or mask (as in :func:`dgn.greedy_select`), or
                ``selected`` of the wrong shape, not numeric, or with negative, NaN or
                inf weights.
        """
        feats, unbatched = as_features(features, nonnegative=self._needs_nonnegative)
        B, N, _ = feats.shape
        valid = as_mask(mask, B, N, feats.device)
        if not isinstance(selected, Tensor):
            try:
                selected = torch.as_tensor(selected)
            except (TypeError, ValueError, RuntimeError):
                raise ValueError(
                    f"selected must be a ({B}, {N}) bool set or nonnegative weights, "
                    f"got {type(selected).__name__}"
                ) from None
        if selected.dim() == 1 and B == 1:
            selected = selected.unsqueeze(0)
        if tuple(selected.shape) != (B, N):
            raise ValueError(f"selected must have shape ({B}, {N}), got {tuple(selected.shape)}")
        if selected.is_complex() or (
            selected.dtype != torch.bool
            and selected.numel()
            and not bool(((selected >= 0) & torch.isfinite(selected)).all())
        ):
            raise ValueError("selected must be a bool set or finite, nonnegative weights")
        weights = selected.to(feats.dtype) * valid.to(feats.dtype)
        state = self.update(feats, self.init_state(feats, valid), weights)
        out = self._state_value(feats, state)
        mod = as_modular(modular, B, N, feats)
        if mod is not None:
            out = out + (weights * mod).sum(-1)
        return out.squeeze(0) if unbatched else out

    _needs_nonnegative = False

    def _state_value(self, features: Tensor, state: Any) -> Tensor:
        raise NotImplementedError


class SCMM(Objective):
    r"""Sum of concave over modular functions (feature-based submodular function).

    .. math::

        f(A) = \sum_e \alpha_e \, \phi\Big(\sum_{v \in A} H_{v e}\Big) + \sum_{v \in A} \beta_v,
        \qquad
        \Delta(v \mid A) = \sum_e \alpha_e \big(\phi(c_e + H_{v e}) - \phi(c_e)\big) + \beta_v

    with ``H >= 0``, ``alpha >= 0`` and ``phi`` concave, nondecreasing, ``phi(0) = 0``:
    monotone submodular, so greedy is ``(1 - 1/e)``-optimal under a cardinality budget
    (Nemhauser et al., 1978). This is eq. (2) of Powers et al., "Differentiable Greedy
    Networks" (2018); with ``alpha = 1`` it is apricot's ``FeatureBasedSelection``.

    Args:
        concave: ``"sqrt"``, ``"log1p"``, ``"exp"``, ``"saturate"`` or ``"pow"``.
        weights: Optional fixed ``(E,)`` nonnegative feature weights ``alpha`` (default 1).
        learnable: Learn ``alpha = softplus(rho)``; needs ``num_features``.
        num_features: E, for learnable weights.
        init_weight: The initial value of every learnable ``alpha_e`` (> 0).
        **params: Parameters of the concave function (``scale``, ``cap``, ``p``).

    Shape:
        - features: ``(B, N, E)``, nonnegative
        - state: coverage ``(B, E)``
        - gains: ``(B, N)``

    Example:
        >>> f = SCMM("sqrt")
        >>> H = torch.tensor([[[4.0, 0.0], [0.0, 1.0]]])
        >>> f.value(H, torch.tensor([[True, True]]))
        tensor([3.])
    """

    _needs_nonnegative = True

    def __init__(
        self,
        concave: str = "sqrt",
        weights: Any = None,
        *,
        learnable: bool = False,
        num_features: int | None = None,
        init_weight: float = 1.0,
        **params: float,
    ) -> None:
        super().__init__()
        self.concave = concave
        self.params = _check_concave(concave, params)
        self._phi, _ = CONCAVE_FUNCTIONS[concave]
        self.learnable = learnable
        if learnable:
            if weights is not None:
                raise ValueError("pass either fixed weights or learnable=True, not both")
            if num_features is None or num_features <= 0:
                raise ValueError(f"learnable weights need num_features > 0, got {num_features!r}")
            if not (math.isfinite(init_weight) and init_weight > 0):
                raise ValueError(f"init_weight must be a positive number, got {init_weight!r}")
            init = math.log(math.expm1(init_weight))  # softplus(init) = init_weight
            self.raw_weights = nn.Parameter(torch.full((num_features,), init))
        else:
            if weights is not None:
                w = torch.as_tensor(weights, dtype=torch.get_default_dtype())
                if w.dim() != 1:
                    raise ValueError(f"weights must have shape (E,), got {tuple(w.shape)}")
                if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
                    raise ValueError("weights must be finite and nonnegative")
                self.register_buffer("fixed_weights", w)
            else:
                self.fixed_weights = None

    def extra_repr(self) -> str:
        params = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"concave={self.concave!r}" + (f", {params}" if params else "") + (
            ", learnable=True" if self.learnable else ""
        )

    def weights(self, like: Tensor) -> Tensor | None:
        """The nonnegative ``alpha`` ``(E,)`` in ``like``'s dtype, or None for all ones."""
        if self.learnable:
            w = F.softplus(self.raw_weights)
        elif self.fixed_weights is not None:
            w = self.fixed_weights
        else:
            return None
        if w.shape[0] != like.shape[-1]:
            raise ValueError(
                f"objective has {w.shape[0]} feature weights but features have E={like.shape[-1]}"
            )
        return w.to(dtype=like.dtype, device=like.device)

    def phi(self, x: Tensor, inplace: bool = False) -> Tensor:
        """The concave function, elementwise."""
        return self._phi(x, inplace, **self.params)

    def _reduce(self, x: Tensor, alpha: Tensor | None) -> Tensor:
        return x.sum(-1) if alpha is None else x @ alpha

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        B, _, E = features.shape
        return features.new_zeros(B, E)  # (B, E) coverage of the empty set

    def gains(
        self,
        features: Tensor,
        state: Tensor,
        mask: Tensor | None = None,
        modular: Tensor | None = None,
    ) -> Tensor:
        alpha = self.weights(features)
        coverage = state.unsqueeze(1)  # (B, 1, E)
        inplace = not (torch.is_grad_enabled() and (features.requires_grad or state.requires_grad
                                                     or (alpha is not None and alpha.requires_grad)))
        base = self._reduce(self.phi(state.clone() if inplace else state, inplace=inplace), alpha)
        if inplace:
            out = self._blocked_gains(features, coverage, base, alpha)
        else:
            grown = self.phi(features + coverage)
            out = self._reduce(grown, alpha) - base.unsqueeze(1)  # (B, N)
        if modular is not None:
            out = out + modular
        if mask is not None:
            out = out.masked_fill(~mask, 0.0)
        return out

    def _blocked_gains(self, features: Tensor, coverage: Tensor, base: Tensor,
                       alpha: Tensor | None) -> Tensor:
        """``reduce(phi(features + coverage)) - base`` without autograd, a block of
        problems (or, for few problems, of candidates) at a time: the same elementwise
        operations and per-row reductions as the unblocked expression, on a scratch buffer
        small enough to stay in cache instead of a fresh ``(B, N, E)`` one."""
        B, N, E = features.shape
        out = features.new_empty(B, N)
        per_problem = N * E
        if B > 1 and per_problem <= _GAINS_BLOCK:
            step = max(1, _GAINS_BLOCK // max(1, per_problem))
            blocks = [(slice(s, s + step), slice(None)) for s in range(0, B, step)]
        else:
            step = max(1, _GAINS_BLOCK // max(1, B * E))
            blocks = [(slice(None), slice(s, s + step)) for s in range(0, N, step)]
        if len(blocks) <= 1:
            grown = self.phi(features + coverage, inplace=True)  # fresh buffer
            return torch.sub(self._reduce(grown, alpha), base.unsqueeze(1), out=out)
        largest = step * (per_problem if blocks[0][1] == slice(None) else B * E)
        scratch = features.new_empty(min(features.numel(), largest))
        for rows, cols in blocks:
            x = features[rows, cols]
            buf = scratch[: x.numel()].view(x.shape)
            torch.add(x, coverage[rows], out=buf)
            grown = self.phi(buf, inplace=True)
            torch.sub(self._reduce(grown, alpha), base[rows].unsqueeze(1), out=out[rows, cols])
        return out

    def _gain_upper_bounds(
        self, features: Tensor, state: Tensor, index: Tensor | None = None
    ) -> Tensor | None:
        """Upper bounds ``(B, M)`` on the gains of the candidates ``index`` (``(B, M)``;
        None: all), for lazy greedy's pruning; None where no bound is implemented.

        By concavity ``phi(c + x) - phi(c) <= phi'(c) x`` (``phi(x)`` itself where
        ``phi'(c)`` is infinite), one matrix-vector product instead of ``E`` evaluations
        of ``phi`` per candidate. A margin of ``4 E eps (f(A) + bound)`` covers the
        rounding of both this bound and the computed gains, so no candidate whose computed
        gain could win is pruned.
        """
        derivative = _DERIVATIVES.get(self.concave)
        if derivative is None or type(self).gains is not SCMM.gains:
            return None
        with torch.no_grad():
            B, N, E = features.shape
            if index is None:
                x = features.detach()
            else:
                offset = (torch.arange(B, device=index.device) * N).unsqueeze(1)
                x = features.detach().reshape(B * N, E).index_select(0, (index + offset).flatten())
                x = x.view(B, index.shape[1], E)
            alpha = self.weights(features)
            alpha = None if alpha is None else alpha.detach()
            c = state.detach()
            slope = derivative(c, **self.params)  # (B, E)
            unbounded = torch.isinf(slope)
            slope = slope.masked_fill(unbounded, 0.0)
            if alpha is not None:
                slope = slope * alpha
            bound = torch.bmm(x, slope.unsqueeze(-1)).squeeze(-1)  # (B, M)
            if bool(unbounded.any()):
                bound = bound + self._reduce(self.phi(x * unbounded.unsqueeze(1)), alpha)
            base = self._reduce(self.phi(c), alpha)  # f(A), (B,)
            eps = torch.finfo(x.dtype).eps
            return bound + 4 * E * eps * (base.abs().unsqueeze(1) + bound.abs())

    def candidate_gains(self, features: Tensor, state: Tensor, index: Tensor) -> Tensor:
        B, N, E = features.shape
        # Whole rows by index_select (a copy per row; gather indexes every entry).
        offset = (torch.arange(B, device=index.device) * N).unsqueeze(1)
        rows = features.reshape(B * N, E).index_select(0, (index + offset).flatten())
        return self.gains(rows.view(B, index.shape[1], E), state)

    def update(self, features: Tensor, state: Tensor, weights: Tensor) -> Tensor:
        return state + torch.einsum("bn,bne->be", weights.to(features.dtype), features)

    def _add_items(self, features: Tensor, state: Tensor, index: Tensor, present: Tensor) -> Tensor:
        if type(self).update is not SCMM.update:  # a subclass's own update decides
            return super()._add_items(features, state, index, present)
        # The one-hot einsum adds exactly the picked row (features are finite and
        # nonnegative, so the zero weights add +0): gather it instead of a (B, N, E) pass.
        rows = torch.arange(features.shape[0], device=features.device)
        picked = features[rows, index.clamp_min(0)].masked_fill(~present.unsqueeze(1), 0.0)
        return state + picked

    def _state_value(self, features: Tensor, state: Tensor) -> Tensor:
        return self._reduce(self.phi(state), self.weights(features))


class FacilityLocation(Objective):
    r"""Facility location: ``f(A) = sum_i max_{v in A} S[i, v]`` over the valid items i.

    The similarity is ``S = H H^T`` (nonnegative for nonnegative features) or, with
    ``similarity="cosine"``, the cosine of the rows clamped at 0. Monotone submodular.

    Shape:
        - features: ``(B, N, E)``
        - state: ``(similarity (B, N, N), best (B, N))``
        - gains: ``(B, N)``

    Example:
        >>> f = FacilityLocation()
        >>> H = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
        >>> f.value(H, torch.tensor([[True, False]]))
        tensor([1.])
    """

    _needs_nonnegative = False

    def __init__(self, similarity: str = "dot") -> None:
        super().__init__()
        if similarity not in ("dot", "cosine"):
            raise ValueError(f"similarity must be 'dot' or 'cosine', got {similarity!r}")
        self.similarity = similarity

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        B, N, _ = features.shape
        x = F.normalize(features, dim=-1) if self.similarity == "cosine" else features
        sim = (x @ x.transpose(1, 2)).clamp_min(0.0)  # (B, N, N): rows = ground items i
        if mask is not None:
            sim = sim * mask.unsqueeze(-1).to(sim.dtype)  # masked ground items count nothing
        return sim, features.new_zeros(B, N)

    def gains(
        self,
        features: Tensor,
        state: tuple[Tensor, Tensor],
        mask: Tensor | None = None,
        modular: Tensor | None = None,
    ) -> Tensor:
        sim, best = state
        out = (sim - best.unsqueeze(-1)).clamp_min(0.0).sum(1)  # (B, N) over ground items
        if modular is not None:
            out = out + modular
        if mask is not None:
            out = out.masked_fill(~mask, 0.0)
        return out

    def update(self, features: Tensor, state: tuple[Tensor, Tensor], weights: Tensor) -> tuple[Tensor, Tensor]:
        sim, best = state
        if sim.shape[-1] == 0:  # no candidates: nothing to add
            return sim, best
        if bool(((weights == 0) | (weights == 1)).all()) and not weights.requires_grad:
            # Exact set semantics: the best similarity over the chosen items.
            chosen = sim.masked_fill(~weights.bool().unsqueeze(1), 0.0).amax(-1)
            return sim, torch.maximum(best, chosen)
        # Relaxed: coverage by the expected similarity of the soft pick.
        return sim, torch.maximum(best, torch.einsum("bin,bn->bi", sim, weights.to(sim.dtype)))

    def _state_value(self, features: Tensor, state: tuple[Tensor, Tensor]) -> Tensor:
        return state[1].sum(-1)


class SumObjective(Objective):
    r"""A weighted sum of objectives, each over its own block of feature columns.

    .. math::

        f(A) = \sum_i w_i f_i(A; H[:, :, \text{block}_i])

    with nonnegative weights ``w`` (monotone submodular when every ``f_i`` is). E.g.
    SCMM coverage over an encoding beside facility location over sentence embeddings:
    ``SumObjective([SCMM("sqrt"), FacilityLocation("cosine")], [E, D])``.

    Args:
        parts: The objectives.
        widths: How many feature columns each reads, in order (they must add up to E).
        weights: Fixed weights ``w`` (default all ones).
        learnable: Learn ``w = softplus(raw)`` from the given weights instead.

    Attributes:
        scale: A fixed factor on every weight (1 by default; not learned): the sum is
            ``scale * sum_i w_i f_i``. E.g. a strength of the whole objective chosen on a
            dev split after training (:class:`~dgn.sentence.EndToEndModel`'s
            ``diversity_scale``).

    Shape:
        - features: ``(B, N, sum(widths))``
        - state: a tuple of the parts' states
        - gains: ``(B, N)``

    Example:
        >>> f = SumObjective([SCMM("sqrt"), FacilityLocation()], [1, 2], weights=[1.0, 0.5])
        >>> H = torch.tensor([[[4.0, 1.0, 0.0], [1.0, 0.0, 1.0]]])
        >>> f.value(H, torch.tensor([[True, False]]))  # sqrt(4) + 0.5 * (1 + 0)
        tensor([2.5000])
    """

    _needs_nonnegative = False

    def __init__(
        self,
        parts: list[Objective],
        widths: list[int],
        weights: list[float] | None = None,
        learnable: bool = False,
    ) -> None:
        super().__init__()
        if len(parts) != len(widths) or not parts:
            raise ValueError(f"SumObjective needs one width per part, got {len(parts)} parts and {len(widths)} widths")
        if any(isinstance(w, bool) or not isinstance(w, int) or w <= 0 for w in widths):
            raise ValueError(f"SumObjective widths must be positive integers, got {widths!r}")
        w = torch.ones(len(parts)) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
        if w.shape != (len(parts),) or not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError(f"SumObjective weights must be {len(parts)} finite numbers >= 0, got {weights!r}")
        if learnable and bool((w <= 0).any()):
            raise ValueError("SumObjective: learnable weights must start > 0")
        self.parts = nn.ModuleList(parts)
        self.widths = list(widths)
        self.learnable = bool(learnable)
        self.scale = 1.0
        if self.learnable:
            self.raw_weights = nn.Parameter(w + torch.log(-torch.expm1(-w)))  # softplus(raw) = w
        else:
            self.register_buffer("fixed_weights", w)

    def extra_repr(self) -> str:
        return f"widths={self.widths}, learnable={self.learnable}"

    def weights(self, like: Tensor) -> Tensor:
        """The nonnegative part weights in effect, ``scale * w`` ``(len(parts),)``, in
        ``like``'s dtype and device."""
        w = self.base_weights(like)
        return w if self.scale == 1.0 else self.scale * w

    def base_weights(self, like: Tensor) -> Tensor:
        """The weights ``w`` themselves (learned or fixed), without :attr:`scale`."""
        w = F.softplus(self.raw_weights) if self.learnable else self.fixed_weights
        return w.to(dtype=like.dtype, device=like.device)

    def _blocks(self, features: Tensor) -> list[Tensor]:
        if features.shape[-1] != sum(self.widths):
            raise ValueError(f"SumObjective reads {sum(self.widths)} feature columns, got E={features.shape[-1]}")
        return list(torch.split(features, self.widths, dim=-1))

    def init_state(self, features: Tensor, mask: Tensor | None = None) -> tuple[Any, ...]:
        return tuple(f.init_state(x, mask) for f, x in zip(self.parts, self._blocks(features), strict=True))

    def gains(
        self,
        features: Tensor,
        state: tuple[Any, ...],
        mask: Tensor | None = None,
        modular: Tensor | None = None,
    ) -> Tensor:
        w = self.weights(features)
        out = None
        for i, (f, x, st) in enumerate(zip(self.parts, self._blocks(features), state, strict=True)):
            g = w[i] * f.gains(x, st, mask)
            out = g if out is None else out + g
        assert out is not None
        if modular is not None:
            out = out + modular
        if mask is not None:
            out = out.masked_fill(~mask, 0.0)
        return out

    def update(self, features: Tensor, state: tuple[Any, ...], weights: Tensor) -> tuple[Any, ...]:
        blocks = self._blocks(features)
        return tuple(f.update(x, st, weights) for f, x, st in zip(self.parts, blocks, state, strict=True))

    def _state_value(self, features: Tensor, state: tuple[Any, ...]) -> Tensor:
        w = self.weights(features)
        blocks = self._blocks(features)
        return sum(w[i] * f._state_value(x, st) for i, (f, x, st) in enumerate(zip(self.parts, blocks, state, strict=True)))


ObjectiveLike = str | Objective


def make_objective(objective: ObjectiveLike) -> Objective:
    """Resolve an objective: an :class:`Objective` passes through; a concave function's
    name gives ``SCMM(name)``; ``"facility"`` gives :class:`FacilityLocation`."""
    if isinstance(objective, Objective):
        return objective
    if isinstance(objective, str):
        if objective in ("facility", "facility_location"):
            return FacilityLocation()
        return SCMM(objective)
    raise ValueError(
        f"objective must be an Objective or a name ({', '.join(sorted(CONCAVE_FUNCTIONS))}, "
        f"facility), got {type(objective).__name__}"
    )
