"""The greedy layer as a torch module: relaxed greedy in ``train()``, exact in ``eval()``.

:class:`GreedyLayer` is the thin ``nn.Module`` over :func:`dgn.soft_greedy_select` and
:func:`dgn.greedy_select` (Powers et al., "Differentiable Greedy Networks", 2018): it holds
the (possibly learnable) objective and puts K greedy steps on top of any encoder whose
output is nonnegative.
"""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
from torch import Tensor, nn

from dgn._validation import check_tau
from dgn.greedy import RELAXATIONS, Selection, SoftSelection, greedy_select, soft_greedy_select
from dgn.objectives import SCMM, Objective, make_objective

__all__ = ["GreedyLayer"]


class GreedyLayer(nn.Module):
    r"""K greedy steps over a submodular objective, relaxed for training.

    In ``train()`` mode the layer runs the K unfolded greedy layers of
    :func:`dgn.soft_greedy_select`: layer k computes the marginal gains ``g`` of every
    candidate and the relaxed argmax

    .. math::

        s_k = \operatorname{softmax}_{v \in \mathcal{A}_k}(g_v / \tau)

    over the available candidates (real, not yet picked), so gradients reach the features
    and the objective's weights. In ``eval()`` mode it runs exact hard greedy
    (:func:`dgn.greedy_select`), so test-time picks keep greedy's ``(1 - 1/e)`` guarantee
    for the learned objective, and returns the same fields: ``logits = g / tau`` of every
    step (``-inf`` where unavailable) and their softmax. Powers et al., "Differentiable
    Greedy Networks" (2018).

    Args:
        objective: An :class:`~dgn.objectives.Objective` (held as a submodule, so a
            learnable one trains with the layer) or a name as in :func:`dgn.greedy_select`
            (``"sqrt"`` builds a fixed ``SCMM("sqrt")``).
        k: K, the number of greedy steps (``> 0``).
        tau: Softmax temperature of the relaxed argmax (finite, ``> 0``; the paper found
            (3, 6) best).
        relaxation: ``"soft"`` (differentiable everywhere) or ``"straight_through"``
            (see :func:`dgn.soft_greedy_select`).
        compile: Use compiled kernels for SCMM objectives (other objectives ignore it):
            in ``train()`` mode the K relaxed layers as compiled code
            (``soft_greedy_select(..., compile=True)``: a hand-written C kernel for
            ``SCMM("sqrt")`` with the ``soft`` relaxation on float32, else one
            ``torch.compile``'d graph), in ``eval()`` mode without gradients hard greedy
            with the compiled gain kernel (``greedy_select(..., compile=True)``).

    Shape:
        - features: ``(B, N, E)`` or ``(N, E)``, nonnegative for SCMM
        - mask: ``(B, N)`` bool, True for real candidates
        - modular: ``(B, N)`` per-item bonus added to each gain
        - output: :class:`~dgn.greedy.SoftSelection` with ``(B, K, N)`` logits and
          distributions and ``(B, K)`` indices, gains and valid (no ``B`` for ``(N, E)``)

    Raises:
        ValueError: ``k`` not a positive integer, ``tau`` not a finite number ``> 0``, an
            unknown relaxation or objective.

    Example:
        >>> layer = GreedyLayer("sqrt", k=2, tau=1e-3)
        >>> H = torch.tensor([[4.0, 0.0], [3.0, 0.0], [0.0, 1.0]])  # (N, E)
        >>> layer.train()(H).indices.tolist(), layer.eval()(H).indices.tolist()
        ([0, 2], [0, 2])
        >>> layer.eval()(H).distributions.tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """

    def __init__(
        self,
        objective: Objective | str = "sqrt",
        k: int = 7,
        tau: float = 4.0,
        relaxation: str = "soft",
        compile: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"k must be a positive integer, got {k!r} ({type(k).__name__})")
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
            raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
        if relaxation not in RELAXATIONS:
            raise ValueError(f"relaxation must be one of {RELAXATIONS}, got {relaxation!r}")
        self.objective = make_objective(objective)
        self.k = k
        self.tau = float(tau)
        self.relaxation = cast(Literal["soft", "straight_through"], relaxation)
        #: Use the compiled SCMM kernels: the relaxed layers in ``train()`` mode, hard
        #: greedy in ``eval()`` mode without gradients. Faster on large batches, the same
        #: values up to rounding; the first call of a process compiles them.
        self.compile = bool(compile)

    def extra_repr(self) -> str:
        return f"k={self.k}, tau={self.tau}, relaxation={self.relaxation!r}"

    def forward(
        self,
        features: Tensor,
        mask: Tensor | None = None,
        modular: Tensor | None = None,
        steps: int | None = None,
        tau: float | None = None,
    ) -> SoftSelection:
        """Select ``steps`` (default K) candidates per problem.

        Args:
            features: ``(B, N, E)`` or ``(N, E)`` item features.
            mask: Optional ``(B, N)`` bool, True for real candidates.
            modular: Optional ``(B, N)`` per-item bonus added to each gain.
            steps: Override K for this call (e.g. to rank beyond K at test time).
            tau: Override the temperature for this call (e.g. an annealed one).

        Returns:
            A :class:`~dgn.greedy.SoftSelection`. In ``eval()`` mode ``indices``,
            ``gains`` and ``valid`` are hard greedy's, ``step_gains`` its gains of every
            step (``-inf`` where a candidate was masked or already picked), ``logits``
            those over ``tau`` and ``distributions`` their softmax (all zeros in a step
            with no candidate left).

        Raises:
            ValueError: Bad features, mask or modular (as in :func:`dgn.greedy_select`),
                or a bad ``steps`` or ``tau``.
        """
        K = self.k if steps is None else steps
        t = self.tau if tau is None else check_tau(tau)
        if self.training:
            return soft_greedy_select(features, K, self.objective, t, mask, self.relaxation, modular=modular,
                                      compile=self.compile and isinstance(self.objective, SCMM))
        fast = self.compile and not torch.is_grad_enabled() and isinstance(self.objective, SCMM)
        sel = greedy_select(features, K, self.objective, mask, modular=modular, return_step_gains=True,
                            compile=fast)
        return _as_soft(sel, t)


def _as_soft(sel: Selection, tau: float) -> SoftSelection:
    """Hard greedy's :class:`Selection` in the relaxed layers' fields: ``step_gains / tau``
    as logits and a softmax that stays finite at any tau."""
    assert sel.step_gains is not None, "greedy_select returns step gains when asked"
    g = sel.step_gains  # (B, K, N), -inf where unavailable
    logits = g / tau
    finite_row = torch.isfinite(g).any(-1, keepdim=True)  # (B, K, 1)
    # softmax of (g - max g) / tau: the same distribution, and no overflow at tiny tau
    top = g.new_zeros(*g.shape[:-1], 1) if g.shape[-1] == 0 else g.amax(-1, keepdim=True)
    shifted = g - torch.where(finite_row, top, torch.zeros_like(top))
    shifted = torch.where(shifted == 0, shifted, shifted / tau)
    dists = torch.softmax(torch.where(finite_row, shifted, torch.zeros_like(shifted)), -1)
    dists = dists * finite_row.to(dists.dtype)
    return SoftSelection(dists, logits, sel.indices, sel.gains, sel.valid, g)
