"""SCMM and facility location: values, gains, monotonicity, submodularity, gradients."""

from __future__ import annotations

import itertools

import pytest
import torch

from dgn import SCMM, FacilityLocation, concave
from dgn.objectives import CONCAVE_FUNCTIONS

ATOL = 1e-10
CONCAVES = [("sqrt", {}), ("log1p", {"scale": 2.0}), ("exp", {"scale": 0.5}),
            ("saturate", {"cap": 1.5}), ("pow", {"p": 0.3})]


def _objectives():
    objs = [SCMM(name, **params) for name, params in CONCAVES]
    objs.append(SCMM("sqrt", weights=torch.rand(4, dtype=torch.float64) * 2))
    objs.append(FacilityLocation())
    objs.append(FacilityLocation("cosine"))
    return objs


def _random_subset(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=gen) < 0.4


@pytest.mark.parametrize("obj", _objectives(), ids=lambda o: repr(o))
def test_monotone_and_diminishing_returns(obj):
    gen = torch.Generator().manual_seed(1)
    N, E = 7, 4
    for _ in range(30):
        H = torch.rand(1, N, E, dtype=torch.float64, generator=gen) * 3
        A = _random_subset(N, gen)
        B = A | _random_subset(N, gen)  # A is a subset of B
        fA = obj.value(H, A.unsqueeze(0))
        fB = obj.value(H, B.unsqueeze(0))
        assert fB >= fA - ATOL, "monotone: f(B) >= f(A) for A within B"
        for v in range(N):
            if B[v]:
                continue
            Av, Bv = A.clone(), B.clone()
            Av[v] = True
            Bv[v] = True
            gain_A = obj.value(H, Av.unsqueeze(0)) - fA
            gain_B = obj.value(H, Bv.unsqueeze(0)) - fB
            assert gain_A >= gain_B - ATOL, "diminishing returns"


@pytest.mark.parametrize("obj", _objectives(), ids=lambda o: repr(o))
def test_gains_match_value_differences(obj):
    gen = torch.Generator().manual_seed(2)
    H = torch.rand(3, 6, 4, dtype=torch.float64, generator=gen)
    selected = torch.rand(3, 6, generator=gen) < 0.5
    state = obj.update(H, obj.init_state(H), selected.double())
    gains = obj.gains(H, state)
    base = obj.value(H, selected)
    for v in range(6):
        with_v = selected.clone()
        with_v[:, v] = True
        expected = obj.value(H, with_v) - base
        fresh = ~selected[:, v]  # gains are defined for items not yet in the set
        torch.testing.assert_close(gains[fresh, v], expected[fresh], atol=ATOL, rtol=0)


def test_scmm_value_hand_computed():
    H = torch.tensor([[[4.0, 0.0], [0.0, 1.0], [5.0, 3.0]]], dtype=torch.float64)
    f = SCMM("sqrt", weights=torch.tensor([1.0, 2.0]))
    # {0, 2}: coverage (9, 3) -> 1*3 + 2*sqrt(3)
    expected = 3.0 + 2.0 * 3.0**0.5
    assert float(f.value(H, torch.tensor([[True, False, True]]))) == pytest.approx(expected)
    # modular bonus adds beta_v for the selected items
    beta = torch.tensor([[0.5, 7.0, 0.25]], dtype=torch.float64)
    assert float(f.value(H, torch.tensor([[True, False, True]]), modular=beta)) == pytest.approx(expected + 0.75)


def test_facility_location_hand_computed():
    H = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]], dtype=torch.float64)
    # S = H H^T = [[1,0,1],[0,4,2],[1,2,2]]; {2}: max over column 2 = 1 + 2 + 2
    f = FacilityLocation()
    assert float(f.value(H, torch.tensor([[False, False, True]]))) == pytest.approx(5.0)
    # {1, 2}: per row max(S[i,1], S[i,2]) = 1 + 4 + 2
    assert float(f.value(H, torch.tensor([[False, True, True]]))) == pytest.approx(7.0)
    # a masked ground item counts nothing
    mask = torch.tensor([[True, False, True]])
    assert float(f.value(H, torch.tensor([[False, True, True]]), mask=mask)) == pytest.approx(3.0)


@pytest.mark.parametrize("name,params", CONCAVES)
def test_concave_functions_are_concave_nondecreasing_zero_at_zero(name, params):
    x = torch.linspace(0, 10, 201, dtype=torch.float64)
    y = concave(name, x, **params)
    assert float(y[0]) == 0.0
    assert bool((y[1:] - y[:-1] >= -ATOL).all())
    second = y[2:] - 2 * y[1:-1] + y[:-2]
    assert bool((second <= ATOL).all())


