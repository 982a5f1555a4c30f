"""Hard greedy against brute force and apricot; the relaxed layers against hard greedy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from dgn import SCMM, FacilityLocation, greedy_select, soft_greedy_select

ATOL = 1e-9
OBJECTIVES = ["sqrt", "log1p", "exp", "saturate", "pow", "facility"]


def brute_force_greedy(H: torch.Tensor, k: int, obj, mask=None):
    """Greedy by evaluating f on every candidate set explicitly (no gains, no state)."""
    N = H.shape[0]
    valid = [True] * N if mask is None else mask.tolist()
    chosen: list[int] = []
    gains: list[float] = []

    def f(items):
        sel = torch.zeros(1, N, dtype=torch.bool)
        sel[0, items] = True
        return float(obj.value(H.unsqueeze(0), sel))

    for _ in range(k):
        base = f(chosen)
        best, best_gain = -1, -math.inf
        for v in range(N):
            if not valid[v] or v in chosen:
                continue
            g = f(chosen + [v]) - base
            if g > best_gain + 1e-12:  # strict: ties keep the lowest index
                best, best_gain = v, g
        if best < 0:
            chosen.append(-1)
            gains.append(0.0)
            continue
        chosen.append(best)
        gains.append(best_gain)
    picks = [c for c in chosen]
    return picks, gains


def _obj(name):
    return FacilityLocation() if name == "facility" else SCMM(name)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_hard_greedy_equals_brute_force(name):
    gen = torch.Generator().manual_seed(0)
    obj = _obj(name)
    for trial in range(10):
        N = 3 + trial % 5
        H = torch.rand(N, 4, dtype=torch.float64, generator=gen) * 2
        k = min(N, 4)
        sel = greedy_select(H, k, obj)
        picks, gains = brute_force_greedy(H, k, obj)
        assert sel.indices.tolist() == picks
        np.testing.assert_allclose(sel.gains.numpy(), gains, atol=ATOL)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_batched_equals_loop_and_lazy_equals_naive(name):
    gen = torch.Generator().manual_seed(1)
    obj = _obj(name)
    H = torch.rand(6, 9, 5, dtype=torch.float64, generator=gen)
    batched = greedy_select(H, 5, obj)
    lazy = greedy_select(H, 5, obj, method="lazy")
    assert torch.equal(batched.indices, lazy.indices)
    torch.testing.assert_close(batched.gains, lazy.gains, atol=ATOL, rtol=0)
    for b in range(6):
        single = greedy_select(H[b], 5, obj)
        assert torch.equal(single.indices, batched.indices[b])
        torch.testing.assert_close(single.gains, batched.gains[b], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_padded_with_mask_equals_unpadded(name):
    gen = torch.Generator().manual_seed(2)
    obj = _obj(name)
    sizes = [3, 7, 5, 1]
    N = max(sizes)
    padded = torch.rand(len(sizes), N, 4, dtype=torch.float64, generator=gen) * 3
    mask = torch.zeros(len(sizes), N, dtype=torch.bool)
    for b, n in enumerate(sizes):
        mask[b, :n] = True
    out = greedy_select(padded, 6, obj, mask=mask)
    lazy = greedy_select(padded, 6, obj, mask=mask, method="lazy")
    assert torch.equal(out.indices, lazy.indices)
    for b, n in enumerate(sizes):
        ref = greedy_select(padded[b, :n], 6, obj)
        assert torch.equal(out.indices[b], ref.indices)
        torch.testing.assert_close(out.gains[b], ref.gains, atol=ATOL, rtol=0)
        assert out.valid[b].tolist() == [i < n for i in range(6)]
        assert out.indices[b, n:].eq(-1).all()


@pytest.mark.parametrize("name", OBJECTIVES)
def test_gains_nonincreasing_and_sum_to_value(name):
    gen = torch.Generator().manual_seed(3)
    obj = _obj(name)
    H = torch.rand(8, 12, 6, dtype=torch.float64, generator=gen)
    sel = greedy_select(H, 7, obj)
    assert bool((sel.gains[:, 1:] <= sel.gains[:, :-1] + ATOL).all())
    chosen = torch.zeros(8, 12, dtype=torch.bool)
    chosen.scatter_(1, sel.indices, True)
    torch.testing.assert_close(sel.value(), obj.value(H, chosen), atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_greedy_reaches_one_minus_one_over_e_of_optimum(name):
    gen = torch.Generator().manual_seed(4)
    obj = _obj(name)
    worst = 1.0
    for _ in range(15):
        N, k = 7, 3
        H = torch.rand(N, 3, dtype=torch.float64, generator=gen) ** 3  # skewed, harder
        best = 0.0
        for subset in itertools.combinations(range(N), k):
            sel = torch.zeros(1, N, dtype=torch.bool)
            sel[0, list(subset)] = True
            best = max(best, float(obj.value(H.unsqueeze(0), sel)))
        got = float(greedy_select(H, k, obj).gains.sum())
        worst = min(worst, got / best)
    assert worst >= 1 - 1 / math.e - 1e-12


def test_ties_go_to_lowest_index_in_both_methods():
    H = torch.ones(5, 3)
    for method in ("naive", "lazy"):
        assert greedy_select(H, 5, method=method).indices.tolist() == [0, 1, 2, 3, 4]
    H = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    for method in ("naive", "lazy"):
        assert greedy_select(H, 4, method=method).indices.tolist() == [0, 1, 2, 3]


def test_k_beyond_valid_candidates_gives_invalid_picks():
    H = torch.rand(2, 3, 4)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    for method in ("naive", "lazy"):
        out = greedy_select(H, 4, mask=mask, method=method)
        assert out.valid.tolist() == [[True, True, False, False], [False] * 4]
        assert out.indices[0, 2:].tolist() == [-1, -1]
        assert out.indices[1].tolist() == [-1] * 4
        assert set(out.indices[0, :2].tolist()) == {0, 2}
        assert out.gains[~out.valid].eq(0).all()


def test_initial_set_is_counted_and_never_picked():
    gen = torch.Generator().manual_seed(5)
    H = torch.rand(2, 6, 3, dtype=torch.float64, generator=gen)
    initial = torch.zeros(2, 6, dtype=torch.bool)
    initial[:, 0] = True
    for method in ("naive", "lazy"):
        out = greedy_select(H, 3, initial=initial, method=method)
        assert not out.indices.eq(0).any()
        # Same as greedy with the first pick forced to 0.
        f = SCMM("sqrt")
        for b in range(2):
            chosen = [0]
            for i in out.indices[b].tolist():
                sel = torch.zeros(1, 6, dtype=torch.bool)
                sel[0, chosen] = True
                before = float(f.value(H[b : b + 1], sel))
                sel[0, i] = True
                assert float(out.gains[b, len(chosen) - 1]) == pytest.approx(
                    float(f.value(H[b : b + 1], sel)) - before
                )
                chosen.append(i)


def test_modular_bonus_shifts_gains():
    H = torch.zeros(1, 3, 2)
    bonus = torch.tensor([[0.0, 2.0, 1.0]])
    out = greedy_select(H, 3, modular=bonus)
    assert out.indices.tolist() == [[1, 2, 0]]
    assert out.gains.tolist() == [[2.0, 1.0, 0.0]]
    assert torch.equal(greedy_select(H, 3, modular=bonus, method="lazy").indices, out.indices)


def test_numpy_input_and_step_gains():
    rng = np.random.default_rng(0)
    X = rng.random((10, 4))
    out = greedy_select(X, 3, return_step_gains=True)
    assert out.indices.dtype == torch.long and out.indices.shape == (3,)
    assert out.step_gains.shape == (3, 10)
    # the gains of the picks are the maxima of the step gains
    torch.testing.assert_close(out.step_gains.max(-1).values, out.gains)
    # already-picked candidates are -inf in later steps
    assert math.isinf(float(out.step_gains[1, out.indices[0]]))


@pytest.mark.reference
def test_matches_apricot_feature_based_selection():
    apricot = pytest.importorskip("apricot")
    rng = np.random.default_rng(6)
    for _ in range(3):
        X = rng.random((30, 8))
        ref = apricot.FeatureBasedSelection(6, concave_func="sqrt", optimizer="naive").fit(X)
        ours = greedy_select(X, 6, "sqrt")
        assert ours.indices.tolist() == [int(i) for i in ref.ranking]
        np.testing.assert_allclose(ours.gains.numpy(), ref.gains, rtol=1e-9)


# ----------------------------------------------------------------- relaxed layers
@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
@pytest.mark.parametrize("name", OBJECTIVES)
def test_tiny_temperature_equals_hard_greedy(relaxation, name):
    gen = torch.Generator().manual_seed(7)
    # exact ties (e.g. every gain 0 once min(x, cap) saturates) are where the soft state
    # spreads mass by design; keep the cap out of reach here
    obj = SCMM("saturate", cap=100.0) if name == "saturate" else _obj(name)
    H = torch.rand(5, 8, 4, dtype=torch.float64, generator=gen)
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[1, 5:] = False
    hard = greedy_select(H, 6, obj, mask=mask)
    soft = soft_greedy_select(H, 6, obj, tau=1e-6, mask=mask, relaxation=relaxation)
    assert torch.equal(soft.indices, hard.indices)
    torch.testing.assert_close(soft.gains, hard.gains, atol=1e-6, rtol=0)
    # the distributions are one-hot at the picks wherever the best gain is unique
    # (exact ties, e.g. all gains 0 once everything is covered, share the mass)
    onehot = torch.zeros_like(soft.distributions)
    onehot.scatter_(2, hard.indices.clamp_min(0).unsqueeze(-1), 1.0)
    onehot = onehot * hard.valid.unsqueeze(-1)
    steps = greedy_select(H, 6, obj, mask=mask, return_step_gains=True).step_gains
    top2 = steps.topk(2, dim=-1).values
    unique = (top2[..., 0] - top2[..., 1] > 1e-3) & hard.valid
    assert unique.sum() > 10
    torch.testing.assert_close(soft.distributions[unique], onehot[unique], atol=1e-6, rtol=0)


@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
@pytest.mark.parametrize("tau", [0.1, 1.0, 5.0, 100.0])
def test_distributions_are_masked_probability_vectors(relaxation, tau):
    gen = torch.Generator().manual_seed(8)
    H = torch.rand(4, 6, 3, dtype=torch.float64, generator=gen)
    mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [0] * 6, [1, 0, 1, 0, 1, 0]]).bool()
    out = soft_greedy_select(H, 5, "sqrt", tau=tau, mask=mask, relaxation=relaxation)
    picked = torch.zeros(4, 6, dtype=torch.bool)
    for k in range(5):
        s = out.distributions[:, k]
        available = mask & ~picked
        assert bool((s >= 0).all())
        assert s[~available].eq(0).all(), "padding and already-picked items get exactly 0"
        sums = s.sum(-1)
        has = available.any(-1)
        torch.testing.assert_close(sums[has], torch.ones_like(sums[has]))
        assert sums[~has].eq(0).all()
        assert out.indices[~has, k].eq(-1).all()
        rows = torch.nonzero(has).flatten()
        picked[rows, out.indices[rows, k]] = True


def test_straight_through_forward_is_hard_greedy_at_any_temperature():
    gen = torch.Generator().manual_seed(9)
    H = torch.rand(6, 10, 5, dtype=torch.float64, generator=gen)
    hard = greedy_select(H, 7)
    for tau in (0.5, 4.0, 50.0):
        soft = soft_greedy_select(H, 7, tau=tau, relaxation="straight_through")
        assert torch.equal(soft.indices, hard.indices)
        torch.testing.assert_close(soft.gains, hard.gains, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["sqrt", "log1p", "exp", "pow", "facility"])
def test_gradcheck_soft_relaxed_layers(name):
    gen = torch.Generator().manual_seed(10)
    H = (torch.rand(2, 5, 3, dtype=torch.float64, generator=gen) + 0.1).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool()
    obj = _obj(name)

    def fn(H):
        out = soft_greedy_select(H, 3, obj, tau=0.7, mask=mask, relaxation="soft")
        return out.distributions, out.logits.masked_fill(out.distributions == 0, 0.0)

    assert torch.autograd.gradcheck(fn, (H,))


def test_straight_through_gradient_is_the_soft_surrogate():
    # Forward: one-hot picks. Backward: as if the state had advanced by s_k. So the
    # gradient equals that of a function whose forward uses s_k in place of the one-hot
    # but is evaluated where s_k equals the one-hot; check it on layer 1 exactly, where no
    # update has happened yet, and that later layers' gradients are finite and nonzero.
    gen = torch.Generator().manual_seed(11)
    H = (torch.rand(2, 5, 3, dtype=torch.float64, generator=gen) + 0.1).requires_grad_()

    def first_layer(H):
        return soft_greedy_select(H, 1, tau=0.7, relaxation="straight_through").distributions

    assert torch.autograd.gradcheck(first_layer, (H,))
    out = soft_greedy_select(H, 3, tau=0.7, relaxation="straight_through")
    (grad,) = torch.autograd.grad(out.distributions[:, 2].pow(2).sum(), H)
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: greedy_select(-torch.ones(3, 2), 2), "nonnegative"),
        (lambda: greedy_select(torch.tensor([[1.0, float("nan")]]), 1), "NaN or inf"),
        (lambda: greedy_select(torch.tensor([[1.0, float("inf")]]), 1), "NaN or inf"),
        (lambda: greedy_select(torch.ones(3), 1), r"shape \(N, E\) or \(B, N, E\)"),
        (lambda: greedy_select(torch.ones(1, 2, 3, 4), 1), r"got Tensor of shape \(1, 2, 3, 4\)"),
        (lambda: greedy_select(torch.ones(3, 2), -1), "k must be an integer >= 0, got -1"),
        (lambda: greedy_select(torch.ones(3, 2), 1.5), "k must be an integer"),
        (lambda: greedy_select(torch.ones(2, 3, 2), 1, mask=torch.ones(3, 2).bool()),
         r"mask must have shape \(2, 3\), got Tensor of shape \(3, 2\)"),
        (lambda: greedy_select(torch.ones(3, 2), 1, method="fast"), "method must be"),
        (lambda: greedy_select(torch.ones(3, 2), 1, objective="cube"), "unknown concave"),
        (lambda: greedy_select("abc", 1), "must be a torch.Tensor or numpy array, got str"),
        (lambda: soft_greedy_select(torch.ones(3, 2), 1, tau=0), "tau must be a finite number > 0"),
        (lambda: soft_greedy_select(torch.ones(3, 2), 1, tau=-1.0), "tau must be"),
        (lambda: soft_greedy_select(torch.ones(3, 2), 1, relaxation="gumbel"), "relaxation must be"),
        (lambda: greedy_select(torch.ones(2, 3, 2), 1, modular=torch.ones(2, 2)), "modular must have shape"),
    ],
)
def test_bad_input_raises_value_error_naming_it(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_zero_steps_and_empty_problem():
    assert greedy_select(torch.rand(4, 3), 0).indices.shape == (0,)
    assert soft_greedy_select(torch.rand(2, 4, 3), 0).distributions.shape == (2, 0, 4)
    out = greedy_select(torch.rand(2, 0, 3), 2)
    assert out.indices.tolist() == [[-1, -1], [-1, -1]]


def test_compiled_gains_equal_eager_greedy():
    """compile=True (torch.compile'd gain kernel) picks what the eager path picks."""
    gen = torch.Generator().manual_seed(7)
    B, N, E, k = 6, 11, 5, 8
    H = torch.rand(B, N, E, generator=gen, dtype=torch.float64)
    mask = torch.rand(B, N, generator=gen) > 0.2
    initial = torch.zeros(B, N, dtype=torch.bool)
    initial[:, 0] = True
    bonus = torch.rand(B, N, generator=gen, dtype=torch.float64) * 0.1
    weighted = SCMM("log1p", weights=torch.rand(E, generator=gen, dtype=torch.float64), scale=2.0)
    cases = [("sqrt", {}), (weighted, {"mask": mask, "initial": initial, "modular": bonus})]
    for objective, kwargs in cases:
        eager = greedy_select(H, k, objective, **kwargs)
        fused = greedy_select(H, k, objective, compile=True, **kwargs)
        assert torch.equal(fused.indices, eager.indices)
        assert torch.equal(fused.valid, eager.valid)
        torch.testing.assert_close(fused.gains, eager.gains, rtol=1e-12, atol=1e-12)
    # a second shape reuses the kernel (dynamic shapes) and stays equal; unbatched too
    H2 = torch.rand(23, 3, generator=gen, dtype=torch.float64)
    assert torch.equal(greedy_select(H2, 5, compile=True).indices, greedy_select(H2, 5).indices)
    # exact ties (duplicated integer rows) go to the lowest index, and rows that run out
    # of candidates mid-run get -1 while the others go on
    H3 = torch.randint(0, 3, (4, 6, 2), generator=gen).double().repeat(1, 2, 1)  # rows v and v + 6 equal
    mask3 = torch.ones(4, 12, dtype=torch.bool)
    mask3[0, 3:] = False
    mask3[2] = False
    eager = greedy_select(H3, 14, mask=mask3)
    fused = greedy_select(H3, 14, mask=mask3, compile=True)
    assert torch.equal(fused.indices, eager.indices)
    assert torch.equal(fused.valid, eager.valid)
    # The fused kernel may sum in another order than eager (it does on some CPUs): the
    # picks and ties must agree exactly, the gains to the last few ulps.
    torch.testing.assert_close(fused.gains, eager.gains, rtol=1e-12, atol=1e-12)
    assert fused.indices[0, 3:].eq(-1).all() and fused.indices[2].eq(-1).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "lazy"}, "compile=True needs method='naive'"),
        ({"objective": "facility"}, "compile=True supports SCMM objectives, got FacilityLocation"),
    ],
)
def test_compile_rejects_what_it_cannot_do(kwargs, match):
    with pytest.raises(ValueError, match=match):
        greedy_select(torch.rand(4, 3), 2, compile=True, **kwargs)


