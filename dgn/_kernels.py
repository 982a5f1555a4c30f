"""A hand-written CPU kernel for the relaxed greedy layers of a sqrt SCMM objective.

``torch.compile`` fuses the K relaxed layers into a few generated loops, but on CPU its
backward pass still makes several passes over the ``(B, N, E)`` features a layer and
saves their square roots for every layer. :file:`_scmm_kernel.c` does the forward pass and
the hand-derived backward pass in one pass a layer each, recomputing the roots, and this
module builds it at first use (with the C compiler ``torch.compile`` also needs) and loads it
with :mod:`ctypes`. Built with OpenMP where the compiler has it, it splits the batch over
the threads of the OpenMP runtime torch has loaded (the same ``libgomp.so.1``), so no
second thread pool competes with torch's for the cores.

:func:`soft_layers` is the entry point: the outputs of :func:`dgn.greedy._soft_layers`
for float32 CPU input, ``soft`` relaxation, ``SCMM("sqrt")``, or None when the kernel does
not apply (the caller then runs the general path).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["soft_layers", "relu_mlp", "layerwise_ce", "available"]

_SOURCES = tuple(Path(__file__).with_name(name) for name in ("_scmm_kernel.c", "_relu_kernel.c",
                                                                    "_loss_kernel.c"))
_HEADER = Path(__file__).with_name("_kernel_common.h")  # included by the first two
# -fassociative-math (with the two flags it needs) lets sums be vectorised; unlike
# -ffast-math it keeps inf and NaN semantics, which the kernel's overflow check relies on.
_FLAGS = ("-O3", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fPIC",
          "-shared")
# Tried in turn until one builds: the machine's own vector instructions and OpenMP first.
_OPTIONAL = (["-march=native", "-fopenmp"], ["-march=native"], ["-fopenmp"], [])
# On macOS torch brings its own libomp; a compiler's -fopenmp could load a second copy
# into the process, which libomp refuses (OMP: Error #15): build without OpenMP there.
_OPTIONAL_DARWIN = (["-march=native"], [])
_LOCK = threading.Lock()


def _machine_key() -> str:
    """The CPU a ``-march=native`` build is for (a cache directory may be shared by several
    machines)."""
    parts = [platform.machine(), platform.processor()]
    keys = ("model name", "flags", "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")
    try:  # the first core's lines (x86: model and flags; arm64: features and part)
        for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines():
            if line.startswith(keys):
                parts.append(line)
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=10)
            parts.append(brand.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return "\n".join(parts)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The built kernel (cached under ``default_cache_dir() / "kernels"``), or None when it
    cannot be built here (not Linux or macOS, no C compiler) or ``DGN_KERNELS=0`` is set in
    the environment: callers then use the general path (``torch.compile``)."""
    from dgn._paths import default_cache_dir

    if sys.platform not in ("linux", "darwin") or os.environ.get("DGN_KERNELS", "1").strip() == "0":
        return None
    cc = os.environ.get("CC")
    compiler = shlex.split(cc) if cc else [c for c in (shutil.which(n) for n in ("cc", "gcc", "clang")) if c][:1]
    if not compiler or not all(path.is_file() for path in (*_SOURCES, _HEADER)):
        return None
    source = b"".join(path.read_bytes() for path in (*_SOURCES, _HEADER))
    digest = hashlib.sha256(source + " ".join(_FLAGS).encode() + _machine_key().encode() + " ".join(compiler).encode())
    target = default_cache_dir() / "kernels" / f"scmm_{digest.hexdigest()[:20]}.so"
    with _LOCK:
        if not target.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
                os.close(fd)
                try:
                    for extra in _OPTIONAL_DARWIN if sys.platform == "darwin" else _OPTIONAL:
                        done = subprocess.run([*compiler, *_FLAGS, *extra, "-o", tmp, *map(str, _SOURCES), "-lm"],
                                              capture_output=True, timeout=120)
                        if done.returncode == 0:
                            break
                    else:
                        return None
                    os.chmod(tmp, 0o755)  # readable by other users of a shared cache
                    os.replace(tmp, target)  # another process may have won: same bytes
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
            except (OSError, subprocess.SubprocessError):
                return None
        try:
            lib = ctypes.CDLL(str(target))
        except OSError:
            return None
    i64, f32, p = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.scmm_soft_forward.restype = i64
    lib.scmm_soft_forward.argtypes = [i64, i64, i64, i64, f32] + [p] * 13
    lib.scmm_soft_backward.restype = i64
    lib.scmm_soft_backward.argtypes = [i64, i64, i64, i64, f32] + [p] * 16
    lib.relu_backward.restype = i64
    lib.relu_backward.argtypes = [i64, i64] + [p] * 8
    lib.layerwise_ce_forward.restype = i64
    lib.layerwise_ce_forward.argtypes = [i64, i64, i64] + [p] * 5
    lib.layerwise_ce_backward.restype = i64
    lib.layerwise_ce_backward.argtypes = [i64, i64, i64] + [p] * 5
    lib.last_layer.restype = None
    lib.last_layer.argtypes = [i64, i64, p, p, p, f32, p]
    lib.sum_squares.restype = ctypes.c_double
    lib.sum_squares.argtypes = [i64, p, p]
    return lib


