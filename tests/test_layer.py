"""GreedyLayer: the greedy layer as a torch module (relaxed in train(), exact in eval())."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch
from torch import nn

import dgn
from dgn import (
    DGN,
    SCMM,
    DGNConfig,
    GreedyLayer,
    SoftSelection,
    greedy_select,
    layerwise_cross_entropy,
    soft_greedy_select,
)

TINY_TAU = 1e-7
SMALL = dict(in_features=6, hidden_features=8, encoded_features=5, steps=3)


def _features(B=3, N=7, E=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, N, E, generator=g, dtype=torch.float64)


def _learnable(E=4, seed=0):
    objective = SCMM("sqrt", learnable=True, num_features=E).double()
    with torch.no_grad():
        objective.raw_weights.copy_(torch.randn(E, generator=torch.Generator().manual_seed(seed)))
    return objective


def _assert_same(a: SoftSelection, b: SoftSelection) -> None:
    for f in fields(SoftSelection):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.shape == y.shape and x.dtype == y.dtype, f.name
        assert torch.equal(x, y), f.name


@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
def test_train_mode_is_soft_greedy_select_exactly(relaxation):
    H = _features()
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    modular = torch.rand(3, 7, dtype=torch.float64)
    objective = _learnable()
    layer = GreedyLayer(objective, k=4, tau=2.5, relaxation=relaxation).train()
    out = layer(H, mask, modular)
    assert isinstance(out, SoftSelection)
    _assert_same(out, soft_greedy_select(H, 4, objective, 2.5, mask, relaxation, modular=modular))
    # per-call overrides of the number of steps and the temperature
    _assert_same(layer(H, mask, steps=2, tau=0.5), soft_greedy_select(H, 2, objective, 0.5, mask, relaxation))


def test_eval_mode_is_hard_greedy_with_the_same_fields():
    H = _features(B=4, N=6)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 2:] = False  # 2 real candidates, 5 steps: the last steps have nothing left
    modular = torch.rand(4, 6, dtype=torch.float64)
    objective = _learnable()
    layer = GreedyLayer(objective, k=5, tau=3.0).eval()
    out = layer(H, mask, modular)
    ref = greedy_select(H, 5, objective, mask, modular=modular, return_step_gains=True)
    assert isinstance(out, SoftSelection)
    assert torch.equal(out.indices, ref.indices) and torch.equal(out.valid, ref.valid)
    torch.testing.assert_close(out.gains, ref.gains, rtol=0, atol=0)
    assert torch.equal(out.logits, ref.step_gains / 3.0)
    expected = torch.softmax(ref.step_gains / 3.0, -1).nan_to_num(0.0)  # all -inf rows: zeros
    torch.testing.assert_close(out.distributions, expected)
    assert out.distributions.shape == (4, 5, 6) and out.logits.shape == (4, 5, 6)
    assert out.distributions[2, :, 2:].eq(0).all() and out.distributions[2, 2:].eq(0).all()
    assert torch.equal(out.valid[2], torch.tensor([True, True, False, False, False]))
    picked = out.distributions.gather(-1, out.indices.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    assert bool((picked[out.valid] > 0).all())


@pytest.mark.parametrize("dtype,tau", [(torch.float64, 1e-310), (torch.float32, 1e-40)])
def test_eval_distributions_stay_finite_at_tiny_tau(dtype, tau):
    H = _features().to(dtype)  # gains / tau overflow to inf at this tau
    out = GreedyLayer("sqrt", k=3, tau=tau).eval()(H)
    assert bool(torch.isfinite(out.distributions).all())
    onehot = torch.nn.functional.one_hot(out.indices, 7).to(dtype)
    assert torch.equal(out.distributions, onehot)


@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
def test_train_mode_at_tiny_tau_picks_what_eval_picks(relaxation):
    H = _features(B=6, N=9, E=5, seed=3)
    layer = GreedyLayer(_learnable(E=5), k=4, tau=TINY_TAU, relaxation=relaxation)
    train_out, eval_out = layer.train()(H), layer.eval()(H)
    assert torch.equal(train_out.indices, eval_out.indices)
    torch.testing.assert_close(train_out.gains, eval_out.gains)


def test_unbatched_input_gives_unbatched_fields():
    H = _features()[0]
    layer = GreedyLayer("sqrt", k=2)
    for mode in (True, False):
        out = layer.train(mode)(H)
        assert out.indices.shape == (2,) and out.logits.shape == (2, 7)


def test_gradcheck_features_and_objective_weights():
    layer = GreedyLayer(_learnable(E=3), k=2, tau=0.7, relaxation="soft").train()
    H = (_features(B=2, N=4, E=3) + 0.1).requires_grad_()
    rho = layer.objective.raw_weights.detach().clone().requires_grad_()
    modular = torch.rand(2, 4, dtype=torch.float64, requires_grad=True)
    gold = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1]]).bool()

    def fn(H, rho, modular):
        out = torch.func.functional_call(layer, {"objective.raw_weights": rho}, (H,), {"modular": modular})
        return out.distributions, layerwise_cross_entropy(out.logits, gold, reduction="none")

    assert torch.autograd.gradcheck(fn, (H, rho, modular))


def test_gradients_reach_the_objective_weights_and_features():
    objective = _learnable()
    layer = GreedyLayer(objective, k=3, tau=1.0).train()
    H = _features().requires_grad_()
    gold = torch.zeros(3, 7, dtype=torch.bool)
    gold[:, 1] = True
    layerwise_cross_entropy(layer(H).logits, gold).backward()
    assert objective.raw_weights.grad is not None and bool(objective.raw_weights.grad.abs().sum() > 0)
    assert H.grad is not None and bool(H.grad.abs().sum() > 0)
    assert [n for n, _ in layer.named_parameters()] == ["objective.raw_weights"]


@pytest.mark.parametrize("training", [True, False])
def test_padded_with_mask_equals_unpadded(training):
    objective = _learnable()
    layer = GreedyLayer(objective, k=4, tau=1.5).train(training)
    sizes = [7, 4, 5]
    problems = [_features(B=1, N=n, seed=i)[0] for i, n in enumerate(sizes)]
    padded = torch.rand(3, 7, 4, dtype=torch.float64) * 10  # junk in the padding
    mask = torch.zeros(3, 7, dtype=torch.bool)
    for b, (H, n) in enumerate(zip(problems, sizes, strict=True)):
        padded[b, :n], mask[b, :n] = H, True
    out = layer(padded, mask)
    for b, (H, n) in enumerate(zip(problems, sizes, strict=True)):
        alone = layer(H)
        assert torch.equal(out.indices[b], alone.indices)
        torch.testing.assert_close(out.gains[b], alone.gains)
        torch.testing.assert_close(out.distributions[b, :, :n], alone.distributions)
        assert out.distributions[b, :, n:].eq(0).all(), "padding gets exactly 0"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"k": 0}, r"k must be a positive integer, got 0"),
        ({"k": 2.5}, r"k must be a positive integer, got 2.5 \(float\)"),
        ({"k": True}, r"k must be a positive integer, got True"),
        ({"tau": 0.0}, r"tau must be a finite number > 0, got 0.0"),
        ({"tau": float("nan")}, r"tau must be a finite number > 0, got nan"),
        ({"tau": float("inf")}, r"tau must be a finite number > 0, got inf"),
        ({"tau": "4"}, r"tau must be a finite number > 0, got '4'"),
        ({"relaxation": "gumbel"}, r"relaxation must be one of .*got 'gumbel'"),
        ({"objective": 3}, r"objective must be an Objective or a name"),
        ({"objective": "cube"}, r"unknown concave function 'cube'"),
    ],
)
def test_construction_validates_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GreedyLayer(**kwargs)


def test_forward_validates_overrides():
    layer = GreedyLayer("sqrt", k=2)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        layer(_features(), tau=0.0)
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        layer(_features(), steps=-1)


def test_a_string_builds_a_fixed_scmm_and_the_layer_is_exported():
    layer = GreedyLayer("log1p", k=3)
    assert isinstance(layer.objective, SCMM) and not list(layer.parameters())
    assert "GreedyLayer" in dgn.__all__ and dgn.GreedyLayer is GreedyLayer


class _UserModel(nn.Module):
    """A user's own encoder with the greedy layer on top."""

    def __init__(self, F: int, E: int, k: int) -> None:
        super().__init__()
        self.encoder = nn.Linear(F, E)
        self.greedy = GreedyLayer(SCMM("sqrt", learnable=True, num_features=E), k=k, tau=1.0)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> SoftSelection:
        return self.greedy(torch.relu(self.encoder(x)), mask)  # (B, N, E) >= 0