def test_compile_rejects_gradients():
    H = torch.rand(4, 3, requires_grad=True)
    with pytest.raises(ValueError, match="without gradients"):
        greedy_select(H, 2, compile=True)


@pytest.fixture
def screen_everything(monkeypatch):
    """Screen float64 compile=True runs of any size (the default is problems of 2^21 entries
    and up), so small problems exercise the screened path."""
    import dgn.greedy

    monkeypatch.setattr(dgn.greedy, "_SCREEN_MIN_ENTRIES", 1)
    return dgn.greedy


def _assert_same_selection(got, want):
    assert torch.equal(got.indices, want.indices)
    assert torch.equal(got.valid, want.valid)
    torch.testing.assert_close(got.gains, want.gains, rtol=1e-12, atol=1e-12)


def test_screened_float64_equals_naive(screen_everything, monkeypatch):
    """float64 compile=True screens each step in float32 and evaluates a short list in
    float64: the picks are eager float64 naive greedy's, over concave functions, weights,
    masks, initial sets, modular terms and batches (padded short lists)."""
    gen = torch.Generator().manual_seed(11)
    widths: list[int] = []
    original = SCMM.candidate_gains

    def recording(self, features, state, index):
        widths.append(index.shape[1])
        return original(self, features, state, index)

    monkeypatch.setattr(SCMM, "candidate_gains", recording)
    B, N, E, k = 3, 300, 40, 25
    for trial, concave in enumerate(["sqrt", "log1p", "exp", "pow", "saturate"]):
        H = torch.rand(B, N, E, generator=gen, dtype=torch.float64) * (10.0 ** (trial - 2))
        H[:, :, : E // 4] *= torch.rand(B, N, 1, generator=gen, dtype=torch.float64) < 0.1  # sparse columns
        weights = torch.rand(E, generator=gen, dtype=torch.float64) if trial % 2 else None
        params = {"p": 0.3} if concave == "pow" else {}
        objective = SCMM(concave, weights=weights, **params)
        mask = torch.rand(B, N, generator=gen) > 0.1
        mask[1, 20:] = False  # a row that runs out of candidates before k
        initial = torch.zeros(B, N, dtype=torch.bool)
        initial[:, 3] = True
        bonus = torch.rand(B, N, generator=gen, dtype=torch.float64) * float(H.mean()) if trial >= 2 else None
        kwargs = {"mask": mask, "initial": initial, "modular": bonus}
        want = greedy_select(H, k, objective, **kwargs)
        _assert_same_selection(greedy_select(H, k, objective, compile=True, **kwargs), want)
        assert not want.valid[1, 19:].any()  # at most 19 candidates available
    # unbatched too
    H = torch.rand(500, 30, generator=gen, dtype=torch.float64)
    _assert_same_selection(greedy_select(H, 40, compile=True), greedy_select(H, 40))
    # the screen did its job: short lists, not every candidate
    assert widths and max(widths) < N // 4


def test_screened_ties_go_to_the_lowest_index(screen_everything):
    gen = torch.Generator().manual_seed(12)
    H = torch.randint(0, 4, (2, 40, 6), generator=gen).double().repeat(1, 3, 1)  # rows v, v + 40, v + 80 equal
    want = greedy_select(H, 60)
    _assert_same_selection(greedy_select(H, 60, compile=True), want)
    assert want.indices.max() < 120


def test_screened_falls_back_to_float64(screen_everything, monkeypatch):
    """Steps the float32 screen cannot decide are evaluated in full in float64: values that
    overflow float32, values below its subnormal range, and (forced) wide short lists."""
    gen = torch.Generator().manual_seed(13)
    huge = torch.rand(2, 50, 8, generator=gen, dtype=torch.float64) * 1e300
    _assert_same_selection(greedy_select(huge, 10, compile=True), greedy_select(huge, 10))
    tiny = torch.rand(2, 50, 8, generator=gen, dtype=torch.float64) * 1e-300
    for objective in ("sqrt", SCMM("pow", p=0.1)):
        _assert_same_selection(greedy_select(tiny, 10, objective, compile=True), greedy_select(tiny, 10, objective))
    monkeypatch.setattr(screen_everything, "_SCREEN_MAX_SHARE", 0.0)
    H = torch.rand(2, 60, 8, generator=gen, dtype=torch.float64)
    _assert_same_selection(greedy_select(H, 70, compile=True), greedy_select(H, 70))


def test_screened_is_used_only_for_large_float64_problems(monkeypatch):
    import dgn.greedy

    calls: list[int] = []
    original = dgn.greedy._naive_screened

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(dgn.greedy, "_naive_screened", counting)
    monkeypatch.setattr(dgn.greedy, "_SCREEN_MIN_ENTRIES", 1000)
    greedy_select(torch.rand(1, 40, 30, dtype=torch.float64), 3, compile=True)  # 1,200 entries
    greedy_select(torch.rand(1, 40, 30), 3, compile=True)  # float32: the plain compiled step
    greedy_select(torch.rand(1, 40, 30, dtype=torch.float64), 3, compile=True, return_step_gains=True)
    greedy_select(torch.rand(1, 20, 30, dtype=torch.float64), 3, compile=True)  # 600 entries
    assert len(calls) == 1


def test_screened_resolves_gains_float32_cannot_tell_apart(screen_everything):
    """Candidates whose gains differ by far less than float32's resolution: float32 ranks
    them by rounding noise, so the screen's bound has to keep all of them for float64 to
    pick naive greedy's."""
    gen = torch.Generator().manual_seed(14)
    base = torch.rand(1, 1, 16, generator=gen, dtype=torch.float64) + 0.5
    H = base + 1e-7 * torch.rand(2, 200, 16, generator=gen, dtype=torch.float64)
    want = greedy_select(H, 6)
    got32 = greedy_select(H.float(), 6)
    assert not torch.equal(got32.indices, want.indices)  # float32 alone gets them wrong
    _assert_same_selection(greedy_select(H, 6, compile=True), want)


@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
def test_compiled_relaxed_layers_equal_eager_in_values_and_gradients(relaxation):
    """soft_greedy_select(compile=True) runs the K layers as one torch.compile'd graph: the
    same distributions, logits, picks and gains as the eager layers, and the same gradients
    into the features, the modular term and a learnable objective's weights; rows that run
    out of candidates (mask) and a tiny temperature's out-of-range logits included."""
    torch.manual_seed(3)
    B, N, E, K = 3, 6, 5, 4
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 2:] = False  # two candidates for four layers
    results = []
    for compiled in (False, True):
        torch.manual_seed(4)
        objective = SCMM("sqrt", learnable=True, num_features=E, init_weight=0.5)
        H = torch.rand(B, N, E, dtype=torch.float64).requires_grad_(True)
        beta = torch.rand(B, N, dtype=torch.float64).requires_grad_(True)
        objective = objective.double()
        outs = [soft_greedy_select(H, K, objective, tau=tau, mask=mask, relaxation=relaxation, modular=beta,
                                   compile=compiled) for tau in (2.0, 1e-310)]
        loss = sum((o.distributions * torch.arange(N, dtype=H.dtype)).sum() + o.gains.sum() for o in outs)
        loss.backward()
        results.append((outs, H.grad, beta.grad, objective.raw_weights.grad))
    (eager, *eager_grads), (fused, *fused_grads) = results
    for a, b in zip(eager, fused, strict=True):
        assert torch.equal(a.indices, b.indices) and torch.equal(a.valid, b.valid)
        for field in ("distributions", "logits", "gains", "step_gains"):
            x, y = getattr(a, field), getattr(b, field)
            assert torch.equal(torch.isfinite(x), torch.isfinite(y)), field
            torch.testing.assert_close(x[torch.isfinite(x)], y[torch.isfinite(y)], rtol=1e-9, atol=1e-12)
    assert torch.equal(eager[1].logits[:, 0].amax(1), torch.zeros(B, dtype=H.dtype))  # g / tau overflowed: (g - max g) / tau
    for x, y in zip(eager_grads, fused_grads, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-12)


def test_compiled_relaxed_layers_need_an_scmm():
    with pytest.raises(ValueError, match="compile=True supports SCMM objectives, got FacilityLocation"):
        soft_greedy_select(torch.rand(4, 3), 2, FacilityLocation(), compile=True)


@pytest.mark.parametrize("nonnegative", [False, True])
def test_feature_check_finds_nan_and_inf_but_not_a_sum_that_overflows(nonnegative):
    """as_features (every entry point's check): NaN, inf or -inf anywhere is an error, finite
    values whose sum overflows float32 (the quick check without a sign to test is a sum)
    are not; negative entries are an error only with ``nonnegative``."""
    from dgn._validation import as_features

    big = torch.full((2, 50, 3), 3e38)
    assert torch.equal(as_features(big, nonnegative=nonnegative)[0], big)
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = big.clone() if bad != float("nan") else torch.rand(2, 5, 3)
        x[1, 2, 0] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            as_features(x, nonnegative=nonnegative)
    negative = -torch.rand(2, 5, 3)
    if nonnegative:
        with pytest.raises(ValueError, match="nonnegative"):
            as_features(negative, nonnegative=True)
    else:
        assert torch.equal(as_features(negative)[0], negative)
