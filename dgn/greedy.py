"""Greedy maximisation: the exact hard algorithm and its relaxed, differentiable twin.

:func:`greedy_select` is forward greedy (Nemhauser et al., 1978): at each of k steps
pick the valid, unselected candidate of largest marginal gain (ties: lowest index).
:func:`soft_greedy_select` unfolds the same k steps into layers whose argmax is relaxed
into ``softmax(gain / tau)`` (Powers et al., "Differentiable Greedy Networks", 2018), so
gradients reach the features and the objective's weights.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from dgn import _kernels
from dgn._validation import as_features, as_mask, as_modular, check_k, check_tau
from dgn.errors import one_line
from dgn.objectives import CONCAVE_FUNCTIONS, SCMM, Objective, ObjectiveLike, make_objective

__all__ = [
    "Selection",
    "SoftSelection",
    "greedy_select",
    "soft_greedy_select",
    "RELAXATIONS",
]

#: Relaxations of the argmax that :func:`soft_greedy_select` implements.
RELAXATIONS = ("soft", "straight_through")

# Hard greedy processes problems in chunks of about this many feature entries, so each
# chunk's (chunk, N) bookkeeping stays small; SCMM's gains block further inside
# (``dgn.objectives._GAINS_BLOCK``). Both tuned with benchmarks/greedy_speed.py.
_CHUNK_ELEMENTS = 1 << 20
# torch.compile'd SCMM greedy kernels (``compile=True``): see _compiled.
_FUSED: dict[tuple[str, str, tuple[tuple[str, float], ...]], Callable[..., tuple[Tensor, ...]]] = {}
# compile=True on float64 screens each step in float32 for problems of at least this many
# feature entries (N x E), and evaluates every candidate in float64 in a step whose short
# list holds more than this share of them.
_SCREEN_MIN_ENTRIES = 1 << 21
_SCREEN_MAX_SHARE = 0.25
# Lazy greedy's smallest first block of stale candidates to re-evaluate in a step.
_LAZY_FIRST_BLOCK = 16


@dataclass(frozen=True)
class Selection:
    """The result of hard greedy selection.

    Attributes:
        indices: ``(B, K)`` long, the picks in order; ``-1`` where no valid candidate was left.
        gains: ``(B, K)`` marginal gain of each pick (0 where invalid).
        valid: ``(B, K)`` bool, False where the pick is ``-1``.
        step_gains: ``(B, K, N)`` gains of every candidate at every step (``-inf`` for
            masked or already-selected candidates), only when asked for.
    """

    indices: Tensor
    gains: Tensor
    valid: Tensor
    step_gains: Tensor | None = None

    def value(self) -> Tensor:
        """``f(S)`` of the selected set: the sum of the marginal gains, ``(B,)``."""
        return self.gains.sum(-1)


@dataclass(frozen=True)
class SoftSelection:
    """The output of the relaxed greedy layers.

    Attributes:
        distributions: ``(B, K, N)``, layer k's relaxed argmax ``softmax(gain / tau)``
            over valid, unselected candidates; exactly 0 elsewhere (a layer with no
            candidate left is all zeros).
        logits: ``(B, K, N)``, the log-domain scores whose softmax gives
            ``distributions``; ``-inf`` where the distribution is 0.
        indices: ``(B, K)`` the hard picks (the argmax of each layer), ``-1`` if none.
        gains: ``(B, K)`` marginal gain of each pick under the relaxed state.
        valid: ``(B, K)`` bool.
        step_gains: ``(B, K, N)`` gains of every candidate at every layer (0 where masked).
    """

    distributions: Tensor
    logits: Tensor
    indices: Tensor
    gains: Tensor
    valid: Tensor
    step_gains: Tensor


def _prepare(
    features: Any, k: Any, objective: ObjectiveLike, mask: Any, modular: Any, values: bool = True
) -> tuple[Tensor, bool, int, Objective, Tensor, Tensor | None]:
    """The checked arguments; ``values=False`` leaves the entries of the features and the
    modular term unchecked, for a kernel that checks them as it reads them (a caller that
    falls back to another path runs the full checks first)."""
    obj = make_objective(objective)
    feats, unbatched = as_features(features, nonnegative=isinstance(obj, SCMM), values=values)
    k = check_k(k)
    B, N, _ = feats.shape
    valid = as_mask(mask, B, N, feats.device)
    mod = as_modular(modular, B, N, feats, values=values)
    return feats, unbatched, k, obj, valid, mod


def greedy_select(
    features: Any,
    k: int,
    objective: ObjectiveLike = "sqrt",
    mask: Any = None,
    initial: Any = None,
    method: Literal["naive", "lazy"] = "naive",
    modular: Any = None,
    return_step_gains: bool = False,
    compile: bool = False,
) -> Selection:
    r"""Forward greedy maximisation of a monotone submodular function.

    .. math::

        v_k = \arg\max_{v \in V \setminus A_{k-1},\ \text{mask}_v} f(A_{k-1} \cup \{v\}) - f(A_{k-1})

    Ties go to the lowest index. When no valid candidate is left the pick is ``-1`` with
    ``valid = False``; asking for more picks than candidates is not an error.

    Args:
        features: ``(N, E)`` or ``(B, N, E)`` tensor or numpy array (nonnegative for SCMM).
        k: Number of picks (``>= 0``).
        objective: An :class:`~dgn.objectives.Objective`, a concave function name for
            :class:`~dgn.objectives.SCMM` (``"sqrt"``, ``"log1p"``, ``"exp"``,
            ``"saturate"``, ``"pow"``) or ``"facility"``.
        mask: Optional ``(B, N)`` bool, True for real candidates.
        initial: Optional ``(B, N)`` bool of items already in the set (they count in the
            objective's state and are never picked again).
        method: ``"naive"`` evaluates every gain at every step; ``"lazy"`` keeps stale
            gains as upper bounds (Minoux, 1978), re-evaluates only candidates whose bound
            can still win (a block at a time; for SCMM after a cheaper tangent bound) and
            returns the same picks, faster when N is large.
        modular: Optional ``(B, N)`` per-item bonus added to each gain.
        return_step_gains: Also return the ``(B, K, N)`` gains of every step (naive only).
        compile: Run each step as one call built by ``torch.compile``: the SCMM gains
            in one fused pass over the features (``phi(c + H)`` and the sum over
            features), the pick and the state update (naive greedy, SCMM, no
            gradients). The first call of a process compiles it (seconds to tens of
            seconds on CPU; it needs a C++ compiler); later calls reuse it for any
            shape. Picks equal the uncompiled ones except where two gains differ only
            by rounding (the sums are added in another order). float64 problems of at
            least 2^21 entries (N x E) are screened: each step computes the gains in
            float32, keeps the candidates within a bound on float32's rounding of the
            best one, and evaluates only those in float64, so the picks stay float64
            greedy's at close to float32's speed.

    Returns:
        A :class:`Selection`; unbatched input gives unbatched outputs ``(K,)``.

    Raises:
        ValueError: Bad shapes, NaN/inf, negative SCMM features, ``k < 0``, an unknown
            objective or method, ``compile=True`` with lazy greedy, another objective
            or features that require gradients.

    Example:
        >>> H = torch.tensor([[4.0, 0.0], [4.0, 0.0], [0.0, 1.0]])
        >>> sel = greedy_select(H, k=2)
        >>> sel.indices.tolist(), sel.gains.tolist()
        ([0, 2], [2.0, 1.0])
    """
    feats, unbatched, k, obj, valid, mod = _prepare(features, k, objective, mask, modular)
    B, N, _ = feats.shape
    start = None
    if initial is not None:
        start = as_mask(initial, B, N, feats.device)
        if isinstance(initial, Tensor) and initial.dtype != torch.bool:
            raise ValueError(f"initial must be a bool tensor of shape ({B}, {N})")
    if method not in ("naive", "lazy"):
        raise ValueError(f"method must be 'naive' or 'lazy', got {method!r}")
    if method == "lazy" and return_step_gains:
        raise ValueError("return_step_gains needs method='naive' (lazy greedy skips evaluations)")
    fused = None
    if compile:
        if method != "naive":
            raise ValueError("compile=True needs method='naive'")
        if not isinstance(obj, SCMM):
            raise ValueError(f"compile=True supports SCMM objectives, got {type(obj).__name__}")
        needs_grad = feats.requires_grad or any(p.requires_grad for p in obj.parameters())
        if needs_grad and torch.is_grad_enabled():
            raise ValueError("compile=True is for hard greedy without gradients (use torch.no_grad())")
        fused = _compiled(obj, "step")

    with torch.no_grad() if not feats.requires_grad else torch.enable_grad():
        if method == "lazy":
            out = _lazy(feats, k, obj, valid, start, mod)
        elif (fused is not None and feats.dtype == torch.float64 and not return_step_gains
              and N * feats.shape[2] >= _SCREEN_MIN_ENTRIES):
            out = _naive_screened(feats, k, obj, valid, start, mod)  # type: ignore[arg-type]
        elif fused is not None:  # no scratch buffer, so no chunks
            out = _naive(feats, k, obj, valid, start, mod, return_step_gains, fused)
        else:
            step = max(1, _CHUNK_ELEMENTS // max(1, N * feats.shape[2]))  # B may be 0
            parts = [
                _naive(
                    feats[s : s + step],
                    k,
                    obj,
                    valid[s : s + step],
                    None if start is None else start[s : s + step],
                    None if mod is None else mod[s : s + step],
                    return_step_gains,
                )
                for s in range(0, B, step)
            ] or [_naive(feats, k, obj, valid, start, mod, return_step_gains)]
            out = Selection(
                *(torch.cat([getattr(p, name) for p in parts]) for name in ("indices", "gains", "valid")),
                step_gains=torch.cat([p.step_gains for p in parts]) if return_step_gains else None,  # type: ignore[misc]
            )
    if unbatched:
        out = Selection(
            out.indices[0],
            out.gains[0],
            out.valid[0],
            None if out.step_gains is None else out.step_gains[0],
        )
    return out


def _begin(
    feats: Tensor, k: int, obj: Objective, valid: Tensor, start: Tensor | None
) -> tuple[Tensor, Any, Tensor, Tensor, Tensor, Tensor]:
    """Naive greedy's starting point: row numbers, the state of ``start`` (or of the empty
    set), the (B, N) available candidates (valid, not in ``start``) and the empty
    (B, k) indices (-1), gains and valid flags."""
    B = feats.shape[0]
    state = obj.init_state(feats, valid)
    available = valid.clone()
    if start is not None:
        state = obj.update(feats, state, (start & valid).to(feats.dtype))
        available &= ~start
    indices = torch.full((B, k), -1, dtype=torch.long, device=feats.device)
    gains = feats.new_zeros(B, k)
    ok = torch.zeros(B, k, dtype=torch.bool, device=feats.device)
    return torch.arange(B, device=feats.device), state, available, indices, gains, ok


def _naive(
    feats: Tensor,
    k: int,
    obj: Objective,
    valid: Tensor,
    start: Tensor | None,
    mod: Tensor | None,
    return_step_gains: bool,
    fused: Callable[..., Tensor] | None = None,
) -> Selection:
    B, N, _ = feats.shape
    if N == 0:  # nothing to pick from
        empty = Selection(
            torch.full((B, k), -1, dtype=torch.long, device=feats.device),
            feats.new_zeros(B, k),
            torch.zeros(B, k, dtype=torch.bool, device=feats.device),
            feats.new_zeros(B, k, 0) if return_step_gains else None,
        )
        return empty
    rows, state, available, indices, gains, ok = _begin(feats, k, obj, valid, start)
    history = []
    alpha = obj.weights(feats) if fused is not None else None  # type: ignore[operator]
    for step in range(k):
        if fused is None:
            g = obj.gains(feats, state, modular=mod)  # (B, N)
            g = g.masked_fill(~available, float("-inf"))
            best = g.argmax(dim=1)  # first maximal index on ties
            has = available.any(dim=1)
            pick_gain = g[rows, best]
        else:  # gains, pick and state update in one compiled call
            g, best, has, pick_gain, next_state, next_available = _run_fused(
                fused, feats, state, alpha, available, mod
            )
        if return_step_gains:
            history.append(g)
        if not bool(has.any()):
            if return_step_gains:
                history.extend([g] * (k - step - 1))
            break
        indices[:, step] = torch.where(has, best, torch.full_like(best, -1))
        gains[:, step] = torch.where(has, pick_gain, torch.zeros_like(pick_gain))
        ok[:, step] = has
        if fused is None:
            state = obj._add_items(feats, state, best, has)
            available[rows[has], best[has]] = False
        else:
            state, available = next_state, next_available
    return Selection(indices, gains, ok, torch.stack(history, 1) if return_step_gains and history else
                     (feats.new_zeros(B, 0, N) if return_step_gains else None))


def _naive_screened(
    feats: Tensor,
    k: int,
    obj: SCMM,
    valid: Tensor,
    start: Tensor | None,
    mod: Tensor | None,
) -> Selection:
    """Naive greedy on float64 features whose steps are screened in float32.

    Each step computes every gain with the compiled float32 kernel (half the bytes and the
    fast ``sqrt``), keeps the candidates within twice a rounding bound of the best float32
    gain, and evaluates only those in float64 to pick. The bound covers every float32
    rounding (of the features, coverage, weights, ``phi`` and the sums) and of the float64
    gains, so the candidate that float64 naive greedy picks is always kept: the picks and
    gains are float64 naive greedy's (up to how float64 rounds near-ties). A step whose
    bound keeps more than ``_SCREEN_MAX_SHARE`` of the candidates, or whose values could
    overflow float32, evaluates everything in float64.
    """
    B, N, E = feats.shape  # N, E >= 1: greedy_select screens only large problems
    rows, state, available, indices, gains, ok = _begin(feats, k, obj, valid, start)
    screen = _compiled(obj, "screen")
    full = _compiled(obj, "step")
    feats32 = feats.float()
    alpha = obj.weights(feats)  # float64 (E,) or None
    alpha32 = None if alpha is None else alpha.float()
    alpha_max = 1.0 if alpha is None else float(alpha.max())
    # (B, E) column maxima over all rows (a bound for the valid ones), from the float32
    # copy (half the bytes), rounded up past float32's rounding.
    xmax = feats32.amax(1).double() * (1 + 2.0**-22)
    tiny = float(obj.phi(torch.tensor(2.0**-149, dtype=torch.float64)))
    mod_slack = 0.0 if mod is None or not mod.numel() else 2.0**-50 * float(mod.abs().max())
    absolute = torch.tensor(8 * E * alpha_max * tiny + mod_slack, dtype=torch.float64, device=feats.device)
    for step in range(k):
        has = available.any(dim=1)
        if not bool(has.any()):
            break
        short, counts, width = _run_fused(screen, feats32, state, xmax, alpha32, alpha, available, mod, absolute)
        width = int(width)
        if width > _SCREEN_MAX_SHARE * N:  # everything, in float64
            _, best, has, pick_gain, _, _ = _run_fused(full, feats, state, alpha, available, mod)
        else:
            if B == 1:
                idx = short[0].nonzero().view(1, -1)  # ascending
            else:  # each row's short list, ascending, padded with index 0 (masked out below)
                where = short.nonzero()
                slot = (short.cumsum(1) - 1)[where[:, 0], where[:, 1]]
                idx = torch.zeros(B, width, dtype=torch.long, device=feats.device)
                idx[where[:, 0], slot] = where[:, 1]
            g = obj.candidate_gains(feats, state, idx)
            if mod is not None:
                g = g + mod.gather(1, idx)
            if B > 1:
                filled = torch.arange(width, device=feats.device).unsqueeze(0) < counts.unsqueeze(1)
                g = g.masked_fill(~filled, float("-inf"))
            pos = g.argmax(dim=1, keepdim=True)  # first maximal = lowest index on ties
            best = idx.gather(1, pos).squeeze(1)
            pick_gain = g.gather(1, pos).squeeze(1)
        indices[:, step] = torch.where(has, best, torch.full_like(best, -1))
        gains[:, step] = torch.where(has, pick_gain, torch.zeros_like(pick_gain))
        ok[:, step] = has
        state = obj._add_items(feats, state, best, has)
        available[rows[has], best[has]] = False
    return Selection(indices, gains, ok)


def _compiled(obj: SCMM, kind: Literal["step", "screen"]) -> Callable[..., tuple[Tensor, ...]]:
    """The ``torch.compile``'d SCMM greedy kernels, one per kind, concave function and params.

    ``"step"``: the gains ``sum_e alpha_e (phi(c_e + H_ve) - phi(c_e)) + beta_v`` of every
    candidate (-inf where unavailable) in one pass over the features, then the pick
    (first maximal index), its gain and the next coverage and availability: one naive
    greedy step in one call. ``"screen"``: :func:`_naive_screened`'s float32 screen (the
    gains in float32, the rounding bound, the short list, its sizes and the largest size,
    or more than N where float32 could overflow).
    """
    key = (kind, obj.concave, tuple(sorted(obj.params.items())))
    fn = _FUSED.get(key)
    if fn is None:
        phi, _ = CONCAVE_FUNCTIONS[obj.concave]
        params = dict(obj.params)

        def gains(
            features: Tensor,
            coverage: Tensor,
            alpha: Tensor | None,
            available: Tensor,
            modular: Tensor | None,
            termwise: bool = False,
        ) -> Tensor:
            base = phi(coverage, False, **params)
            grown = phi(features + coverage.unsqueeze(1), False, **params)
            if termwise:
                # Sum each term's phi(c_e + H_ve) - phi(c_e) instead of subtracting the two
                # sums: the rounding then scales with the gain, not with f(A + v). (About
                # 1.5x slower in inductor's CPU code, so only the screen does it.)
                grown = grown - base.unsqueeze(1)
                g = grown.sum(-1) if alpha is None else (grown * alpha).sum(-1)
            elif alpha is None:
                g = grown.sum(-1) - base.sum(-1, keepdim=True)
            else:
                g = (grown * alpha).sum(-1) - (base * alpha).sum(-1, keepdim=True)
            if modular is not None:
                g = g + modular
            return g.masked_fill(~available, float("-inf"))

        def screen(
            features32: Tensor,
            coverage: Tensor,
            xmax: Tensor,
            alpha32: Tensor | None,
            alpha: Tensor | None,
            available: Tensor,
            modular: Tensor | None,
            absolute: Tensor,
        ) -> tuple[Tensor, ...]:
            coverage32 = coverage.float()
            g = gains(features32, coverage32, alpha32, available, None, termwise=True).double()
            if modular is not None:
                g = g + modular
            grown = phi(coverage + xmax, False, **params)  # bounds phi(c + x) of every row
            base = phi(coverage, False, **params)
            both, rise = grown + base, grown - base
            total = both.sum(-1) if alpha is None else (both * alpha).sum(-1)  # bounds phi(c+x) + phi(c)
            most = rise.sum(-1) if alpha is None else (rise * alpha).sum(-1)  # bounds every gain
            # The float32 gain's rounding against the exact gain, with a 2x margin: each
            # term's phi(c + x) and phi(c) (features, coverage, weights rounded to float32,
            # phi itself, the difference) within 8u of their sum, then the E-term sum
            # within (E + 2)u of the largest gain. Then float64 naive greedy's own
            # rounding, (E + 9) 2^-53 of f(A + v) + f(A); the absolute terms cover
            # float32's subnormal range and the modular term.
            E = features32.shape[2]
            u = 2.0**-24
            slack = 2 * (8 * u * total + (E + 2) * u * most) + (E + 9) * 2.0**-53 * total
            slack = slack + absolute + 2.0**-149 * (grown.sum(-1) + total)
            top = g.max(dim=1, keepdim=True).values
            short = available & (g >= top - 2 * slack.unsqueeze(1))
            counts = short.sum(1)
            in_range = ((coverage + xmax).amax(1) < 1e37) & (total < 1e37)
            width = torch.where(in_range.all(), counts.max(), features32.shape[1] + 1)
            return short, counts, width

        def step(
            features: Tensor, coverage: Tensor, alpha: Tensor | None, available: Tensor, modular: Tensor | None
        ) -> tuple[Tensor, ...]:
            g = gains(features, coverage, alpha, available, modular)
            best = g.argmax(dim=1)
            has = available.any(dim=1)
            pick = best.unsqueeze(1)
            pick_gain = g.gather(1, pick).squeeze(1)
            row = features.gather(1, pick.unsqueeze(2).expand(-1, 1, features.shape[2])).squeeze(1)
            # With nothing available the argmax is 0, already unavailable: no change there.
            next_coverage = coverage + row * has.unsqueeze(1).to(row.dtype)
            next_available = available.scatter(1, pick, False)
            return g, best, has, pick_gain, next_coverage, next_available

        fn = torch.compile(step if kind == "step" else screen, dynamic=True)
        _FUSED[key] = fn
    return fn


def _soft_layers(
    feats: Tensor,
    obj: Objective,
    valid: Tensor,
    mod: Tensor | None,
    tau: float,
    k: int,
    relaxation: str,
    branchless: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The K relaxed layers of :func:`soft_greedy_select` on validated ``(B, N, E)`` input.

    ``branchless``: no Python decision on tensor values (the out-of-range fallback is
    computed for every row and selected with ``where``), so that ``torch.compile`` traces
    the K layers as one graph; the values are the same.
    """
    B, N, _ = feats.shape
    state = obj.init_state(feats, valid)
    available = valid.clone()  # (B, N) not padding, not picked by an earlier layer
    remaining = feats.new_ones(B, N)  # (B, N) soft mass not yet given, for "soft"
    neg_inf = float("-inf")
    dists, logits_all, steps, picks, pick_gains, oks = [], [], [], [], [], []
    for _ in range(k):
        g = obj.gains(feats, state, modular=mod)  # (B, N)
        scores = g / tau
        if relaxation == "soft":
            scores = scores + torch.log(remaining.clamp_min(1e-30))
        has = available.any(dim=1)  # (B,)
        # Rows with nothing left get a dummy all-zero row so softmax stays finite.
        logits = scores.masked_fill(~available, neg_inf)
        top = logits.amax(dim=1)  # (B,) -inf where nothing is available
        overflow = has & ~torch.isfinite(top)
        if branchless or bool(overflow.any()):
            # A tiny tau took g / tau out of range (+inf, NaN, or -inf everywhere), where
            # softmax gives NaN: those rows use (g - max g) / tau, the same softmax in exact
            # arithmetic (0 at the best gains even where tau underflows the dtype to 0).
            g_top = g.masked_fill(~available, neg_inf).amax(dim=1, keepdim=True)
            diff = g - torch.where(torch.isfinite(g_top), g_top, 0.0).detach()
            shifted = torch.where(diff == 0, torch.zeros_like(diff), diff / tau)
            if relaxation == "soft":
                shifted = shifted + torch.log(remaining.clamp_min(1e-30))
            shifted = shifted.masked_fill(~available, neg_inf)
            logits = torch.where(overflow.unsqueeze(1), shifted, logits)
        safe = torch.where(has.unsqueeze(1), logits, torch.zeros_like(logits))
        s = torch.softmax(safe, dim=1) * has.unsqueeze(1).to(feats.dtype)  # (B, N)
        s = s.masked_fill(~available, 0.0)
        # the pick is the first argmax of the logits, as the losses take it without indices
        best = logits.masked_fill(~has.unsqueeze(1), 0.0).argmax(dim=1)  # (B,)
        onehot = torch.nn.functional.one_hot(best, N).to(s.dtype) * has.unsqueeze(1).to(s.dtype)
        if relaxation == "straight_through":
            weights = onehot + (s - s.detach())  # forward: exactly the one-hot (s - s == 0)
        else:
            weights = s
            remaining = remaining - s
        dists.append(s)
        logits_all.append(logits)
        steps.append(g.masked_fill(~valid, 0.0))
        picks.append(torch.where(has, best, torch.full_like(best, -1)))
        pick_gains.append(torch.where(has, g.gather(1, best.unsqueeze(1)).squeeze(1), torch.zeros_like(g[:, 0])))
        oks.append(has)
        state = obj.update(feats, state, weights)
        available = available & ~onehot.bool()
    return (
        torch.stack(dists, 1),
        torch.stack(logits_all, 1),
        torch.stack(picks, 1),
        torch.stack(pick_gains, 1),
        torch.stack(oks, 1),
        torch.stack(steps, 1),
    )


