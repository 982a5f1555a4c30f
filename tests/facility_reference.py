"""A brute-force set function of the end-to-end DGN head with its facility-location term,
and hard greedy on it, as the reference the head's picks and gains are checked against.

``f(A) = SCMM(A) + sum_{a in A} beta_a + w * (FL(A) - sum_{a in A} sum_u cos+(u, a))`` with
``FL(A) = sum_u max_{a in A} cos+(u, a)`` and ``cos+`` the cosine of the sentence embeddings
clamped at zero: every value is computed from scratch, in float64, from the set ``A``
alone, with none of the head's incremental bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def facility_set_function(selector, X: torch.Tensor) -> Callable[[list[int]], float]:
    """``f`` for one problem: ``selector`` an :class:`dgn.sentence.EndToEndSelector` with a
    facility term, ``X (N, F + d)`` the head's input features then the sentence embeddings
    (what :class:`dgn.sentence.EndToEndFeatures` gives)."""
    n = selector.dgn.config.in_features
    valid = torch.ones(1, X.shape[0], dtype=torch.bool)
    with torch.no_grad():
        H, beta = selector.dgn._encode_and_score(X[None, :, :n], valid)
        alpha = selector.dgn.objective.weights(H).double()
        w = float(selector.facility.weights(H)[1])
    H, beta = H[0].double(), beta[0].double()
    E = torch.nn.functional.normalize(X[:, n:].double(), dim=-1)
    C = (E @ E.T).clamp(min=0)
    phi = selector.dgn.objective.phi

    def f(A: list[int]) -> float:
        if not A:
            return 0.0
        scmm = (alpha * phi(H[A].sum(0))).sum()
        return float(scmm + beta[A].sum() + w * (C[:, A].max(1).values.sum() - C[:, A].sum()))

    return f


def brute_force_greedy(f: Callable[[list[int]], float], n: int, k: int) -> tuple[list[int], list[float]]:
    """Hard greedy on the set function ``f`` over ``n`` items for ``min(k, n)`` steps: each
    step the item with the largest ``f(picks + [v])`` (the first on ties); the picks and
    their marginal gains."""
    picks: list[int] = []
    gains: list[float] = []
    for _ in range(min(k, n)):
        rest = [v for v in range(n) if v not in picks]
        best = max(rest, key=lambda v: f([*picks, v]))
        gains.append(f([*picks, best]) - f(picks))
        picks.append(best)
    return picks, gains