def available() -> bool:
    """Whether the kernel is built (or can be) on this machine."""
    return _library() is not None


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def sum_squares(tensors: list[Tensor]) -> float | None:
    """The sum of the squares of every entry of ``tensors`` in one C pass (float blocks,
    summed in double), or None where the kernel does not apply: no kernel on this machine,
    or a tensor that is not a contiguous float32 CPU one. A finite result says every entry
    is finite; inf or NaN says an entry is not, or that large finite entries left float
    range (a square, or a block's float sum, from 1.8e19 in size): look closer then."""
    lib = _library()
    if lib is None or any(t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous()
                          for t in tensors):
        return None
    n = len(tensors)
    ptrs = (ctypes.c_void_p * n)(*(t.data_ptr() for t in tensors))
    lens = (ctypes.c_int64 * n)(*(t.numel() for t in tensors))
    return float(lib.sum_squares(n, ptrs, lens))


class _SoftSCMM(torch.autograd.Function):
    """The K relaxed layers; inputs ``H (B, N, E)``, ``beta (B, N)`` or None, ``alpha (E,)``."""

    @staticmethod
    def forward(ctx: Any, H: Tensor, beta: Tensor | None, alpha: Tensor, valid: Tensor, tau: float,
                K: int, status: list[int]) -> tuple[Tensor, ...]:
        lib = _library()
        assert lib is not None
        B, N, E = H.shape
        H, alpha = H.contiguous(), alpha.contiguous()
        beta = None if beta is None else beta.contiguous()
        valid = valid.contiguous().view(torch.uint8)
        S, L, G, R = (H.new_empty(B, K, N) for _ in range(4))
        AV = torch.empty(B, K, N, dtype=torch.uint8)
        P = torch.empty(B, K, dtype=torch.int64)
        PG = H.new_empty(B, K)
        OK = torch.empty(B, K, dtype=torch.uint8)
        C = H.new_empty(B, K, E)
        bad = lib.scmm_soft_forward(B, N, E, K, tau, H.data_ptr(), _ptr(beta), alpha.data_ptr(), valid.data_ptr(),
                                    *(t.data_ptr() for t in (S, L, P, PG, OK, G, C, R, AV)))
        if bad == -1:
            raise MemoryError("the SCMM kernel could not allocate its work space")
        status.append(bad)  # > 0: logits out of float range; -2: an entry out of range
        # the backward pass reads S, P, OK and the mask: keep copies of its own, so that
        # callers may edit the outputs (or the mask) in place, as with the eager layers
        ctx.save_for_backward(H, alpha, valid.clone(), S.clone(), C, R, AV, P.clone(), OK.clone())
        ctx.set_materialize_grads(False)  # absent gradients stay None: the kernel skips them
        ctx.tau = tau
        ctx.has_beta = beta is not None
        OKb = OK.view(torch.bool)
        ctx.mark_non_differentiable(P, OKb)
        return S, L, P, PG, OKb, G

    @staticmethod
    def backward(ctx: Any, dS: Tensor | None, dL: Tensor | None, _dP: Any, dPG: Tensor | None, _dOK: Any,
                 dG: Tensor | None) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():  # create_graph=True: the kernel's gradient has no graph of its own
            raise RuntimeError("the compiled relaxed layers (compile=True) have no second derivative; "
                               "use compile=False to differentiate twice")
        lib = _library()
        assert lib is not None
        H, alpha, valid, S, C, R, AV, P, OK = ctx.saved_tensors
        B, N, E = H.shape
        K = S.shape[1]
        grads = [None if t is None else t.contiguous() for t in (dS, dL, dG, dPG)]
        dH = torch.empty_like(H)
        dbeta = H.new_empty(B, N)
        dalpha = H.new_empty(E)
        code = lib.scmm_soft_backward(B, N, E, K, ctx.tau, H.data_ptr(), alpha.data_ptr(), valid.data_ptr(),
                                      *(t.data_ptr() for t in (S, C, R, AV, P, OK)), *(_ptr(g) for g in grads),
                                      dH.data_ptr(), dbeta.data_ptr(), dalpha.data_ptr())
        if code < 0:
            raise MemoryError("the SCMM kernel could not allocate its work space")
        return dH, (dbeta if ctx.has_beta else None), dalpha, None, None, None, None