@functools.cache
def _soft_compiled() -> Callable[..., tuple[Tensor, ...]]:
    """:func:`_soft_layers` built by ``torch.compile`` (once per process)."""
    return torch.compile(_soft_layers)  # type: ignore[return-value]


def _run_fused(
    fused: Callable[..., tuple[Tensor, ...]], *args: Any, what: str = "the gain kernel"
) -> tuple[Tensor, ...]:
    try:
        return fused(*args)
    except Exception as exc:  # torch.compile's backend failed (e.g. no C++ compiler)
        if type(exc).__module__.startswith("torch._"):
            detail = one_line(exc)[:300]
            raise RuntimeError(f"compile=True: torch.compile could not build {what}: {detail}") from exc
        raise


def _lazy(
    feats: Tensor,
    k: int,
    obj: Objective,
    valid: Tensor,
    start: Tensor | None,
    mod: Tensor | None,
) -> Selection:
    """Lazy greedy (Minoux, 1978), re-evaluating stale candidates a block at a time.

    Each candidate keeps its last computed gain, an upper bound on its current gain by
    submodularity. A step picks the candidate of largest bound (ties: lowest index) once
    that bound is fresh (computed at this step). Until then it re-evaluates the stale
    candidates of largest bound a block at a time (first as many as the previous step
    needed, doubling; all of them in one call when that is most of them). Once some gain
    is fresh, the stale bounds that still reach it are first lowered to the objective's
    cheap upper bounds where it has them (:meth:`Objective._gain_upper_bounds`, e.g. the
    tangent bound of SCMM). The pick is the one-at-a-time priority queue's, i.e. naive
    greedy's; the blocks trade a few extra evaluations for far fewer calls.
    """
    B, N, _ = feats.shape
    indices = torch.full((B, k), -1, dtype=torch.long)
    gains = feats.new_zeros(B, k)
    ok = torch.zeros(B, k, dtype=torch.bool)
    neg_inf = float("-inf")
    for b in range(B):
        f = feats[b : b + 1]
        v = valid[b : b + 1]
        m = None if mod is None else mod[b : b + 1]
        state = obj.init_state(f, v)
        available = v[0].clone()
        if start is not None:
            state = obj.update(f, state, (start[b : b + 1] & v).to(f.dtype))
            available &= ~start[b]
        if k == 0 or not bool(available.any()):
            continue
        use_bounds = obj._gain_upper_bounds(f[:, :0], state) is not None  # probe, no rows
        bound = obj.gains(f, state, modular=m)[0].clone()  # (N,) fresh at step 0
        fresh = torch.ones(N, dtype=torch.bool, device=f.device)  # bound computed this step
        block = N  # first block of a step: what the previous step needed
        for step in range(k):
            if step > 0:
                fresh.zero_()
            tight = fresh.clone()  # bound tightened (or computed) at this step
            size = block
            while True:
                key = bound.masked_fill(~available, neg_inf)
                top = int(key.argmax())  # largest bound, lowest index on ties
                if not bool(available[top]) or bool(fresh[top]):  # nothing left, or the pick
                    break
                stale = available & ~fresh
                n_stale = int(stale.sum())
                if bool((available & fresh).any()):
                    # Only stale bounds reaching the best fresh gain can still win.
                    best_fresh = key.masked_fill(stale, neg_inf).max()
                    want = stale & (bound >= best_fresh)
                    loose = want & ~tight
                    if use_bounds and int(loose.sum()) > _LAZY_FIRST_BLOCK:
                        # Tighten them with the objective's cheap bounds first (a bound at
                        # this step stays one at every later step); then look again.
                        bound = _tighten(obj, f, state, m, bound, loose)
                        tight |= loose
                        continue
                else:
                    want = stale
                n_want = int(want.sum())
                if 2 * min(size, n_want) >= n_stale:  # most of them: all, without row copies
                    bound = torch.where(available.clone(), obj.gains(f, state, modular=m)[0], bound)
                    fresh.fill_(True)
                    continue
                if n_want <= size:
                    idx = torch.nonzero(want).flatten()
                else:  # the block of largest bounds
                    idx = key.masked_fill(~want, neg_inf).topk(size).indices
                g = obj.candidate_gains(f, state, idx.unsqueeze(0))[0]
                if m is not None:
                    g = g + m[0, idx]
                bound[idx] = g
                fresh[idx] = True
                size *= 2
            if not bool(available[top]):
                break
            if step > 0:  # as many as this step needed: bounds that reached the pick
                block = max(_LAZY_FIRST_BLOCK, int(((bound >= bound[top]) & available).sum()))
            indices[b, step] = top
            gains[b, step] = bound[top]
            ok[b, step] = True
            state = obj._add_items(
                f, state, torch.tensor([top], device=f.device), torch.ones(1, dtype=torch.bool, device=f.device)
            )
            available[top] = False
    return Selection(indices.to(feats.device), gains, ok.to(feats.device))


