"""Property-based tests of the public core: objectives, greedy, the relaxed layers, the
losses, the metrics and the models.

Each property draws random inputs (shapes down to zero, masks, duplicate candidates,
budgets beyond N, NaN/inf, negative values, wrong types) and checks that a valid input
gives a result with the documented invariants, compared where cheap with references
written here in plain Python, and that an invalid one raises the documented ValueError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dgn
from dgn import (
    DGN,
    SCMM,
    DeepEncoder,
    DGNConfig,
    Encoder,
    FacilityLocation,
    greedy_select,
    layerwise_cross_entropy,
    soft_greedy_select,
    soft_label_cross_entropy,
)
from dgn.metrics import average_precision, evaluate_rankings, mrr, ndcg_at_k

FAST = settings(max_examples=40, deadline=None)
FEW = settings(max_examples=20, deadline=None)
EACH = settings(max_examples=5, deadline=None)  # per parametrized case
NEG_INF = float("-inf")


def _shape(*dims: int) -> str:
    """A shape as the error messages print it, escaped for a regex: ``\\(2, 3\\)``."""
    return re.escape(str(tuple(dims)))


def _close(a: float, b: float, tol: float = 1e-9) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * (1.0 + abs(a) + abs(b))


# ---------------------------------------------------------------- reference objectives


class RefObjective:
    """A plain-Python twin of an objective: ``f(S)`` from scratch, no state, no tensors."""

    def __init__(self, kind: str, params: dict[str, float], alpha: list[float] | None) -> None:
        self.kind = kind
        self.params = params
        self.alpha = alpha

    def __repr__(self) -> str:  # what a failing example prints
        return f"RefObjective({self.kind!r}, {self.params!r}, {self.alpha!r})"

    def build(self) -> dgn.Objective:
        if self.kind in ("dot", "cosine"):
            return FacilityLocation(self.kind)
        return SCMM(self.kind, weights=self.alpha, **self.params)

    def phi(self, x: float) -> float:
        p = self.params
        if self.kind == "sqrt":
            return math.sqrt(x)
        if self.kind == "log1p":
            return math.log1p(x / p.get("scale", 1.0))
        if self.kind == "exp":
            return -math.expm1(-x / p.get("scale", 1.0))
        if self.kind == "saturate":
            return min(x, p.get("cap", 1.0))
        return x ** p.get("p", 0.5)

    def sim(self, a: Sequence[float], b: Sequence[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        if self.kind == "cosine":
            na = max(math.sqrt(sum(x * x for x in a)), 1e-12)
            nb = max(math.sqrt(sum(x * x for x in b)), 1e-12)
            dot = dot / (na * nb)
        return max(dot, 0.0)

    def value(
        self, H: list[list[float]], S: Sequence[int], valid: list[bool], modular: list[float] | None
    ) -> float:
        S = [v for v in S if valid[v]]
        if self.kind in ("dot", "cosine"):
            total = sum(
                max([0.0] + [self.sim(H[i], H[v]) for v in S])
                for i in range(len(H))
                if valid[i]
            )
        else:
            E = len(H[0]) if H else 0
            alpha = self.alpha or [1.0] * E
            total = sum(alpha[e] * self.phi(sum(H[v][e] for v in S)) for e in range(E))
        if modular is not None:
            total += sum(modular[v] for v in S)
        return total


@st.composite
def ref_objectives(draw: st.DrawFn, E: int, scmm_only: bool = False) -> RefObjective:
    kinds = ["sqrt", "log1p", "exp", "saturate", "pow"] + ([] if scmm_only else ["dot", "cosine"])
    kind = draw(st.sampled_from(kinds))
    params: dict[str, float] = {}
    if kind in ("log1p", "exp") and draw(st.booleans()):
        params["scale"] = draw(st.floats(0.1, 10.0))
    if kind == "saturate" and draw(st.booleans()):
        params["cap"] = draw(st.floats(0.1, 10.0))
    if kind == "pow" and draw(st.booleans()):
        params["p"] = draw(st.floats(0.1, 1.0))
    alpha = None
    if kind not in ("dot", "cosine") and draw(st.booleans()):
        # Fixed weights are stored in the default dtype (float32): draw them there.
        alpha = draw(st.lists(st.floats(0.0, 5.0, width=32), min_size=E, max_size=E))
    return RefObjective(kind, params, alpha)


@st.composite
def feature_batches(
    draw: st.DrawFn, max_b: int = 3, max_n: int = 6, max_e: int = 4, min_n: int = 0
) -> np.ndarray:
    """``(B, N, E)`` nonnegative float64 features with duplicate rows now and then."""
    B = draw(st.integers(1, max_b))
    N = draw(st.integers(min_n, max_n))
    E = draw(st.integers(1, max_e))
    unique = draw(st.integers(1, max(1, N)))
    base = draw(
        hnp.arrays(
            np.float64,
            (B, unique, E),
            elements=st.one_of(st.just(0.0), st.floats(0.0, 50.0, allow_subnormal=False)),
        )
    )
    rows = draw(st.lists(st.integers(0, unique - 1), min_size=N, max_size=N))
    return base[:, rows] if N else np.zeros((B, 0, E))


def _masks(B: int, N: int) -> st.SearchStrategy[np.ndarray | None]:
    return st.one_of(st.none(), hnp.arrays(np.bool_, (B, N)))


def _check_picks(indices: torch.Tensor, valid: torch.Tensor, mask: torch.Tensor, k: int) -> None:
    """Picks in range, distinct, on valid candidates; -1 exactly when none was left."""
    B, N = mask.shape
    assert indices.shape == (B, k) and indices.dtype == torch.long
    assert torch.equal(valid, indices >= 0)
    for b in range(B):
        row = indices[b].tolist()
        real = [v for v in row if v >= 0]
        assert len(set(real)) == len(real)
        assert all(0 <= v < N and bool(mask[b, v]) for v in real)
        expected = min(k, int(mask[b].sum()))
        assert row[:expected] == real and all(v == -1 for v in row[expected:])


# ---------------------------------------------------------------- hard greedy


@FAST
@given(data=st.data())
def test_hard_greedy_is_a_greedy_trace_of_the_reference(data: st.DataObject) -> None:
    H = data.draw(feature_batches())
    B, N, E = H.shape
    ref = data.draw(ref_objectives(E))
    mask_np = data.draw(_masks(B, N))
    k = data.draw(st.integers(0, N + 2))
    modular_np = data.draw(
        st.one_of(st.none(), hnp.arrays(np.float64, (B, N), elements=st.floats(-5.0, 5.0)))
    )
    mask = torch.ones(B, N, dtype=torch.bool) if mask_np is None else torch.from_numpy(mask_np)
    kwargs: dict[str, Any] = {
        "mask": None if mask_np is None else torch.from_numpy(mask_np),
        "modular": None if modular_np is None else torch.from_numpy(modular_np),
    }
    obj = ref.build()
    naive = greedy_select(torch.from_numpy(H), k, obj, **kwargs)
    lazy = greedy_select(torch.from_numpy(H), k, obj, method="lazy", **kwargs)
    _check_picks(naive.indices, naive.valid, mask, k)
    # Lazy greedy returns the same picks as naive greedy (documented), gains up to rounding.
    assert torch.equal(lazy.indices, naive.indices)
    torch.testing.assert_close(lazy.gains, naive.gains, rtol=1e-9, atol=1e-9)
    for b in range(B):
        Hb = H[b].tolist()
        valid = mask[b].tolist()
        mod = None if modular_np is None else modular_np[b].tolist()
        chosen: list[int] = []
        gains = naive.gains[b].tolist()
        for step, pick in enumerate(naive.indices[b].tolist()):
            if pick < 0:
                assert gains[step] == 0.0
                continue
            base = ref.value(Hb, chosen, valid, mod)
            ref_gains = {
                v: ref.value(Hb, chosen + [v], valid, mod) - base
                for v in range(N)
                if valid[v] and v not in chosen
            }
            # The pick has the largest marginal gain, and its gain is the one reported.
            assert ref_gains[pick] >= max(ref_gains.values()) - 1e-9 * (1 + abs(base))
            assert _close(gains[step], ref_gains[pick], 1e-8)
            chosen.append(pick)
        # Submodular: the greedy gains never increase; they sum to f(S).
        real = [g for g, v in zip(gains, naive.valid[b].tolist(), strict=True) if v]
        for earlier, later in zip(real, real[1:], strict=False):
            assert later <= earlier + 1e-9 * (1 + abs(earlier))
        assert _close(sum(real), ref.value(Hb, chosen, valid, mod), 1e-8)
    selected = torch.zeros(B, N, dtype=torch.bool)
    for b in range(B):
        selected[b, [v for v in naive.indices[b].tolist() if v >= 0]] = True
    value = obj.value(torch.from_numpy(H), selected, kwargs["mask"], kwargs["modular"])
    torch.testing.assert_close(value, naive.value(), rtol=1e-9, atol=1e-9)


@FAST
@given(data=st.data())
def test_hard_greedy_with_initial_set_and_step_gains(data: st.DataObject) -> None:
    H = data.draw(feature_batches(min_n=1))
    B, N, E = H.shape
    ref = data.draw(ref_objectives(E))
    initial = data.draw(hnp.arrays(np.bool_, (B, N)))
    k = data.draw(st.integers(0, N + 1))
    obj = ref.build()
    sel = greedy_select(torch.from_numpy(H), k, obj, initial=torch.from_numpy(initial),
                        return_step_gains=True)
    lazy = greedy_select(torch.from_numpy(H), k, obj, initial=torch.from_numpy(initial),
                         method="lazy")
    assert torch.equal(lazy.indices, sel.indices)
    left = torch.from_numpy(~initial)
    _check_picks(sel.indices, sel.valid, left, k)
    assert sel.step_gains is not None and sel.step_gains.shape == (B, k, N)
    for b in range(B):
        start = [v for v in range(N) if initial[b, v]]
        picks = [v for v in sel.indices[b].tolist() if v >= 0]
        everything = [True] * N
        gained = ref.value(H[b].tolist(), start + picks, everything, None) - ref.value(
            H[b].tolist(), start, everything, None
        )
        assert _close(float(sel.gains[b].sum()), gained, 1e-8)
        taken = set(start)
        for step, pick in enumerate(sel.indices[b].tolist()):
            row = sel.step_gains[b, step]
            unavailable = torch.tensor([v in taken for v in range(N)])
            assert torch.equal(torch.isneginf(row), unavailable)
            if pick >= 0:
                assert int(row.argmax()) == pick and float(row[pick]) == float(sel.gains[b, step])
                taken.add(pick)


@FAST
@given(
    B=st.integers(0, 3), N=st.integers(0, 4), E=st.integers(0, 3), k=st.integers(0, 6),
    name=st.sampled_from(["sqrt", "log1p", "exp", "saturate", "pow", "facility"]),
    method=st.sampled_from(["naive", "lazy"]),
)
def test_greedy_degenerate_shapes(B: int, N: int, E: int, k: int, name: str, method: str) -> None:
    # Empty batches, no candidates, no features, k beyond N: valid, never an error.
    sel = greedy_select(torch.rand(B, N, E), k, name, method=method)
    assert sel.indices.shape == (B, k) and sel.gains.shape == (B, k)
    _check_picks(sel.indices, sel.valid, torch.ones(B, N, dtype=torch.bool), k)
    assert bool(torch.isfinite(sel.gains).all())


def _invalid_greedy_call(draw: st.DrawFn, case: str) -> tuple[Callable[[], Any], str]:
    """The call of ``case`` and a regex of the error message it must raise."""
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 5))
    E = draw(st.integers(1, 3))
    H = torch.rand(B, N, E, dtype=torch.float64)
    where = (draw(st.integers(0, B - 1)), draw(st.integers(0, N - 1)), draw(st.integers(0, E - 1)))
    nonfinite = H.clone()
    nonfinite[where] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    negative = H.clone()
    negative[where] = draw(st.floats(-1e6, -1e-300))
    k_negative = draw(st.integers(-5, -1))
    method = draw(st.sampled_from(["naive", "lazy"]))
    name = draw(st.sampled_from(["sqrt", "log1p", "facility"]))
    features = _shape(B, N, E)
    calls: dict[str, tuple[Callable[[], Any], str]] = {
        "nonfinite": (lambda: greedy_select(nonfinite, 2, name, method=method),
                      rf"^features contains NaN or inf values \(Tensor of shape {features} and dtype torch\.float64\)$"),
        "negative": (lambda: greedy_select(negative, 2, "sqrt", method=method),
                     r"^features must be nonnegative for a sum-of-concave objective, got minimum -\d"),
        "rank1": (lambda: greedy_select(H[0, 0], 2, method=method),
                  rf"^features must have shape \(N, E\) or \(B, N, E\), got Tensor of shape {_shape(E)} and dtype"),
        "rank4": (lambda: greedy_select(H.unsqueeze(0), 2, method=method),
                  rf"^features must have shape \(N, E\) or \(B, N, E\), got Tensor of shape {_shape(1, B, N, E)} and"),
        "list": (lambda: greedy_select(H.tolist(), 2, method=method),
                 r"^features must be a torch\.Tensor or numpy array, got list$"),
        "string_array": (lambda: greedy_select(np.array([["a", "b"]]), 1, method=method),
                         r"^features must be numeric, got ndarray of shape \(1, 2\) and dtype <U1$"),
        "complex": (lambda: greedy_select(H.to(torch.complex128), 2, method=method),
                    rf"^features must be real, got Tensor of shape {features} and dtype torch\.complex128$"),
        "k_negative": (lambda: greedy_select(H, k_negative, method=method),
                       rf"^k must be an integer >= 0, got {k_negative}$"),
        "k_float": (lambda: greedy_select(H, 2.0, method=method),  # type: ignore[arg-type]
                    r"^k must be an integer >= 0, got 2\.0 \(float\)$"),
        "k_bool": (lambda: greedy_select(H, True, method=method),  # type: ignore[arg-type]
                   r"^k must be an integer >= 0, got True \(bool\)$"),
        "k_str": (lambda: greedy_select(H, "2", method=method),  # type: ignore[arg-type]
                  r"^k must be an integer >= 0, got '2' \(str\)$"),
        "method": (lambda: greedy_select(H, 2, method="fast"),  # type: ignore[arg-type]
                   r"^method must be 'naive' or 'lazy', got 'fast'$"),
        "objective_name": (lambda: greedy_select(H, 2, "cube", method=method),
                           r"^unknown concave function 'cube'; known: exp, log1p, pow, saturate, sqrt$"),
        "objective_type": (lambda: greedy_select(H, 2, 3, method=method),  # type: ignore[arg-type]
                           r"^objective must be an Objective or a name \(exp, log1p, pow, saturate, sqrt, facility\), got int$"),
        "mask_shape": (lambda: greedy_select(H, 2, mask=torch.ones(B, N + 1, dtype=torch.bool)),
                       rf"^mask must have shape {_shape(B, N)}, got Tensor of shape {_shape(B, N + 1)} and dtype torch\.bool$"),
        "mask_float": (lambda: greedy_select(H, 2, mask=torch.full((B, N), 0.5)),
                       rf"^mask must be boolean \(or 0/1 integers\), got Tensor of shape {_shape(B, N)} and dtype torch\.float32$"),
        "mask_int2": (lambda: greedy_select(H, 2, mask=torch.full((B, N), 2)),
                      rf"^mask must be boolean \(or 0/1 integers\), got Tensor of shape {_shape(B, N)} and dtype torch\.int64$"),
        "mask_list": (lambda: greedy_select(H, 2, mask=[[True] * N] * B),
                      rf"^mask must be a bool tensor of shape {_shape(B, N)}, got list$"),
        "modular_nan": (lambda: greedy_select(H, 2, modular=torch.full((B, N), math.nan)),
                        r"^modular contains NaN or inf values$"),
        "modular_shape": (lambda: greedy_select(H, 2, modular=torch.zeros(B + 1, N)),
                          rf"^modular must have shape {_shape(B, N)}, got Tensor of shape {_shape(B + 1, N)} and"),
        # (the message is the shared mask check's, which names the argument 'mask')
        "initial_float": (lambda: greedy_select(H, 2, initial=torch.zeros(B, N)),
                          rf"must be boolean \(or 0/1 integers\), got Tensor of shape {_shape(B, N)} and dtype torch\.float32$"),
        "step_gains_lazy": (lambda: greedy_select(H, 2, method="lazy", return_step_gains=True),
                            r"^return_step_gains needs method='naive' \(lazy greedy skips evaluations\)$"),
        "weights_size": (lambda: greedy_select(H, 2, SCMM(weights=[1.0] * (E + 1)), method=method),
                         rf"^objective has {E + 1} feature weights but features have E={E}$"),
    }
    return calls[case]


GREEDY_CASES = [
    "nonfinite", "negative", "rank1", "rank4", "list", "string_array", "complex", "k_negative",
    "k_float", "k_bool", "k_str", "method", "objective_name", "objective_type", "mask_shape",
    "mask_float", "mask_int2", "mask_list", "modular_nan", "modular_shape", "initial_float",
    "step_gains_lazy", "weights_size",
]


@pytest.mark.parametrize("case", GREEDY_CASES)
@EACH
@given(data=st.data())
def test_greedy_invalid_input_raises_value_error(case: str, data: st.DataObject) -> None:
    call, message = _invalid_greedy_call(data.draw, case)
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- objectives


@FAST
@given(data=st.data())
def test_objective_value_is_the_reference_monotone_and_submodular(data: st.DataObject) -> None:
    H = data.draw(feature_batches(max_b=1, min_n=1))[0]
    N, E = H.shape
    ref = data.draw(ref_objectives(E))
    obj = ref.build()
    A = data.draw(st.sets(st.integers(0, N - 1)))
    B_extra = data.draw(st.sets(st.integers(0, N - 1)))
    Bset = A | B_extra  # A <= B
    v = data.draw(st.integers(0, N - 1))
    everything = [True] * N

    def f(S: set[int]) -> float:
        sel = torch.zeros(N, dtype=torch.bool)
        sel[sorted(S)] = True
        out = obj.value(torch.from_numpy(H), sel)
        assert out.shape == ()
        return float(out)

    for S in (A, Bset, A | {v}, Bset | {v}):
        assert _close(f(S), ref.value(H.tolist(), sorted(S), everything, None), 1e-9)
    tol = 1e-9 * (1 + abs(f(Bset | {v})))
    assert f(A | {v}) >= f(A) - tol  # monotone
    assert f(A | {v}) - f(A) >= f(Bset | {v}) - f(Bset) - tol  # diminishing returns
    # Soft weights: a 0/1 float vector is the same set.
    weights = torch.tensor([1.0 if i in A else 0.0 for i in range(N)], dtype=torch.float64)
    assert _close(float(obj.value(torch.from_numpy(H), weights)), f(A), 1e-12)


@pytest.mark.parametrize("kind", ["value", "shape", "none", "strings"])
@EACH
@given(
    N=st.integers(1, 4),
    bad=st.sampled_from([math.nan, math.inf, -1.0, -1e-30]),
    name=st.sampled_from(["sqrt", "log1p", "facility"]),
)
def test_objective_value_rejects_bad_sets(N: int, bad: float, name: str, kind: str) -> None:
    obj = FacilityLocation() if name == "facility" else SCMM(name)
    H = torch.rand(N, 2)
    selected: Any = {
        "value": torch.full((N,), bad),
        "shape": torch.ones(N + 1, dtype=torch.bool),
        "none": None,
        "strings": ["x"] * N,
    }[kind]
    message = {
        "value": r"^selected must be a bool set or finite, nonnegative weights$",
        "shape": rf"^selected must have shape {_shape(1, N)}, got {_shape(1, N + 1)}$",
        "none": rf"^selected must be a {_shape(1, N)} bool set or nonnegative weights, got NoneType$",
        "strings": rf"^selected must be a {_shape(1, N)} bool set or nonnegative weights, got list$",
    }[kind]
    with pytest.raises(ValueError, match=message):
        obj.value(H, selected)


# ---------------------------------------------------------------- relaxed greedy layers


TAUS = st.one_of(
    st.floats(1e-3, 100.0),
    st.sampled_from([1e-300, 1e-45, 1e-30, 1e-8, 1e6]),  # underflow and overflow of g / tau
)


@FAST
@given(
    data=st.data(),
    tau=TAUS,
    relaxation=st.sampled_from(["soft", "straight_through"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_soft_greedy_layers_are_distributions_over_what_is_left(
    data: st.DataObject, tau: float, relaxation: str, dtype: torch.dtype
) -> None:
    H = data.draw(feature_batches(min_n=1))
    B, N, E = H.shape
    ref = data.draw(ref_objectives(E))
    mask_np = data.draw(_masks(B, N))
    k = data.draw(st.integers(0, N + 2))
    mask = torch.ones(B, N, dtype=torch.bool) if mask_np is None else torch.from_numpy(mask_np)
    out = soft_greedy_select(
        torch.from_numpy(H).to(dtype), k, ref.build(), tau=tau,
        mask=None if mask_np is None else mask, relaxation=relaxation,  # type: ignore[arg-type]
    )
    assert out.distributions.shape == out.logits.shape == out.step_gains.shape == (B, k, N)
    _check_picks(out.indices, out.valid, mask, k)
    assert not bool(torch.isnan(out.distributions).any())
    assert not bool(torch.isnan(out.logits).any()) and not bool(torch.isposinf(out.logits).any())
    assert bool(torch.isfinite(out.gains).all())
    available = mask.clone()
    rows = torch.arange(B)
    for layer in range(k):
        dist = out.distributions[:, layer]
        logits = out.logits[:, layer]
        assert bool((dist >= 0).all())
        assert bool((dist[~available] == 0).all())
        assert torch.equal(torch.isneginf(logits) | ~available, torch.isneginf(logits))
        has = available.any(1)
        assert torch.equal(out.valid[:, layer], has)
        sums = dist.sum(1)
        torch.testing.assert_close(sums[has], torch.ones_like(sums[has]), rtol=0, atol=1e-5)
        assert bool((sums[~has] == 0).all())
        picks = out.indices[:, layer]
        # The hard pick is the argmax of the layer's distribution and of its logits.
        best = dist.max(1).values
        assert torch.equal(dist[rows[has], picks[has]], best[has])
        assert torch.equal(logits[rows[has], picks[has]], logits.max(1).values[has])
        available = available.clone()
        available[rows[has], picks[has]] = False


@FAST
@given(data=st.data(), tau=st.sampled_from([0.25, 0.5, 1.0, 2.0, 8.0, 1e-300]))
def test_straight_through_forward_is_hard_greedy(data: st.DataObject, tau: float) -> None:
    H = data.draw(feature_batches(min_n=1))
    B, N, E = H.shape
    ref = data.draw(ref_objectives(E))
    mask_np = data.draw(_masks(B, N))
    mask = None if mask_np is None else torch.from_numpy(mask_np)
    k = data.draw(st.integers(0, N + 1))
    obj = ref.build()
    hard = greedy_select(torch.from_numpy(H), k, obj, mask=mask)
    soft = soft_greedy_select(torch.from_numpy(H), k, obj, tau=tau, mask=mask,
                              relaxation="straight_through")
    # The picks are hard greedy's, but where g / tau (inexact at tau = 1e-300) rounds two
    # gains a float apart into one logit: the pick is then the first argmax of the logits
    # (what the losses read), and the rows part ways from there.
    for b in range(B):
        for layer in range(k):
            s_pick, h_pick = int(soft.indices[b, layer]), int(hard.indices[b, layer])
            if s_pick != h_pick:
                logits = soft.logits[b, layer]
                assert h_pick >= 0 and s_pick >= 0 and logits[s_pick] == logits[h_pick] == logits.max()
                assert float(soft.step_gains[b, layer, s_pick]) == pytest.approx(float(hard.gains[b, layer]),
                                                                                 rel=1e-12, abs=1e-300)
                break
            if s_pick >= 0:
                assert float(soft.gains[b, layer]) == pytest.approx(float(hard.gains[b, layer]), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("case", ["no_candidates", "tau_zero", "tau_negative", "tau_nan",
                                  "tau_inf", "tau_none", "relaxation", "negative", "nan", "k"])
@EACH
@given(B=st.integers(1, 2), N=st.integers(1, 3))
def test_soft_greedy_invalid_input_raises_value_error(case: str, B: int, N: int) -> None:
    H = torch.rand(B, N, 2)
    args: dict[str, Any] = {"features": H, "k": 2}
    if case == "no_candidates":
        args["features"] = torch.rand(B, 0, 2)
    elif case.startswith("tau"):
        args["tau"] = {"tau_zero": 0.0, "tau_negative": -1.0, "tau_nan": math.nan,
                       "tau_inf": math.inf, "tau_none": None}[case]
    elif case == "relaxation":
        args["relaxation"] = "gumbel"
    elif case == "negative":
        args["features"] = -H
    elif case == "nan":
        args["features"] = H * math.nan
    else:
        args["k"] = -1
    tau_message = {"tau_zero": "0.0", "tau_negative": "-1.0", "tau_nan": "nan", "tau_inf": "inf"}
    message = {
        "no_candidates": r"^soft_greedy_select needs at least one candidate \(got N = 0\)$",
        **{c: rf"^tau must be a finite number > 0, got {re.escape(v)}$" for c, v in tau_message.items()},
        "tau_none": r"^tau must be a positive number, got None$",
        "relaxation": r"^relaxation must be one of \('soft', 'straight_through'\), got 'gumbel'$",
        "negative": r"^features must be nonnegative for a sum-of-concave objective, got minimum -\d",
        "nan": rf"^features contains NaN or inf values \(Tensor of shape {_shape(B, N, 2)} and dtype torch\.float32\)$",
        "k": r"^k must be an integer >= 0, got -1$",
    }[case]
    with pytest.raises(ValueError, match=message):
        soft_greedy_select(**args)


# ---------------------------------------------------------------- losses


def _ref_layerwise(states: list[list[list[float]]], gold: list[list[bool]],
                   rel: list[list[float]] | None) -> list[float]:
    """The layer-wise loss (or, given ``rel``, the soft-label loss) in plain Python."""
    out = []
    for b, layers in enumerate(states):
        N = len(layers[0]) if layers else 0
        picked: set[int] = set()
        total = 0.0
        for row in layers:
            finite = [x for x in row if x != NEG_INF]
            if finite:
                top = max(finite)
                lse = top + math.log(sum(math.exp(x - top) for x in finite))
                logp = [x - lse if x != NEG_INF else NEG_INF for x in row]
            else:
                logp = [NEG_INF] * N
            if rel is None:
                for v in range(N):
                    if gold[b][v] and v not in picked:
                        total += -logp[v]
            else:
                r = [rel[b][v] if v not in picked else 0.0 for v in range(N)]
                mass = sum(r)
                for v in range(N):
                    share = r[v] / mass if mass > 0 else 0.0
                    if share > 0:
                        total += -share * logp[v]
            if finite:
                picked.add(row.index(max(finite)))
        out.append(total)
    return out


@st.composite
def layer_logits(draw: st.DrawFn) -> torch.Tensor:
    B = draw(st.integers(0, 3))
    K = draw(st.integers(0, 4))
    N = draw(st.integers(0, 5))
    values = draw(hnp.arrays(np.float64, (B, K, N), elements=st.floats(-20.0, 20.0)))
    holes = draw(hnp.arrays(np.bool_, (B, K, N)))
    values[holes] = NEG_INF
    return torch.from_numpy(values)


@FAST
@given(states=layer_logits(), data=st.data())
def test_losses_match_the_reference(states: torch.Tensor, data: st.DataObject) -> None:
    B, K, N = states.shape
    gold = torch.from_numpy(data.draw(hnp.arrays(np.bool_, (B, N))))
    rel = torch.from_numpy(data.draw(hnp.arrays(np.float64, (B, N), elements=st.floats(0.0, 5.0))))
    per = layerwise_cross_entropy(states, gold, reduction="none")
    soft = soft_label_cross_entropy(states, rel, reduction="none")
    assert per.shape == soft.shape == (B,)
    expected = _ref_layerwise(states.tolist(), gold.tolist(), None)
    expected_soft = _ref_layerwise(states.tolist(), gold.tolist(), rel.tolist())
    for got, want in zip(per.tolist() + soft.tolist(), expected + expected_soft, strict=True):
        assert got >= 0 and not math.isnan(got)
        assert _close(got, want, 1e-9)
    if B:
        assert _close(float(layerwise_cross_entropy(states, gold, reduction="sum")), sum(expected))
        assert _close(float(layerwise_cross_entropy(states, gold)), sum(expected) / B)
    if bool(torch.isfinite(states).all()) and N:  # probabilities give the same loss
        probs = torch.softmax(states, -1)
        picks = states.argmax(-1)  # (softmax may round a near-tie into a tie)
        again = layerwise_cross_entropy(probs, gold, picks, reduction="none", from_logits=False)
        torch.testing.assert_close(again, per, rtol=1e-7, atol=1e-7)


@FAST
@given(data=st.data())
def test_losses_on_the_greedy_layers_are_finite(data: st.DataObject) -> None:
    H = data.draw(feature_batches(min_n=1))
    B, N, _ = H.shape
    k = data.draw(st.integers(1, N + 1))
    gold = torch.from_numpy(data.draw(hnp.arrays(np.bool_, (B, N))))
    out = soft_greedy_select(torch.from_numpy(H), k, tau=data.draw(TAUS))
    for loss in (layerwise_cross_entropy(out.logits, gold, reduction="none"),
                 soft_label_cross_entropy(out.logits, gold.double(), reduction="none")):
        assert bool(torch.isfinite(loss).all()) and bool((loss >= 0).all())


@pytest.mark.parametrize("case", ["nan", "posinf", "rank", "gold_shape", "index_high",
                                  "index_low", "index_float", "index_shape", "relevance",
                                  "reduction", "list", "gold_list"])
@EACH
@given(B=st.integers(1, 3), K=st.integers(1, 3), N=st.integers(1, 4), data=st.data())
def test_losses_invalid_input_raises_value_error(
    case: str, B: int, K: int, N: int, data: st.DataObject
) -> None:
    states = torch.randn(B, K, N, dtype=torch.float64)
    gold = torch.ones(B, N, dtype=torch.bool)
    where = (data.draw(st.integers(0, B - 1)), data.draw(st.integers(0, K - 1)),
             data.draw(st.integers(0, N - 1)))
    kwargs: dict[str, Any] = {}
    fn: Callable[..., torch.Tensor] = layerwise_cross_entropy
    if case == "nan":
        states[where] = math.nan
    elif case == "posinf":
        states[where] = math.inf
    elif case == "rank":
        states = states[0]
    elif case == "gold_shape":
        gold = torch.ones(B, N + 1, dtype=torch.bool)
    elif case.startswith("index"):
        indices = torch.full((B, K), -1)
        if case == "index_high":
            indices[where[:2]] = data.draw(st.integers(N, N + 5))
        elif case == "index_low":
            indices[where[:2]] = data.draw(st.integers(-10, -2))
        elif case == "index_float":
            indices = indices.double()
        else:
            indices = torch.zeros(B, K + 1, dtype=torch.long)
        kwargs["indices"] = indices
    elif case == "relevance":
        fn = soft_label_cross_entropy
        gold = torch.ones(B, N)
        gold[where[0], where[2]] = data.draw(st.sampled_from([-1.0, math.nan, math.inf]))
    elif case == "reduction":
        kwargs["reduction"] = "avg"
    elif case == "list":
        states = states.tolist()  # type: ignore[assignment]
    else:
        gold = gold.tolist()  # type: ignore[assignment]
    indices_range = rf"^indices must be candidate indices in \[0, {N}\) or -1 for no pick$"
    message = {
        "nan": r"^states contain NaN or \+inf values$",
        "posinf": r"^states contain NaN or \+inf values$",
        "rank": rf"^states must have shape \(B, K, N\), got {_shape(K, N)}$",
        "gold_shape": rf"^gold must have shape {_shape(B, N)}, got {_shape(B, N + 1)}$",
        "index_high": indices_range,
        "index_low": indices_range,
        "index_float": rf"^indices must be an integer tensor, got tensor of shape {_shape(B, K)} and dtype torch\.float64$",
        "index_shape": rf"^indices must have shape {_shape(B, K)}, got {_shape(B, K + 1)}$",
        "relevance": r"^relevance must be finite and nonnegative$",
        "reduction": r"^reduction must be 'none', 'mean' or 'sum', got 'avg'$",
        "list": r"^states must be a floating-point tensor, got list$",
        "gold_list": r"^gold must be a real tensor, got list$",
    }[case]
    with pytest.raises(ValueError, match=message):
        fn(states, gold, **kwargs)


# ---------------------------------------------------------------- metrics


@st.composite
def ranked_problems(draw: st.DrawFn) -> tuple[list[int], list[list[int]], list[float] | None]:
    N = draw(st.integers(1, 8))
    picks = draw(st.lists(st.integers(0, N - 1), unique=True, max_size=N))
    ranking = list(picks)
    for _ in range(draw(st.integers(0, 2))):  # -1 means "no pick" and may appear anywhere
        ranking.insert(draw(st.integers(0, len(ranking))), -1)
    gold = draw(st.lists(st.lists(st.integers(0, N - 1), max_size=4), max_size=3))
    relevance = draw(st.one_of(
        st.none(),
        st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1e300), st.floats(0.0, 3.0)),
                 min_size=N, max_size=N),
    ))
    return ranking, gold, relevance


def _ref_set_metrics(ranking: list[int], gold: list[list[int]], k: int) -> dict[str, float] | None:
    groups = [set(g) for g in gold if g]
    if not groups:
        return None
    top = [v for v in ranking if v >= 0][:k]
    union = set().union(*groups)
    return {
        "recall": max(len(g & set(top)) / len(g) for g in groups),
        "precision": sum(v in union for v in top) / len(top) if top else 0.0,
        "strict": float(any(g <= set(top) for g in groups)),
    }


@FAST
@given(corpus=st.lists(ranked_problems(), max_size=6), k=st.integers(1, 12))
def test_evaluate_rankings_matches_the_reference(
    corpus: list[tuple[list[int], list[list[int]], list[float] | None]], k: int
) -> None:
    rankings = [r for r, _, _ in corpus]
    golds = [g for _, g, _ in corpus]
    rels = [rel for _, _, rel in corpus]
    names = ("recall", "precision", "strict", "f1", "ndcg", "ndcg_exp", "mrr", "map")
    scores = evaluate_rankings(rankings, golds, rels, ks=(k,), names=names)
    refs = [m for m in (_ref_set_metrics(r, g, k) for r, g in zip(rankings, golds, strict=True))
            if m is not None]
    assert scores["count"] == len(refs)
    for name in ("recall", "precision", "strict"):
        value = scores[f"{name}@{k}"]
        if not refs:
            assert math.isnan(value)
        else:
            assert 0.0 <= value <= 1.0
            assert _close(value, sum(m[name] for m in refs) / len(refs))
    for name in ("f1", "ndcg", "ndcg_exp", "mrr", "map"):
        value = scores[f"{name}@{k}"]
        assert math.isnan(value) or 0.0 <= value <= 1.0


@FAST
@given(problem=ranked_problems(), k=st.one_of(st.none(), st.integers(1, 10)))
def test_graded_metrics_are_in_range_and_ideal_order_scores_one(
    problem: tuple[list[int], list[list[int]], list[float] | None], k: int | None
) -> None:
    ranking, _, relevance = problem
    assume(relevance is not None)
    assert relevance is not None
    relevant = any(r > 0 for r in relevance)
    for fn in (lambda r, rel: ndcg_at_k(r, rel, k), lambda r, rel: ndcg_at_k(r, rel, k, gain="exp"),
               lambda r, rel: mrr(r, rel, k), lambda r, rel: average_precision(r, rel, k)):
        value = fn(ranking, relevance)
        if not relevant:
            assert value is None
        else:
            assert value is not None and 0.0 <= value <= 1.0
    if relevant:
        ideal = sorted(range(len(relevance)), key=lambda v: -relevance[v])
        assert ndcg_at_k(ideal, relevance, k) == pytest.approx(1.0, abs=1e-12)
        assert ndcg_at_k(ideal, relevance, k, gain="exp") == pytest.approx(1.0, abs=1e-12)
        picks = [v for v in ranking if v >= 0][:k]
        hits = [i for i, v in enumerate(picks) if relevance[v] > 0]
        expected = 1.0 / (hits[0] + 1) if hits else 0.0
        assert mrr(ranking, relevance, k) == pytest.approx(expected)


@pytest.mark.parametrize("case", [
    "duplicate", "below_minus_one", "float", "bool", "string", "nested", "gold_flat",
    "gold_negative", "relevance_nan", "relevance_negative", "relevance_short", "k_zero",
    "k_float", "zero_division", "lengths", "rankings_none", "ks_int", "names_none",
])
@EACH
@given(problem=ranked_problems())
def test_metrics_invalid_input_raises_value_error(
    problem: tuple[list[int], list[list[int]], list[float] | None], case: str
) -> None:
    ranking, gold, relevance = problem
    gold = [[0]] + gold
    ranking = ranking + [0, 1]  # a valid ranking can be made invalid by one entry
    ranking = list(dict.fromkeys(ranking))
    top = max(ranking)  # the highest candidate the ranking picks
    rel: list[float] | None = relevance
    if rel is not None and len(rel) <= top:  # the appended picks need entries too: one defect per case
        rel = rel + [0.0] * (top + 1 - len(rel))
    kwargs: dict[str, Any] = {}
    rankings: Any = [ranking]
    golds: Any = [gold]
    if case == "duplicate":
        ranking.append(ranking[-1] if ranking[-1] >= 0 else 0)
        ranking.append(0)
    elif case == "below_minus_one":
        ranking.append(-2)
    elif case == "float":
        ranking.append(1.0)  # type: ignore[arg-type]
    elif case == "bool":
        ranking.append(True)  # type: ignore[arg-type]
    elif case == "string":
        rankings = ["012"]
    elif case == "nested":
        ranking.append([3])  # type: ignore[arg-type]
    elif case == "gold_flat":
        golds = [[0, 1]]
    elif case == "gold_negative":
        golds = [[[0, -3]]]
    elif case.startswith("relevance"):
        rel = [1.0] * (top + 1)
        if case == "relevance_nan":
            rel[0] = math.nan
        elif case == "relevance_negative":
            rel[-1] = -0.5
        else:
            rel = rel[:-1]
    elif case == "k_zero":
        kwargs["ks"] = (0,)
    elif case == "k_float":
        kwargs["ks"] = (2.5,)
    elif case == "zero_division":
        kwargs["zero_division"] = 1.5
    elif case == "lengths":
        golds = [gold, gold]
    elif case == "rankings_none":
        rankings = None
    elif case == "ks_int":
        kwargs["ks"] = 5
    else:
        kwargs["names"] = None
    pick = r"^problem 0: ranking\[\d+\] must be "
    message = {
        "duplicate": r"^problem 0: ranking\[\d+\] repeats candidate \d+; picks must be distinct$",
        "below_minus_one": pick + r"a candidate index >= 0 \(or -1 for no pick\), got -2$",
        "float": pick + r"an integer candidate index, got float 1\.0$",
        "bool": pick + r"an integer candidate index, got bool True$",
        "string": r"^problem 0: ranking must be a sequence of candidate indices, got str$",
        "nested": pick + r"an integer candidate index, got list \[3\]$",
        "gold_flat": r"^problem 0: gold\[0\] must be a list of candidate indices, got int 0; gold is a list of alternative sets",
        "gold_negative": r"^problem 0: gold\[0\]\[1\] must be a candidate index >= 0, got -3$",
        "relevance_nan": r"^problem 0: relevance\[0\] must be finite and >= 0, got nan$",
        "relevance_negative": rf"^problem 0: relevance\[{top}\] must be finite and >= 0, got -0\.5$",
        "relevance_short": rf"^problem 0: ranking picks candidate {top} but relevance has only {top} entries",
        "k_zero": r"^each of ks must be a positive int, got 0$",
        "k_float": r"^each of ks must be a positive int, got 2\.5$",
        "zero_division": r"^zero_division must be a number in \[0, 1\], got 1\.5$",
        "lengths": r"^golds has more entries than rankings \(1\)$",
        "rankings_none": r"^rankings must be an iterable with one entry per problem, got NoneType$",
        "ks_int": r"^ks must be a sequence of positive ints, got int$",
        "names_none": r"^names must be a sequence of metric names, got NoneType$",
    }[case]
    with pytest.raises(ValueError, match=message):
        evaluate_rankings(rankings, golds, None if rel is None else [rel], **kwargs)


# ---------------------------------------------------------------- encoders and the DGN


@FEW
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=2),
    F=st.integers(1, 5), hidden=st.integers(1, 6), E=st.integers(1, 4),
    deep=st.booleans(), data=st.data(),
)
def test_encoders_map_any_batch_shape_to_nonnegative_features(
    shape: list[int], F: int, hidden: int, E: int, deep: bool, data: st.DataObject
) -> None:
    enc = (DeepEncoder if deep else Encoder)(F, hidden, E)
    x = torch.from_numpy(
        data.draw(hnp.arrays(np.float32, (*shape, F), elements=st.floats(-1e3, 1e3, width=32)))
    )
    out = enc(x)
    assert out.shape == (*shape, E)
    assert bool((out >= 0).all()) and bool(torch.isfinite(out).all())


@FEW
@given(
    sizes=st.tuples(st.integers(-2, 3), st.integers(-2, 3), st.integers(-2, 3)),
    dropout=st.one_of(st.floats(-1.0, 2.0), st.just(math.nan)),
    deep=st.booleans(),
)
def test_encoder_settings_are_checked(
    sizes: tuple[int, int, int], dropout: float, deep: bool
) -> None:
    cls = DeepEncoder if deep else Encoder
    if min(sizes) > 0 and 0.0 <= dropout < 1.0:
        assert cls(*sizes, dropout=dropout).out_features == sizes[2]
    else:
        bad = [(name, v) for name, v in zip(("in_features", "hidden_features", "out_features"), sizes, strict=True)
               if v <= 0]
        message = (rf"^{bad[0][0]} must be a positive integer, got {bad[0][1]}$" if bad
                   else rf"^dropout must be in \[0, 1\), got {re.escape(repr(dropout))}$")
        with pytest.raises(ValueError, match=message):
            cls(*sizes, dropout=dropout)


@FEW
@given(
    B=st.integers(0, 3), N=st.integers(1, 5), F=st.integers(1, 4), steps=st.integers(1, 4),
    override=st.one_of(st.none(), st.integers(0, 7)), train=st.booleans(),
    relaxation=st.sampled_from(["soft", "straight_through"]), modular=st.booleans(),
    data=st.data(),
)
def test_dgn_forward_gives_valid_picks_and_layers(
    B: int, N: int, F: int, steps: int, override: int | None, train: bool, relaxation: str,
    modular: bool, data: st.DataObject,
) -> None:
    torch.manual_seed(data.draw(st.integers(0, 100)))
    model = DGN(DGNConfig(in_features=F, hidden_features=5, encoded_features=3, steps=steps,
                          relaxation=relaxation, modular=modular))
    model.train(train)
    X = torch.from_numpy(
        data.draw(hnp.arrays(np.float32, (B, N, F), elements=st.floats(-10, 10, width=32)))
    )
    mask = torch.from_numpy(data.draw(hnp.arrays(np.bool_, (B, N))))
    out = model(X, mask, steps=override)
    K = steps if override is None else override
    assert out.logits.shape == out.distributions.shape == (B, K, N)
    assert out.encoded.shape == (B, N, 3) and bool((out.encoded >= 0).all())
    assert bool((out.encoded[~mask] == 0).all())
    _check_picks(out.indices, out.valid, mask, K)
    sums = out.distributions.sum(-1)
    torch.testing.assert_close(sums[out.valid], torch.ones_like(sums[out.valid]), atol=1e-5,
                               rtol=0)
    assert bool((sums[~out.valid] == 0).all())
    assert not bool(torch.isnan(out.logits).any())
    if not train:  # eval(): exact hard greedy on the learned objective
        with torch.no_grad():
            H = model.encode(X, mask)
            sel = greedy_select(H, K, model.objective, mask, modular=model.modular_scores(H))
        assert torch.equal(out.indices, sel.indices)


@pytest.mark.parametrize("case", ["features_width", "nan", "inf", "rank", "mask_shape",
                                  "mask_float", "steps_negative", "list"])
@EACH
@given(train=st.booleans(), B=st.integers(1, 2), N=st.integers(1, 3))
def test_dgn_invalid_input_raises_value_error(case: str, train: bool, B: int, N: int) -> None:
    model = DGN(DGNConfig(in_features=3, hidden_features=4, encoded_features=2, steps=2))
    model.train(train)
    X: Any = torch.randn(B, N, 3)
    kwargs: dict[str, Any] = {}
    if case == "features_width":
        X = torch.randn(B, N, 4)
    elif case == "nan":
        X[0, 0, 0] = math.nan
    elif case == "inf":
        X[-1, -1, -1] = -math.inf
    elif case == "rank":
        X = X[0, 0]
    elif case == "mask_shape":
        kwargs["mask"] = torch.ones(B, N + 1, dtype=torch.bool)
    elif case == "mask_float":
        kwargs["mask"] = torch.full((B, N), 0.5)
    elif case == "steps_negative":
        kwargs["steps"] = -1
    else:
        X = X.tolist()
    nonfinite = rf"^features contains NaN or inf values \(Tensor of shape {_shape(B, N, 3)} and dtype torch\.float32\)$"
    message = {
        "features_width": r"^features have F=4 but the model expects in_features=3$",
        "nan": nonfinite,
        "inf": nonfinite,
        "rank": r"^features must have shape \(N, E\) or \(B, N, E\), got Tensor of shape \(3,\) and dtype",
        "mask_shape": rf"^mask must have shape {_shape(B, N)}, got Tensor of shape {_shape(B, N + 1)} and dtype torch\.bool$",
        "mask_float": rf"^mask must be boolean \(or 0/1 integers\), got Tensor of shape {_shape(B, N)} and dtype torch\.float32$",
        "steps_negative": r"^k must be an integer >= 0, got -1$",  # steps is greedy's k
        "list": r"^features must be a torch\.Tensor or numpy array, got list$",
    }[case]
    with pytest.raises(ValueError, match=message):
        model(X, **kwargs)


# ---------------------------------------------------------------- regressions
# Minimal cases the properties above found; kept explicit so they are always checked.


def test_regression_empty_batch_hard_greedy() -> None:
    for method in ("naive", "lazy"):
        sel = greedy_select(torch.zeros(0, 3, 2), 2, method=method)  # type: ignore[arg-type]
        assert sel.indices.shape == (0, 2) and sel.gains.shape == (0, 2)


def test_regression_tiny_temperature_gives_distributions_not_nan() -> None:
    H = torch.tensor([[4.0, 0.0], [4.0, 0.0], [0.0, 1.0]])  # float32: tau underflows to 0
    for relaxation in ("soft", "straight_through"):
        out = soft_greedy_select(H, 3, tau=1e-300, relaxation=relaxation)  # type: ignore[arg-type]
        assert out.indices.tolist() == [0, 2, 1]
        assert torch.equal(out.distributions[0], torch.tensor([0.5, 0.5, 0.0]))
        assert torch.equal(out.distributions[1:], torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))


def test_regression_straight_through_state_is_exactly_the_hard_one() -> None:
    # (1 + s) - s is not always 1 in floating point; the forward must add exactly one-hot.
    H = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    soft = soft_greedy_select(H, 4, "saturate", tau=1.0, relaxation="straight_through")
    assert soft.indices.tolist() == greedy_select(H, 4, "saturate").indices.tolist() == [0, 1, 2, 3]
    assert soft.gains.tolist() == [2.0, 0.0, 0.0, 0.0]


def test_regression_straight_through_pick_at_a_tiny_temperature_is_the_logits_argmax() -> None:
    # cosine self-similarity rounds to 1 - 1.1e-16 for one row and 1 for another; g / 1e-300
    # rounds both to one logit. Hard greedy picks the larger gain (2); straight-through picks
    # the first argmax of the logits (0), the pick the losses take without indices, so the
    # loss stays finite with gold on either item.
    H = torch.tensor([[[0.0, 1.671875, 2.5], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    hard = greedy_select(H, 2, FacilityLocation("cosine"), mask=mask)
    soft = soft_greedy_select(H, 2, FacilityLocation("cosine"), tau=1e-300, mask=mask,
                              relaxation="straight_through")
    assert hard.indices.tolist() == [[2, 0]] and soft.indices.tolist() == [[0, 2]]
    for gold in ([[True, False, False]], [[False, False, True]]):
        gold_t = torch.tensor(gold)
        loss = layerwise_cross_entropy(soft.logits, gold_t)
        assert math.isfinite(float(loss))
        assert float(loss) == float(layerwise_cross_entropy(soft.logits, gold_t, soft.indices))


def test_regression_objective_values_of_edge_sets() -> None:
    assert FacilityLocation().value(torch.zeros(0, 2), torch.zeros(0, dtype=torch.bool)) == 0
    weights = r"^selected must be a bool set or finite, nonnegative weights$"
    for selected, message in (
        (None, r"^selected must be a \(1, 2\) bool set or nonnegative weights, got NoneType$"),
        (torch.tensor([-1.0, 0.0]), weights),
        (torch.tensor([math.nan, 1.0]), weights),
    ):
        with pytest.raises(ValueError, match=message):
            SCMM().value(torch.ones(2, 2), selected)


def test_regression_losses_edge_inputs() -> None:
    empty = torch.zeros(2, 3, 0)
    assert layerwise_cross_entropy(empty, torch.zeros(2, 0, dtype=torch.bool)).item() == 0.0
    states = torch.zeros(1, 1, 2, dtype=torch.float64)
    # N itself is out of range, not "no pick"
    with pytest.raises(ValueError, match=r"^indices must be candidate indices in \[0, 2\) or -1 for no pick$"):
        layerwise_cross_entropy(states, torch.ones(1, 2, dtype=torch.bool), torch.tensor([[2]]))
    tiny = torch.tensor([[2e-311, 2e-311]], dtype=torch.float64)  # subnormal total relevance
    assert soft_label_cross_entropy(states, tiny).item() == pytest.approx(math.log(2.0))


def test_regression_graded_metrics_at_extreme_grades() -> None:
    assert 0.0 < ndcg_at_k([1, 0], [2000.0, 1000.0], gain="exp") < 1.0  # 2**2000 overflows
    assert ndcg_at_k([0], [1e-20], gain="exp") == 1.0  # 2**1e-20 - 1 rounds to 0
    assert ndcg_at_k([0, 1, 2], [1e308] * 3) == 1.0  # the DCG sum overflows
    with pytest.raises(ValueError, match=r"^rankings must be an iterable with one entry per problem, got NoneType$"):
        evaluate_rankings(None, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^precision must be a number in \[0, 1\] \(or NaN\), got 1\.5$"):
        dgn.metrics.f1_from_precision_recall(1.5, 0.5)