def soft_layers(feats: Tensor, alpha: Tensor | None, valid: Tensor, mod: Tensor | None, tau: float,
                k: int) -> tuple[Tensor, ...] | None:
    """:func:`dgn.greedy._soft_layers`'s outputs for a ``SCMM("sqrt")`` objective with the
    ``soft`` relaxation (``alpha`` its feature weights, None for all ones), or None where the
    kernel does not apply: not float32 on the CPU, no kernel on this machine, an entry of
    ``feats`` negative or not finite or one of ``mod`` not finite (the kernel checks them
    as it reads them: the caller's checks then give the error), or a ``tau`` so small that
    the logits leave float range."""
    if feats.device.type != "cpu" or feats.dtype != torch.float32 or _library() is None:
        return None
    if alpha is None:
        alpha = feats.new_ones(feats.shape[-1])
    if alpha.dtype != torch.float32 or (mod is not None and mod.dtype != torch.float32):
        return None
    if feats.shape[1] == 0 or feats.shape[2] == 0:
        return None
    status: list[int] = []
    out = _SoftSCMM.apply(feats, mod, alpha, valid, float(tau), int(k), status)
    return None if status[0] else out


@functools.cache
def _onednn() -> Any:
    """oneDNN's dense-operand linear layer with a fused ReLU (``torch.ops.mkldnn._linear_pointwise``,
    the operator ``torch.compile`` uses on CPU), or None where this build of torch lacks it or
    it does not give the plain product on a small case. On this machine's AMD EPYC it runs
    the encoder's products 9 to 39% faster than ``torch.mm`` (MKL), see docs/benchmarks.md."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        op = torch.ops.mkldnn._linear_pointwise
        a = torch.arange(-6.0, 6.0).view(3, 4)
        w = torch.arange(8.0).view(2, 4) / 8
        b = torch.tensor([0.5, -20.0])
        if not torch.equal(op(a, w, b, "relu", [], ""), torch.addmm(b, a, w.t()).relu()):
            return None
        if not torch.equal(op(a.t().contiguous(), a.t(), None, "none", [], ""), a.t() @ a):
            return None
        return op
    except (AttributeError, RuntimeError):
        return None


def _linear_relu(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``relu(x weight^T + bias)`` for ``x (R, in)``, a new ``(R, out)`` tensor."""
    op = _onednn()
    if op is not None:
        return op(x, weight, bias, "relu", [], "")  # type: ignore[no-any-return]
    return torch.addmm(bias, x, weight.t()).relu_()