def _tighten(
    obj: Objective, f: Tensor, state: Any, m: Tensor | None, bound: Tensor, which: Tensor
) -> Tensor:
    """``bound`` with the entries ``which`` lowered to the objective's upper bounds."""
    N = bound.shape[0]
    n = int(which.sum())
    if n == 0:
        return bound
    if 3 * n >= N:  # many rows: all of them, without row copies
        ub = obj._gain_upper_bounds(f, state)[0]  # type: ignore[index]
        if m is not None:
            ub = ub + m[0]
        return torch.where(which, torch.minimum(bound, ub), bound)
    idx = torch.nonzero(which).flatten()
    ub = obj._gain_upper_bounds(f, state, idx.unsqueeze(0))[0]  # type: ignore[index]
    if m is not None:
        ub = ub + m[0, idx]
    bound = bound.clone()
    bound[idx] = torch.minimum(bound[idx], ub)
    return bound


def soft_greedy_select(
    features: Any,
    k: int,
    objective: ObjectiveLike = "sqrt",
    tau: float = 1.0,
    mask: Any = None,
    relaxation: Literal["soft", "straight_through"] = "soft",
    modular: Any = None,
    compile: bool = False,
) -> SoftSelection:
    r"""K unfolded greedy layers with a relaxed argmax (the DGN's greedy layers).

    Layer k computes the gains ``g`` of all candidates under the current state and the
    relaxed argmax

    .. math::

        s_k = \operatorname{softmax}_{v \in \mathcal{A}_k}(g_v / \tau)

    over the available set ``A_k`` (valid, not yet picked); ``s_k`` is exactly 0 elsewhere.
    The state then advances in one of two ways:

    * ``"straight_through"``: the forward pass adds the one-hot argmax (so the picks and
      gains equal hard greedy's at every temperature, but where ``g / tau`` rounds two
      gains a float or so apart into one logit: the pick is then the first such item,
      the argmax of the logits the losses read) and the backward pass treats it as
      ``s_k`` (Bengio et al., 2013).
    * ``"soft"``: the coverage advances by the expectation ``sum_v s_k[v] H[v]``, and the
      mass already given to an item is taken off its later chances: layer k uses
      ``softmax(g / tau + log r)`` with ``r = 1 - sum_{j<k} s_j`` (clamped), restricted to
      items not yet picked by an earlier layer's argmax.

    As ``tau -> 0`` both become hard greedy. The paper found ``tau`` in (3, 6) best and
    ``tau = 0.01`` unstable (vanishing/exploding gradients).

    Args:
        features: ``(N, E)`` or ``(B, N, E)`` (nonnegative for SCMM).
        k: Number of layers K.
        objective: Objective instance or name, as in :func:`greedy_select`.
        tau: Softmax temperature, ``> 0``.
        mask: Optional ``(B, N)`` bool, True for real candidates.
        relaxation: ``"soft"`` (default; differentiable everywhere) or
            ``"straight_through"`` (its gradient is a surrogate).
        modular: Optional ``(B, N)`` per-item bonus added to each gain.
        compile: Run the K layers as compiled code (SCMM objectives only). For
            ``SCMM("sqrt")`` with the ``soft`` relaxation on float32 CPU tensors, a
            hand-written C kernel (forward and hand-derived backward, one pass over the
            features a layer; built once per machine at first use, in about a second, and
            cached in ``kernels`` under ``$DGN_CACHE_DIR``, else ``~/.cache/dgn``); otherwise
            one graph built by ``torch.compile`` (forward and backward fused into a few
            kernels; the first call of a process, and of each new shape, compiles it: tens
            of seconds on CPU).
            Either needs a C compiler. Values and gradients equal the uncompiled ones up to
            float rounding.

    Returns:
        A :class:`SoftSelection` (unbatched input gives unbatched fields).

    Example:
        >>> H = torch.tensor([[4.0, 0.0], [4.0, 0.0], [0.0, 1.0]])
        >>> out = soft_greedy_select(H, k=2, tau=1e-3)
        >>> out.indices.tolist(), out.distributions[1].tolist()
        ([0, 2], [0.0, 0.0, 1.0])
    """
    obj = make_objective(objective)
    # the C kernel checks the entries of the features and the modular term as it reads them
    kernel = compile and relaxation == "soft" and type(obj) is SCMM and obj.concave == "sqrt"  # not subclasses

    def checked(values: bool) -> tuple[Tensor, bool, int, Objective, Tensor, Tensor | None, float]:
        prepared = _prepare(features, k, obj, mask, modular, values=values)
        t = check_tau(tau)
        if prepared[0].shape[1] == 0:
            raise ValueError("soft_greedy_select needs at least one candidate (got N = 0)")
        if relaxation not in RELAXATIONS:
            raise ValueError(f"relaxation must be one of {RELAXATIONS}, got {relaxation!r}")
        return (*prepared, t)

    try:
        feats, unbatched, k, obj, valid, mod, tau = checked(values=not kernel)
    except ValueError:
        if kernel:  # every check in its usual order: the error a bad entry gives comes first
            checked(values=True)
        raise
    parts = _kernels.soft_layers(feats, obj.weights(feats), valid, mod, tau, k) if kernel and k else None
    if kernel and parts is None:  # declined, or found a bad entry: the full checks and their errors
        checked(values=True)
    if parts is not None:
        out = SoftSelection(*parts)
    elif k == 0:
        B, N, _ = feats.shape
        empty = feats.new_zeros(B, 0, N)
        out = SoftSelection(
            empty, empty, torch.zeros(B, 0, dtype=torch.long, device=feats.device), feats.new_zeros(B, 0),
            torch.zeros(B, 0, dtype=torch.bool, device=feats.device), empty,
        )
    else:
        if compile:
            if not isinstance(obj, SCMM):
                raise ValueError(f"compile=True supports SCMM objectives, got {type(obj).__name__}")
            parts = _run_fused(_soft_compiled(), feats, obj, valid, mod, tau, k, relaxation, True,
                               what="the relaxed layers")
        else:
            parts = _soft_layers(feats, obj, valid, mod, tau, k, relaxation, False)
        out = SoftSelection(*parts)
    if unbatched:
        out = SoftSelection(*(getattr(out, f)[0] for f in out.__dataclass_fields__))
    return out