def test_concave_registry_names():
    assert set(CONCAVE_FUNCTIONS) == {"sqrt", "log1p", "exp", "saturate", "pow"}


def test_learnable_weights_start_at_one_and_stay_nonnegative():
    f = SCMM("sqrt", learnable=True, num_features=5)
    H = torch.rand(1, 3, 5)
    torch.testing.assert_close(f.weights(H), torch.ones(5))
    g = SCMM("sqrt", learnable=True, num_features=5, init_weight=0.01)
    torch.testing.assert_close(g.weights(H), torch.full((5,), 0.01))
    with pytest.raises(ValueError, match="init_weight must be a positive number"):
        SCMM("sqrt", learnable=True, num_features=5, init_weight=0.0)
    with torch.no_grad():
        f.raw_weights.fill_(-50.0)
    assert bool((f.weights(H) >= 0).all())


@pytest.mark.parametrize("name,params", CONCAVES)
def test_gradcheck_gains(name, params):
    gen = torch.Generator().manual_seed(3)
    # keep away from the kinks of saturate and the floor of sqrt/pow
    H = (torch.rand(2, 4, 3, dtype=torch.float64, generator=gen) * 0.5 + 0.1).requires_grad_()
    cov = (torch.rand(2, 3, dtype=torch.float64, generator=gen) * 0.5 + 0.1).requires_grad_()
    alpha = (torch.rand(3, dtype=torch.float64, generator=gen) + 0.5).requires_grad_()

    def fn(H, cov, alpha):
        f = SCMM(name, **params)
        f.fixed_weights = alpha
        return f.gains(H, cov)

    assert torch.autograd.gradcheck(fn, (H, cov, alpha))


def test_sqrt_gradient_is_finite_at_zero():
    H = torch.zeros(1, 3, 2, requires_grad=True)
    SCMM("sqrt").gains(H, torch.zeros(1, 2)).sum().backward()
    assert bool(torch.isfinite(H.grad).all())


def test_sqrt_floored_gradient_by_hand():
    # d sqrt(x) / dx = 1 / (2 sqrt(max(x, 1e-3))): exact above the floor, capped below it
    x = torch.tensor([0.0, 1e-6, 1e-3, 0.25, 4.0], dtype=torch.float64, requires_grad=True)
    y = concave("sqrt", x)
    y.backward(torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0], dtype=torch.float64))
    floor = 1 / (2 * 1e-3 ** 0.5)
    expected = torch.tensor([floor, 2 * floor, floor, 1.0, 3 * 0.25], dtype=torch.float64)
    torch.testing.assert_close(x.grad, expected)
    torch.testing.assert_close(y.detach(), x.detach().sqrt(), rtol=0, atol=0)
    # and through a second-order graph (create_graph keeps the backward differentiable)
    z = torch.tensor([0.25, 4.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(concave("sqrt", z).sum(), z, create_graph=True)
    g.sum().backward()
    torch.testing.assert_close(z.grad, -0.25 * z.detach() ** -1.5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"concave": "cube"}, "unknown concave function 'cube'"),
        ({"concave": "sqrt", "cap": 2.0}, "unknown parameter"),
        ({"concave": "pow", "p": 2.0}, "p of 'pow' must be in"),
        ({"concave": "saturate", "cap": -1.0}, "must be > 0"),
        ({"concave": "sqrt", "weights": [-1.0, 1.0]}, "nonnegative"),
        ({"concave": "sqrt", "learnable": True}, "num_features"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SCMM(**kwargs)


def test_value_rejects_negative_features_and_bad_selected():
    with pytest.raises(ValueError, match="nonnegative"):
        SCMM().value(-torch.ones(2, 3), torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"selected must have shape \(1, 2\)"):
        SCMM().value(torch.ones(2, 3), torch.ones(3, dtype=torch.bool))


def test_brute_force_value_enumeration_consistent():
    # value of every subset equals the sum of phi over coverage computed by hand
    H = torch.rand(1, 4, 3, dtype=torch.float64)
    f = SCMM("log1p")
    for r in range(5):
        for subset in itertools.combinations(range(4), r):
            sel = torch.zeros(1, 4, dtype=torch.bool)
            sel[0, list(subset)] = True
            cov = H[0, list(subset)].sum(0) if subset else torch.zeros(3, dtype=torch.float64)
            assert float(f.value(H, sel)) == pytest.approx(float(torch.log1p(cov).sum()))