def _matmul_t(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b^T`` for ``a (m, k)``, ``b (n, k)``; ``b`` may be a transposed view."""
    op = _onednn()
    if op is not None:
        return op(a, b, None, "none", [], "")  # type: ignore[no-any-return]
    return torch.mm(a, b.t())


class _ReluMLP(torch.autograd.Function):
    """Linear + ReLU layers on rows: ``x (R, F)``, then ``params = (W1, b1, W2, b2, ...)``
    (``W (out, in)``); the rows where the ``(R,)`` uint8 ``valid`` is 0 are zeroed at the end
    (``valid`` None: no row is). With a head (``head_w (1, E)``, ``head_b (1,)``) it also
    returns ``z = H head_w^T + head_b``, ``(R,)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, valid: Tensor | None, head_w: Tensor | None, head_b: Tensor | None,
                *params: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        lib = _library()
        assert lib is not None
        weights = params[0::2]
        outputs = [x]
        for weight, bias in zip(weights, params[1::2], strict=True):
            outputs.append(_linear_relu(outputs[-1], weight, bias))
        h = outputs[-1]
        R, E = h.shape
        w = None if head_w is None else head_w.reshape(E).contiguous()
        z = h.new_empty(R) if w is not None else None
        if valid is not None or w is not None:
            lib.last_layer(R, E, h.data_ptr(), _ptr(valid), _ptr(w), 0.0 if head_b is None else float(head_b),
                           _ptr(z))
        # outputs are saved as they are: editing them in place before backward is refused
        # by autograd's version check, as for any saved tensor
        ctx.save_for_backward(*outputs, *weights, *([] if w is None else [w]))
        ctx.layers = len(weights)
        return h if z is None else (h, z)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, grad_z: Tensor | None = None) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():
            raise RuntimeError("the fused encoder (Encoder.fused) has no second derivative; "
                               "set fused = False to differentiate twice")
        lib = _library()
        assert lib is not None
        n = ctx.layers
        saved = ctx.saved_tensors
        outputs, weights, head = saved[: n + 1], saved[n + 1: 2 * n + 1], saved[2 * n + 1:]
        needs = ctx.needs_input_grad  # x, valid, head_w, head_b, W1, b1, W2, b2, ...
        R = outputs[0].shape[0]
        grads: list[Tensor | None] = [None] * (2 * n)
        u = None if grad_z is None else grad_z.contiguous()
        w = head[0] if head else None
        dw = u.new_empty(w.shape[0]) if u is not None and w is not None and needs[2] else None
        dw_done = False
        g, owned = grad.contiguous(), False
        for layer in reversed(range(n)):
            if not (needs[0] or any(needs[4: 6 + 2 * layer])):
                break  # nothing at or below this layer wants a gradient
            below = needs[0] or any(needs[4: 4 + 2 * layer])  # the layer's input gradient is wanted
            last = layer == n - 1
            C = outputs[layer + 1].shape[1]
            z = (g if owned else torch.empty_like(g)) if below else None
            zT = g.new_empty(C, R) if needs[4 + 2 * layer] else None
            db = g.new_empty(C)
            if lib.relu_backward(R, C, g.data_ptr(), outputs[layer + 1].data_ptr(), _ptr(u if last else None),
                                 _ptr(w if last else None), _ptr(z), _ptr(zT), db.data_ptr(),
                                 _ptr(dw if last else None)) < 0:
                raise MemoryError("the ReLU kernel could not allocate its work space")
            dw_done = dw_done or last
            if zT is not None:
                grads[2 * layer] = _matmul_t(zT, outputs[layer].t())
            if needs[5 + 2 * layer]:
                grads[2 * layer + 1] = db
            if z is None:
                break
            g, owned = _matmul_t(z, weights[layer].t()), True
        if dw is not None and not dw_done:  # no pass ran: the head's weight gradient alone
            torch.mv(outputs[-1].t(), u, out=dw)
        head_grads = (None if dw is None else dw.view(1, -1),
                      u.sum().view(1) if u is not None and needs[3] else None)
        return (g if needs[0] else None), None, *head_grads, *grads


