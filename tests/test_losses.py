"""Layer-wise and soft-label cross entropy: hand cases, masking, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from dgn import (
    LayerwiseCrossEntropy,
    SoftLabelCrossEntropy,
    layerwise_cross_entropy,
    soft_greedy_select,
    soft_label_cross_entropy,
)

TOL = 1e-9


def _layers(*rows):
    return torch.log(torch.tensor([rows], dtype=torch.float64))


def test_layerwise_hand_computed():
    # layer 1: s = (.5, .25, .25), gold {0, 1}, nothing picked yet -> -log .5 - log .25
    # layer 1 picks 0 (argmax); layer 2: s = (0, .5, .5), open gold {1} -> -log .5
    logits = _layers([0.5, 0.25, 0.25], [0.0, 0.5, 0.5])
    gold = torch.tensor([[True, True, False]])
    expected = -(math.log(0.5) + math.log(0.25)) - math.log(0.5)
    assert float(layerwise_cross_entropy(logits, gold)) == pytest.approx(expected, abs=TOL)


def test_layers_after_all_gold_is_picked_add_nothing():
    logits = _layers([0.9, 0.05, 0.05], [0.0, 0.2, 0.8], [0.0, 1.0, 0.0])
    gold = torch.tensor([[True, False, False]])
    assert float(layerwise_cross_entropy(logits, gold)) == pytest.approx(-math.log(0.9), abs=TOL)


def test_explicit_indices_override_argmax():
    logits = _layers([0.5, 0.25, 0.25], [0.2, 0.4, 0.4])
    gold = torch.tensor([[True, True, False]])
    # if layer 1 picked item 2 (not its argmax), gold {0, 1} stays open in layer 2
    loss = layerwise_cross_entropy(logits, gold, indices=torch.tensor([[2, 1]]))
    expected = -(math.log(0.5) + math.log(0.25)) - (math.log(0.2) + math.log(0.4))
    assert float(loss) == pytest.approx(expected, abs=TOL)
    probs = layerwise_cross_entropy(logits.exp(), gold, indices=torch.tensor([[2, 1]]), from_logits=False)
    assert float(probs) == pytest.approx(expected, abs=TOL)


def test_soft_label_hand_computed():
    logits = _layers([0.5, 0.25, 0.25], [0.0, 0.5, 0.5])
    relevance = torch.tensor([[3.0, 1.0, 0.0]])
    # layer 1: p = (.75, .25, 0); layer 2 (0 picked): p = (0, 1, 0)
    expected = -(0.75 * math.log(0.5) + 0.25 * math.log(0.25)) - math.log(0.5)
    assert float(soft_label_cross_entropy(logits, relevance)) == pytest.approx(expected, abs=TOL)


def test_soft_label_with_single_gold_equals_layerwise():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 6, dtype=torch.float64, generator=gen)
    gold = torch.zeros(4, 6, dtype=torch.bool)
    gold[torch.arange(4), torch.tensor([1, 3, 0, 5])] = True
    torch.testing.assert_close(
        soft_label_cross_entropy(logits, gold.double(), reduction="none"),
        layerwise_cross_entropy(logits, gold, reduction="none"),
    )


def test_reductions_and_modules():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 3, 4, dtype=torch.float64, generator=gen)
    gold = torch.rand(5, 4, generator=gen) < 0.5
    per = layerwise_cross_entropy(logits, gold, reduction="none")
    assert per.shape == (5,)
    torch.testing.assert_close(layerwise_cross_entropy(logits, gold, reduction="sum"), per.sum())
    torch.testing.assert_close(LayerwiseCrossEntropy()(logits, gold), per.mean())
    rel = gold.double() * 2
    torch.testing.assert_close(
        SoftLabelCrossEntropy(reduction="sum")(logits, rel),
        soft_label_cross_entropy(logits, rel, reduction="sum"),
    )
    with pytest.raises(ValueError, match="reduction must be"):
        layerwise_cross_entropy(logits, gold, reduction="avg")


def test_masked_candidates_and_no_gold():
    logits = torch.tensor([[[0.0, 1.0, float("-inf")], [float("-inf")] * 3]])
    gold = torch.tensor([[False, False, False]])
    assert float(layerwise_cross_entropy(logits, gold)) == 0.0
    gold = torch.tensor([[False, True, False]])
    loss = layerwise_cross_entropy(logits, gold)
    assert math.isfinite(float(loss))


@pytest.mark.parametrize("loss_fn", [layerwise_cross_entropy, soft_label_cross_entropy])
def test_gradcheck_loss_through_relaxed_layers(loss_fn):
    gen = torch.Generator().manual_seed(2)
    H = (torch.rand(2, 5, 3, dtype=torch.float64, generator=gen) + 0.1).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool()
    gold = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 1, 1, 0]]).bool()

    def fn(H):
        out = soft_greedy_select(H, 3, tau=0.8, mask=mask, relaxation="soft")
        target = gold if loss_fn is layerwise_cross_entropy else gold.double() * 1.5
        return loss_fn(out.logits, target, reduction="none")

    assert torch.autograd.gradcheck(fn, (H,))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"states must have shape \(B, K, N\)"):
        layerwise_cross_entropy(torch.zeros(3, 4), torch.zeros(3, 4).bool())
    with pytest.raises(ValueError, match=r"gold must have shape \(2, 4\)"):
        layerwise_cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 5).bool())
    with pytest.raises(ValueError, match="nonnegative"):
        soft_label_cross_entropy(torch.zeros(1, 2, 3), -torch.ones(1, 3))


def _layerwise_reference(logits, gold, indices=None):
    """The layer-wise loss one layer and one item at a time: each layer's log-softmax over
    its finite logits, summed at the gold items no earlier layer picked."""
    B, K, N = logits.shape
    total = []
    for b in range(B):
        picked, loss = set(), logits.new_zeros(())
        for k in range(K):
            row = logits[b, k]
            finite = torch.isfinite(row)
            if finite.any():
                logp = row[finite] - torch.logsumexp(row[finite], 0)
                for j, v in enumerate(torch.nonzero(finite).flatten().tolist()):
                    if gold[b, v] and v not in picked:
                        loss = loss - logp[j]
                pick = int(row.argmax()) if indices is None else int(indices[b, k])
            else:
                pick = -1 if indices is None else int(indices[b, k])
            if pick >= 0:
                picked.add(pick)
        total.append(loss)
    return torch.stack(total)


@pytest.mark.parametrize("given_indices", [False, True])
def test_layerwise_values_and_gradients_equal_an_item_by_item_reference(given_indices):
    """The loss and its gradient equal a loop over layers and items (autograd through
    logsumexp of the finite logits only): -inf logits, a layer with nothing left, several
    gold items, explicit picks that are not the argmax."""
    gen = torch.Generator().manual_seed(5)
    B, K, N = 4, 5, 6
    logits = torch.randn(B, K, N, dtype=torch.float64, generator=gen)
    logits[0, :, 4:] = float("-inf")  # padding
    logits[1, 3:] = float("-inf")  # nothing left in the last two layers
    logits[2, 1:, 0] = float("-inf")  # picked in layer 0
    gold = torch.rand(B, N, generator=gen) < 0.5
    gold[0, 4:] = False
    gold[1, :] = False
    gold[1, logits[1, :3].argmax(-1)] = True  # every gold item picked before nothing is left
    indices = torch.randint(0, N, (B, K), generator=gen) if given_indices else None
    if given_indices:
        indices[1, :3] = logits[1, :3].argmax(-1)  # the gold items, before nothing is left
        indices[1, 3:] = -1
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    got = layerwise_cross_entropy(a, gold, indices, reduction="none")
    want = _layerwise_reference(b, gold, indices)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.rand(B, dtype=torch.float64, generator=gen)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    assert torch.isfinite(a.grad).all()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernels", ["1", "0"])
def test_clip_gradients_equals_torch_clip_grad_norm(kernels, monkeypatch):
    """dgn.train.clip_gradients gives clip_grad_norm_'s gradients bit for bit, and its norm
    (bit for bit where it scales or torch measured it, to float rounding where the C pass
    found the gradients within the bound): above the bound (scaled), below it
    (untouched), within 0.2% of it on either side, at NaN and inf norms, float64
    gradients and non-contiguous ones, with the kernel and without."""
    from dgn import _kernels
    from dgn.train import clip_gradients

    if kernels == "0":  # as on a machine without the kernel
        monkeypatch.setattr(_kernels, "sum_squares", lambda tensors: None)
    gen = torch.Generator().manual_seed(0)
    cases = [(10.0, None, torch.float32), (0.01, None, torch.float32), (1.0, float("nan"), torch.float32),
             (1.0, float("inf"), torch.float32), (10.0, None, torch.float64), (0.01, None, torch.float64)]
    cases += [(5.0 * (1 + d), "at", torch.float32) for d in (-2e-3, -1.1e-3, -1e-3, -9e-4, -1e-6, 0.0, 1e-6, 1e-3)]
    measured_in_c = 0
    for i, (scale, special, dtype) in enumerate(cases):
        grads = [torch.randn(70, 61, generator=gen, dtype=dtype), torch.randn(3, generator=gen, dtype=dtype)]
        if special == "at":  # the torch norm within a hair of scale
            norm0 = float(torch.nn.utils.get_total_norm(grads))
            grads = [g * (scale / norm0) for g in grads]
        else:
            grads = [g * scale for g in grads]
            if special is not None:
                grads[1][0] = special
        if i == 1:
            grads[0] = grads[0].t()  # a transposed view: the C pass declines, torch measures
        ours = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads] + [torch.nn.Parameter(torch.zeros(2))]
        theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads] + [torch.nn.Parameter(torch.zeros(2))]
        for a, b, g in zip(ours, theirs, grads, strict=False):
            a.grad, b.grad = g.clone(), g.clone()
        norm = clip_gradients(ours, 5.0)
        want = torch.nn.utils.clip_grad_norm_(theirs, 5.0)
        if want.isnan():
            assert norm != norm
        elif norm != float(want):  # only the C pass's norm, where it left the gradients alone
            assert kernels == "1" and dtype == torch.float32 and i != 1 and float(want) + 1e-6 <= 5.0
            assert norm == pytest.approx(float(want), rel=1e-6)
            measured_in_c += 1
        for a, b in zip(ours, theirs, strict=True):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:  # the same bits, NaN where NaN
                torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0, equal_nan=True)
    assert (measured_in_c > 0) == (kernels == "1" and _kernels.available())
    assert clip_gradients([torch.nn.Parameter(torch.zeros(2))], 5.0) == 0.0
    lone = torch.nn.Parameter(torch.zeros(3, 4))
    lone.grad = torch.full((3, 4), 10.0)
    assert clip_gradients(lone, 5.0) == pytest.approx(10 * 12 ** 0.5, rel=1e-6)
    torch.testing.assert_close(lone.grad.norm(), torch.tensor(5.0), rtol=1e-5, atol=0)


def test_clip_gradients_where_torch_float32_norm_is_far_off_or_overflows():
    """Where PyTorch's float32 norm is 1.2% above the exact one (2e7 entries near 1000) and
    the bound lies between them, and where squares that fit a double overflow float32,
    clip_gradients hands over to PyTorch: the same gradients and norm as clip_grad_norm_."""
    from dgn.train import clip_gradients

    gen = torch.Generator().manual_seed(8)
    big = torch.rand(20_000_000, generator=gen) + 1000
    exact = float((big.double() ** 2).sum().sqrt())
    assert float(torch.nn.utils.get_total_norm([big])) > exact * 1.005  # torch's own rounding
    for grads, bound in (([big], exact * 1.005), ([torch.tensor([1.5e19]), torch.tensor([1.5e19])], 1e20)):
        ours = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for a, b, g in zip(ours, theirs, grads, strict=True):
            a.grad, b.grad = g.clone(), g.clone()
        norm = clip_gradients(ours, bound)
        want = torch.nn.utils.clip_grad_norm_(theirs, bound)
        assert norm == float(want)
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0, equal_nan=True)


def test_clip_gradients_on_a_torch_without_get_total_norm(monkeypatch):
    """Where torch lacks get_total_norm (before 2.6) clip_gradients runs clip_grad_norm_."""
    from dgn.train import clip_gradients

    monkeypatch.delattr(torch.nn.utils, "get_total_norm")
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.tensor([30.0, 40.0, 0.0, 0.0])
    assert clip_gradients([p], 5.0) == pytest.approx(50.0)
    torch.testing.assert_close(p.grad, torch.tensor([3.0, 4.0, 0.0, 0.0]), rtol=1e-5, atol=1e-6)
