"""Ranking losses of one layer and per greedy layer: soft cross entropy, ApproxNDCG, mixing."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from dgn.losses import (
    ApproxNDCGLoss,
    LayerwiseApproxNDCG,
    SoftCrossEntropy,
    approx_ndcg_loss,
    layerwise_approx_ndcg_loss,
    mix_sparse_dense,
    soft_cross_entropy,
)
from dgn.metrics import ndcg_at_k


def _spread_logits(B: int, N: int, seed: int) -> torch.Tensor:
    """Scores at least 0.1 apart in each row (no near ties), shuffled."""
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(N, dtype=torch.float64) * 0.1 + torch.rand(N, dtype=torch.float64, generator=g) * 0.01
    return torch.stack([base[torch.randperm(N, generator=g)] for _ in range(B)]) * 5


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_soft_cross_entropy_is_cross_entropy_on_one_hot(reduction: str) -> None:
    logits = torch.randn(5, 7, dtype=torch.float64)
    target = torch.tensor([0, 3, 6, 2, 2])
    got = soft_cross_entropy(logits, F.one_hot(target, 7).double(), reduction=reduction)
    torch.testing.assert_close(got, F.cross_entropy(logits, target, reduction=reduction))


def test_soft_cross_entropy_graded_by_hand_and_padding() -> None:
    logits = torch.tensor([[1.0, 0.0, -1.0, 5.0]], dtype=torch.float64, requires_grad=True)
    rel = torch.tensor([[2.0, 1.0, 0.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    z = math.log(math.e + 1 + math.exp(-1))
    expected = -(2 / 3 * (1 - z) + 1 / 3 * (0 - z))  # the padded candidate's grade is ignored
    loss = soft_cross_entropy(logits, rel, mask)
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-12)
    loss.backward()
    assert float(logits.grad[0, 3]) == 0.0
    other = logits.detach().clone()
    other[0, 3] = float("-inf")
    assert float(soft_cross_entropy(other, rel, mask)) == pytest.approx(expected, abs=1e-12)
    # a row without relevance adds 0 and is left out of the mean
    two = torch.cat([logits.detach(), torch.zeros(1, 4, dtype=torch.float64)])
    rel2 = torch.cat([rel, torch.zeros(1, 4, dtype=torch.float64)])
    mask2 = torch.cat([mask, torch.ones(1, 4, dtype=torch.bool)])
    assert float(soft_cross_entropy(two, rel2, mask2)) == pytest.approx(expected, abs=1e-12)
    assert soft_cross_entropy(two, rel2, mask2, reduction="none")[1] == 0


@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("gain", ["exp", "linear"])
def test_approx_ndcg_tends_to_exact_ndcg(k: int | None, gain: str) -> None:
    logits = _spread_logits(6, 8, seed=1)
    rel = torch.tensor([[3.0, 0, 1, 0, 2, 0, 0, 1]] * 6, dtype=torch.float64)
    for b in range(6):
        row, r = logits[b : b + 1], rel[b : b + 1]
        exact = ndcg_at_k(row[0].argsort(descending=True).tolist(), r[0].tolist(), k, gain=gain)
        errors = [abs(1 - float(approx_ndcg_loss(row, r, t, k, gain=gain)) - exact) for t in (1.0, 1e-3)]
        assert errors[1] < 1e-3
        assert errors[1] <= errors[0] + 1e-12


def test_approx_ndcg_prefers_the_right_order() -> None:
    rel = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    good = torch.tensor([[4.0, 3.0, 2.0, 1.0]]) * 10
    assert float(approx_ndcg_loss(good, rel, 0.01)) < 1e-6
    assert float(approx_ndcg_loss(good.flip(-1), rel, 0.01)) > 0.3
    mask = torch.tensor([[True, True, True, False]])
    # a padded item ranked first changes nothing
    padded = good.clone()
    padded[0, 3] = 100.0
    assert float(approx_ndcg_loss(padded, rel, 0.01, mask=mask)) < 1e-6


def test_gradcheck() -> None:
    logits = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    rel = torch.tensor([[2.0, 0, 1, 0, 0], [0, 0, 0, 0, 1], [1, 1, 0, 3, 0]], dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 4] = False
    assert torch.autograd.gradcheck(lambda x: soft_cross_entropy(x, rel, mask), (logits,))
    assert torch.autograd.gradcheck(lambda x: approx_ndcg_loss(x, rel, 0.7, mask=mask), (logits,))
    assert torch.autograd.gradcheck(lambda x: approx_ndcg_loss(x, rel, 0.7, k=2, mask=mask, gain="linear"), (logits,))
    states = torch.randn(3, 2, 5, dtype=torch.float64, requires_grad=True)
    unavailable = torch.zeros(3, 2, 5, dtype=torch.bool)
    unavailable[:, 1, 0] = True  # as if picked at layer 1
    indices = torch.tensor([[0, 1]] * 3)

    def layered(x: torch.Tensor) -> torch.Tensor:
        return layerwise_approx_ndcg_loss(torch.where(unavailable, float("-inf"), x), rel, 0.5, indices=indices)

    assert torch.autograd.gradcheck(layered, (states,))


def test_layerwise_approx_ndcg_is_the_sum_of_open_layers() -> None:
    states = torch.randn(2, 3, 5, dtype=torch.float64)
    states[0, 1, 4] = float("-inf")  # unavailable at layer 2
    rel = torch.tensor([[2.0, 1, 0, 0, 1], [0, 3, 0, 1, 0]], dtype=torch.float64)
    indices = torch.tensor([[2, 0, 1], [1, 3, 4]])
    got = layerwise_approx_ndcg_loss(states, rel, 0.5, k=2, indices=indices, reduction="none")
    for b in range(2):
        total = 0.0
        for layer in range(3):
            mask = torch.isfinite(states[b, layer]).clone()
            mask[indices[b, :layer]] = False
            total += float(approx_ndcg_loss(states[b, layer : layer + 1].nan_to_num(neginf=0.0), rel[b : b + 1],
                                            0.5, k=2, mask=mask[None]))
        assert float(got[b]) == pytest.approx(total, abs=1e-12)


def test_modules_and_mixing() -> None:
    logits, rel = torch.randn(2, 4), torch.tensor([[1.0, 0, 0, 2], [0, 1, 0, 0]])
    assert torch.equal(SoftCrossEntropy("sum")(logits, rel), soft_cross_entropy(logits, rel, reduction="sum"))
    assert torch.equal(ApproxNDCGLoss(0.5, 2)(logits, rel), approx_ndcg_loss(logits, rel, 0.5, 2))
    states = torch.randn(2, 2, 4)
    assert torch.equal(LayerwiseApproxNDCG(0.5)(states, rel), layerwise_approx_ndcg_loss(states, rel, 0.5))
    assert float(mix_sparse_dense(torch.tensor(2.0), torch.tensor(3.0), 0.5)) == 3.5


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: soft_cross_entropy(torch.randn(2, 3), -torch.ones(2, 3)), "nonnegative"),
        (lambda: soft_cross_entropy(torch.randn(2, 3), torch.full((2, 3), float("nan"))), "finite"),
        (lambda: soft_cross_entropy(torch.randn(2, 3), torch.ones(2, 4)), "shape"),
        (lambda: soft_cross_entropy(torch.randn(2, 3), torch.ones(2, 3), torch.ones(2, 3)), "mask"),
        (lambda: soft_cross_entropy(torch.randn(2, 3), torch.ones(2, 3), reduction="avg"), "reduction"),
        (lambda: approx_ndcg_loss(torch.randn(2, 3), torch.ones(2, 3), 0.0), "temperature"),
        (lambda: approx_ndcg_loss(torch.randn(2, 3), torch.ones(2, 3), k=0), "k must"),
        (lambda: approx_ndcg_loss(torch.randn(2, 3), torch.ones(2, 3), gain="log"), "gain"),
        (lambda: layerwise_approx_ndcg_loss(torch.randn(2, 3), torch.ones(2, 3)), "shape"),
        (lambda: mix_sparse_dense(torch.tensor(1.0), torch.tensor(1.0), -1), "sparse_weight"),
    ],
)
def test_bad_inputs(call: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        call()  # type: ignore[operator]


def test_module_forms_are_named_as_their_functions_and_compute_them():
    from dgn.losses import (
        LayerwiseApproxNDCG,
        LayerwiseApproxNDCGLoss,
        SetRecallCrossEntropy,
        gold_set_tensor,
        set_recall_cross_entropy,
    )

    assert LayerwiseApproxNDCG is LayerwiseApproxNDCGLoss  # the old name, kept
    g = torch.Generator().manual_seed(3)
    states = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    sets = gold_set_tensor([[[0, 2]], [[1], [3, 4]]], 6)
    for reduction in ("mean", "sum", "none"):
        assert torch.equal(SetRecallCrossEntropy(reduction)(states, sets), set_recall_cross_entropy(states, sets, reduction=reduction))