def relu_mlp(x: Tensor, linears: list[torch.nn.Linear], valid: Tensor | None = None,
             head: torch.nn.Linear | None = None, finite_input: bool = False) -> tuple[Tensor, Tensor | None] | None:
    """``H = relu(... relu(x W1^T + b1) ... W^T + b)`` over the last dimension of ``x``, rows
    where ``valid`` (``x.shape[:-1]``, bool) is False zeroed, and with a ``head`` (a linear
    layer to one output) ``z = head(H)`` squeezed to ``x.shape[:-1]``: ``(H, z or None)``, or
    None where the fused path does not apply: not float32 on the CPU, a layer without bias,
    no rows, no kernel on this machine, NaN or inf in the weights or (unless the caller
    has checked, ``finite_input``) in ``x``: oneDNN's fused ReLU turns NaN into 0, where the
    plain layers carry it on to an error downstream. Matrix products through oneDNN where
    torch has it (:func:`_onednn`), the ReLUs' backward pass (and the head) through
    :file:`_relu_kernel.c`."""
    params = [t for lin in linears for t in (lin.weight, lin.bias)]
    head_params = [] if head is None else [head.weight, head.bias]
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() == 0 or _library() is None:
        return None
    if any(t is None or t.device.type != "cpu" or t.dtype != torch.float32 for t in params + head_params):
        return None
    if head is not None and tuple(head.weight.shape) != (1, linears[-1].weight.shape[0]):
        return None
    with torch.no_grad():  # NaN and inf show in the sums (a finite overflow only declines)
        squares = sum_squares(params + head_params)
        if squares is None:  # a weight that is not contiguous
            squares = float(torch.stack([t.sum() for t in params + head_params]).sum())
        if not math.isfinite(squares):
            return None
        if not finite_input and not bool(torch.isfinite(x.sum())):
            return None
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    keep = None if valid is None else valid.reshape(-1).to(device="cpu", dtype=torch.bool).contiguous()
    out = _ReluMLP.apply(rows, None if keep is None else keep.view(torch.uint8), *(head_params or [None, None]), *params)
    H, z = out if head is not None else (out, None)
    return H.view(*lead, H.shape[-1]), (None if z is None else z.view(lead))


class _LayerwiseCE(torch.autograd.Function):
    """The layer-wise cross entropy of each problem, ``(B,)``, from float32 logits
    ``(B, K, N)``, gold ``(B, N)`` uint8 and the picks ``(B, K)`` (None: each layer's argmax)."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, gold: Tensor, picks: Tensor | None, status: list[int],
                reference: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Tensor:
        lib = _library()
        assert lib is not None
        B, K, N = logits.shape
        used = torch.empty(B, K, dtype=torch.int64)
        loss = logits.new_empty(B)
        code = lib.layerwise_ce_forward(B, K, N, logits.data_ptr(), gold.data_ptr(), _ptr(picks), used.data_ptr(),
                                        loss.data_ptr())
        if code == -1:
            raise MemoryError("the loss kernel could not allocate its work space")
        status.append(code)  # -2: a logit NaN or +inf
        ctx.save_for_backward(logits, gold, used)
        ctx.reference = reference
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        logits, gold, used = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the composition instead
            with torch.enable_grad():
                per = ctx.reference(logits, gold.bool(), used)
                return torch.autograd.grad(per, logits, grad, create_graph=True)[0], None, None, None, None
        lib = _library()
        assert lib is not None
        B, K, N = logits.shape
        d_logits = torch.empty_like(logits)
        grad = grad.contiguous()  # kept alive across the call (a sum's gradient is an expanded view)
        if lib.layerwise_ce_backward(B, K, N, logits.data_ptr(), gold.data_ptr(), used.data_ptr(),
                                     grad.data_ptr(), d_logits.data_ptr()) < 0:
            raise MemoryError("the loss kernel could not allocate its work space")
        return d_logits, None, None, None, None


def layerwise_ce_applies(logits: Tensor) -> bool:
    """Whether :func:`layerwise_ce` runs for these logits: float32 on the CPU, not empty, the
    kernel built."""
    return logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.numel() > 0 \
        and _library() is not None


def layerwise_ce(logits: Tensor, gold: Tensor, picks: Tensor | None,
                 reference: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Tensor | None:
    """Each problem's layer-wise cross entropy (:func:`dgn.losses.layerwise_cross_entropy`
    before its reduction) from float32 CPU logits of checked shape, or None where the kernel
    does not apply (:func:`layerwise_ce_applies`) or a logit is NaN or +inf (the kernel
    checks them as it reads them: the caller's check then gives the error).

    ``reference(logits, gold, picks)`` is the same loss composed of PyTorch operations; a
    double backward (``create_graph=True``) differentiates it, as the kernel has no second
    derivative."""
    if not layerwise_ce_applies(logits):
        return None
    gold_bytes = gold.to(device="cpu").bool().contiguous().view(torch.uint8)
    picks = None if picks is None else picks.to(device="cpu", dtype=torch.int64).contiguous()
    status: list[int] = []
    out = _LayerwiseCE.apply(logits.contiguous(), gold_bytes, picks, status, reference)
    return None if status[0] else out  # type: ignore[no-any-return]