def test_user_model_trains_with_the_layer():
    torch.manual_seed(0)
    B, N, F = 8, 10, 6
    x = torch.randn(B, N, F)
    gold = x[..., 0] > 0.8  # relevance readable from one input feature
    model = _UserModel(F, E=8, k=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        loss = layerwise_cross_entropy(model.train()(x).logits, gold)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    assert model.greedy.objective.raw_weights.grad is not None
    assert model.eval()(x).indices.shape == (B, 3)


# DGN state_dict keys before GreedyLayer existed: old checkpoints must keep loading.
EXPECTED_KEYS = {
    "default": ["encoder.net.0.weight", "encoder.net.0.bias", "encoder.net.3.weight", "encoder.net.3.bias",
                "objective.raw_weights", "modular.weight", "modular.bias"],
    "skip": ["encoder.net.0.weight", "encoder.net.0.bias", "encoder.net.3.weight", "encoder.net.3.bias",
             "objective.raw_weights", "modular.weight", "modular.bias", "modular_skip.weight"],
    "pure": ["encoder.net.0.weight", "encoder.net.0.bias", "encoder.net.3.weight", "encoder.net.3.bias"],
    "deep": ["encoder.net.0.weight", "encoder.net.0.bias", "encoder.net.3.weight", "encoder.net.3.bias",
             "encoder.net.6.weight", "encoder.net.6.bias", "objective.raw_weights", "modular.weight",
             "modular.bias"],
}
CONFIGS = {
    "default": {},
    "skip": {"modular_skip": True},
    "pure": {"learn_weights": False, "modular": False},
    "deep": {"deep": True},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dgn_state_dict_keys_are_unchanged(name):
    model = DGN(DGNConfig(**SMALL, **CONFIGS[name]))
    assert list(model.state_dict().keys()) == EXPECTED_KEYS[name]
    assert isinstance(model.greedy, GreedyLayer) and model.greedy.objective is model.objective
    # an old checkpoint (those keys only) loads strictly into the shared objective
    other = DGN(DGNConfig(**SMALL, **CONFIGS[name]))
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    other.load_state_dict(state, strict=True)
    for key, value in state.items():
        assert torch.equal(other.state_dict()[key], value)
    if "objective.raw_weights" in state:
        assert torch.equal(other.greedy.objective.raw_weights, state["objective.raw_weights"])


def test_dgn_inside_another_module_keeps_its_keys():
    parent = nn.ModuleDict({"dgn": DGN(DGNConfig(**SMALL))})
    keys = list(parent.state_dict().keys())
    assert keys == ["dgn." + k for k in EXPECTED_KEYS["default"]]
    state = {k: torch.randn_like(v) for k, v in parent.state_dict().items()}
    parent.load_state_dict(state, strict=True)
    assert torch.equal(parent["dgn"].greedy.objective.raw_weights, state["dgn.objective.raw_weights"])


def test_dgn_uses_the_config_tau_at_call_time():
    """Training anneals tau by replacing the config (dgn.train._set_tau)."""
    model = DGN(DGNConfig(**SMALL)).double().train()
    X = torch.randn(2, 5, 6, dtype=torch.float64)
    model.config = replace(model.config, tau=0.25)
    out = model(X)
    H = model.encode(X)
    ref = soft_greedy_select(H, 3, model.objective, 0.25, modular=model.modular_scores(H, X))
    torch.testing.assert_close(out.logits, ref.logits)
    torch.testing.assert_close(out.distributions, ref.distributions)
    eval_out = model.eval()(X)
    sel = greedy_select(H.detach(), 3, model.objective, modular=model.modular_scores(H, X).detach(),
                        return_step_gains=True)
    torch.testing.assert_close(eval_out.logits, sel.step_gains / 0.25)
