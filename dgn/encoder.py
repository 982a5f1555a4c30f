"""Encoders mapping claim-sentence features to nonnegative item features.

The DGN paper's encoder is two linear layers with ReLUs (Powers et al., 2018, sec. 4):
``H = relu(W2 relu(W1 X + b1) + b2)``, so ``H >= 0`` as a sum-of-concave objective needs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _torch_module

__all__ = ["Encoder", "DeepEncoder"]

# torch's hooks on every module: with any set, the fused path (which skips the layers'
# __call__) does not run
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def _relu_mlp(sizes: list[int], dropout: float) -> nn.Sequential:
    """Linear + ReLU per consecutive pair of ``sizes``, dropout between hidden layers."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        if i > 0:
            layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return nn.Sequential(*layers)


def _check_sizes(in_features: int, hidden_features: int, out_features: int, dropout: float) -> None:
    for name, value in (
        ("in_features", in_features),
        ("hidden_features", hidden_features),
        ("out_features", out_features),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def _check_input(x: Tensor, in_features: int) -> None:
    if not isinstance(x, Tensor) or not torch.is_floating_point(x):
        got = f"{x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"encoder input must be a floating-point tensor, got {got}")
    if x.dim() == 0 or x.shape[-1] != in_features:
        raise ValueError(f"encoder input must have shape (*, {in_features}), got {tuple(x.shape)}")


class _ReluEncoder(nn.Module):
    """Linear + ReLU layers of the given widths (dropout between hidden layers): what
    :class:`Encoder` and :class:`DeepEncoder` share, the fused path included."""

    def __init__(self, sizes: list[int], dropout: float) -> None:
        super().__init__()
        self.in_features = sizes[0]
        self.out_features = sizes[-1]
        self.net = _relu_mlp(sizes, dropout)
        self.fused = False  # see Encoder's Attributes

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x (*, F)`` to ``(*, E)``; with ``mask`` (``x.shape[:-1]``, bool), rows where it is
        False come out as zeros."""
        _check_input(x, self.in_features)
        linears = self._fused_layers(mask, x)
        if linears is not None:
            from dgn import _kernels

            out = _kernels.relu_mlp(x, linears, mask)
            if out is not None:
                return out[0]
        H = self.net(x)
        if mask is not None:
            H = H * mask.unsqueeze(-1).to(H.dtype)
        return H  # type: ignore[no-any-return]

    def _forward_with_head(self, x: Tensor, mask: Tensor | None, head: nn.Linear) -> tuple[Tensor, Tensor] | None:
        """``(H, head(H).squeeze(-1))`` in one fused call (the DGN's modular term rides along
        in the last layer's passes) for input the caller has checked finite, or None where
        the fused path does not apply."""
        _check_input(x, self.in_features)
        linears = self._fused_layers(mask, x)
        if linears is None or head._forward_hooks or head._forward_pre_hooks or type(head) is not nn.Linear:
            return None
        from dgn import _kernels

        out = _kernels.relu_mlp(x, linears, mask, head=head, finite_input=True)
        return None if out is None else (out[0], out[1])  # type: ignore[return-value]

    def _fused_layers(self, mask: Tensor | None, x: Tensor) -> list[nn.Linear] | None:
        """The linear layers to run fused, or None where the plain layers must run: ``fused``
        off, dropout to apply, layers other than the package's Linear/ReLU(/Dropout) pattern,
        hooks on any of the modules (pruning, weight norm, a user's), or a mask that is not a
        bool one of shape ``x.shape[:-1]``."""
        if not self.fused:
            return None
        if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != tuple(x.shape[:-1])):
            return None
        layers = [m for m in self.net if not isinstance(m, nn.Dropout)]
        if self.training and any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.net):
            return None
        if len(layers) % 2 or any(type(m) is not (nn.Linear if i % 2 == 0 else nn.ReLU)
                                  for i, m in enumerate(layers)):
            return None
        if any(getattr(_torch_module, name, None) for name in _GLOBAL_HOOKS):
            return None
        for m in self.modules():
            if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
                return None
        return layers[0::2]  # type: ignore[return-value]


class Encoder(_ReluEncoder):
    """Two linear layers with ReLUs: ``(B, N, F) -> (B, N, E)``, nonnegative output.

    Args:
        in_features: F, the input feature size (300 for fastText vectors).
        hidden_features: Width of the hidden layer.
        out_features: E, the encoded size (the paper's F').
        dropout: Dropout probability applied after the hidden layer (0 disables).

    Attributes:
        fused: Run the layers through :mod:`dgn._kernels` (default False;
            ``TrainConfig.compile`` sets it while training): float32 on the CPU, oneDNN's
            linear layer with the ReLU fused where torch has it, and one C pass a layer for
            each ReLU's backward (its mask, the bias gradient, and the weight gradient's
            operand laid out transposed); a :class:`~dgn.model.DGN` computes its modular
            term in the same passes. The same values up to float rounding, a training step
            about 1.2 times faster (docs/benchmarks.md, Training speed); other dtypes and
            devices, dropout in training mode, layers changed from the built ones or carrying
            hooks (pruning, weight norm), and NaN or inf in the input or the weights run the
            plain layers (oneDNN's fused ReLU would turn a NaN into 0).

    Shape:
        - Input: ``(*, F)``
        - Output: ``(*, E)``, every entry ``>= 0``

    Example:
        >>> import torch
        >>> enc = Encoder(300, 64, 32)
        >>> enc(torch.randn(2, 10, 300)).shape
        torch.Size([2, 10, 32])
    """

    def __init__(
        self, in_features: int, hidden_features: int, out_features: int, dropout: float = 0.0
    ) -> None:
        _check_sizes(in_features, hidden_features, out_features, dropout)
        super().__init__([in_features, hidden_features, out_features], dropout)


class DeepEncoder(_ReluEncoder):
    """Three linear layers with ReLUs (the paper's DeepEncoder: one layer more).

    Args:
        in_features: F.
        hidden_features: Width of both hidden layers.
        out_features: E.
        dropout: Dropout after each hidden layer.

    Attributes:
        fused: As :attr:`Encoder.fused`.

    Shape:
        - Input: ``(*, F)``
        - Output: ``(*, E)``, every entry ``>= 0``
    """

    def __init__(
        self, in_features: int, hidden_features: int, out_features: int, dropout: float = 0.0
    ) -> None:
        _check_sizes(in_features, hidden_features, out_features, dropout)
        super().__init__([in_features, hidden_features, hidden_features, out_features], dropout)
