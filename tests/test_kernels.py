"""The hand-written SCMM kernel (dgn._kernels) against the eager relaxed layers, and keeping
freed memory in the process (dgn._memory)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from dgn import _kernels
from dgn.greedy import _soft_layers, soft_greedy_select
from dgn.layer import GreedyLayer
from dgn.objectives import SCMM

_no_kernel = pytest.mark.skipif(not _kernels.available(), reason="no C compiler to build the kernel")


def needs_kernel(test):
    """Skip ``test`` without the C kernel; a ``reference`` test, which .ci/run requires to run."""
    return pytest.mark.reference(_no_kernel(test))

FIELDS = ("distributions", "logits", "indices", "gains", "valid", "step_gains")


def _problem(B, N, E, seed, learnable=True, modular=True, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    H = torch.relu(torch.randn(B, N, E, generator=gen, dtype=dtype))
    H[:, :, : E // 3] = 0.0  # exact zeros, where the derivative of sqrt is floored
    beta = torch.rand(B, N, generator=gen, dtype=dtype) if modular else None
    objective = SCMM("sqrt", learnable=learnable, num_features=E if learnable else None)
    if learnable:
        with torch.no_grad():
            objective.raw_weights.copy_(torch.randn(E, generator=gen))
    return H, beta, objective.to(dtype)


def _run(H, beta, objective, mask, tau, K, kernel):
    """The six outputs and the gradients of a loss that reads all of them."""
    H = H.clone().requires_grad_(True)
    beta = None if beta is None else beta.clone().requires_grad_(True)
    if kernel:
        out = _kernels.soft_layers(H, objective.weights(H), mask, beta, tau, K)
        assert out is not None, "the kernel declined a problem it should run"
    else:
        out = _soft_layers(H, objective, mask, beta, tau, K, "soft", False)
    dists, logits, _, gains, _, steps = out
    gen = torch.Generator().manual_seed(0)
    w = [torch.randn(t.shape, generator=gen).to(H.dtype) for t in (dists, logits, gains, steps)]
    loss = (dists * w[0]).sum() + torch.where(torch.isfinite(logits), logits * w[1], 0.0).sum() \
        + (gains * w[2]).sum() + (steps * w[3]).sum()
    inputs = [H] + ([beta] if beta is not None else []) + list(objective.parameters())
    grads = torch.autograd.grad(loss, inputs)
    return [t.detach() for t in out], grads


@needs_kernel
@pytest.mark.parametrize(
    ("B", "N", "E", "K", "learnable", "modular"),
    [
        (6, 40, 128, 7, True, True),  # the benchmark's shape, in small
        (5, 7, 21, 9, True, True),  # E not a multiple of 16 (the kernel's tail path); K > N
        (4, 12, 5, 3, False, True),  # fixed weights (alpha = 1)
        (3, 9, 16, 4, True, False),  # no modular term
    ],
)
def test_kernel_equals_the_eager_layers_in_values_and_gradients(B, N, E, K, learnable, modular):
    """The kernel's six outputs and its gradients into the features, the modular term and the
    learnable weights equal the eager float32 layers' (autograd through them) to float32
    rounding, and both are as close to a float64 run of the eager layers: masked candidates,
    a row with none, rows that run out of candidates, exact zeros in H included."""
    H, beta, objective = _problem(B, N, E, seed=B * 100 + E, learnable=learnable, modular=modular)
    mask = torch.rand(B, N, generator=torch.Generator().manual_seed(1)) > 0.25
    mask[0] = False  # no candidate at all
    mask[1, :] = False
    mask[1, :2] = True  # two candidates for K layers
    tau = 4.0
    (kernel, kgrads), (eager, egrads) = (_run(H, beta, objective, mask, tau, K, kernel=k) for k in (True, False))
    (exact, xgrads) = _run(H.double(), None if beta is None else beta.double(), objective.double(), mask, tau, K,
                           kernel=False)
    for name, a, b, x in zip(FIELDS, kernel, eager, exact, strict=True):
        if not a.is_floating_point():
            assert torch.equal(a, b), name
            continue
        assert torch.equal(torch.isfinite(a), torch.isfinite(b)), name
        fin = torch.isfinite(b)
        torch.testing.assert_close(a[fin], b[fin], rtol=2e-5, atol=2e-5, msg=name)
        torch.testing.assert_close(a[fin].double(), x[fin], rtol=2e-5, atol=2e-5, msg=name)
    for a, b, x in zip(kgrads, egrads, xgrads, strict=True):
        scale = x.abs().max().item()
        assert (a.double() - x).abs().max().item() <= 1e-5 * scale + 1e-6
        assert (b.double() - x).abs().max().item() <= 1e-5 * scale + 1e-6
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)


@needs_kernel
def test_compiled_layer_uses_the_kernel_and_matches_eager():
    """GreedyLayer(compile=True) in train() mode on float32 goes through the kernel (not
    torch.compile) and selects and differentiates as the eager layer does."""
    H, beta, objective = _problem(4, 10, 32, seed=7)
    calls = []
    original = _kernels.soft_layers

    def spy(*args):
        out = original(*args)
        calls.append(out is not None)
        return out

    results = []
    for compiled in (False, True):
        layer = GreedyLayer(objective, k=5, tau=3.0, compile=compiled).train()
        feats = H.clone().requires_grad_(True)
        _kernels.soft_layers = spy
        try:
            out = layer(feats, modular=beta)
        finally:
            _kernels.soft_layers = original
        out.logits[:, 0].logsumexp(-1).sum().backward()
        results.append((out, feats.grad))
    assert calls == [True]
    (a, ga), (b, gb) = results
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.distributions, b.distributions, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


@needs_kernel
def test_kernel_declines_out_of_range_logits_and_other_problems():
    """A tau so small that g / tau overflows float32 is left to the general path (which
    handles it), as are float64, the straight-through relaxation and other concave
    functions: soft_greedy_select(compile=True) then equals the eager layers."""
    H, beta, objective = _problem(2, 6, 8, seed=3)
    mask = torch.ones(2, 6, dtype=torch.bool)
    assert _kernels.soft_layers(H, objective.weights(H), mask, beta, 1e-40, 3) is None
    assert _kernels.soft_layers(H.double(), None, mask, None, 2.0, 3) is None
    assert _kernels.soft_layers(H, objective.weights(H), mask, beta, 2.0, 3) is not None


@needs_kernel
@pytest.mark.parametrize("where", ["nan", "inf", "negative", "padding nan", "modular nan", "modular inf"])
def test_kernel_finds_bad_entries_and_the_checks_give_their_errors(where, monkeypatch):
    """soft_greedy_select(compile=True) leaves the entry checks to the kernel, which reads
    every entry (padding rows too): a NaN, inf or negative feature, or a NaN or inf modular
    term, makes the kernel decline and the checks raise the eager path's error; none of
    them runs torch.compile."""
    from dgn import greedy

    monkeypatch.setattr(greedy, "_soft_compiled", lambda: pytest.fail("torch.compile ran"))
    H, beta, objective = _problem(2, 6, 8, seed=4)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 5] = False
    value = {"nan": float("nan"), "inf": float("inf"), "negative": -1e-3, "padding nan": float("nan"),
             "modular nan": float("nan"), "modular inf": float("-inf")}[where]
    if where.startswith("modular"):
        beta[0, 3] = value
    else:
        H[(1, 5, 7) if where.startswith("padding") else (0, 2, 7)] = value
    assert _kernels.soft_layers(H, objective.weights(H), mask, beta, 2.0, 3) is None
    message = {
        "negative": r"^features must be nonnegative for a sum-of-concave objective, got minimum -0\.001$",
        "modular nan": r"^modular contains NaN or inf values$",
        "modular inf": r"^modular contains NaN or inf values$",
    }.get(where, r"^features contains NaN or inf values \(Tensor of shape \(2, 6, 8\) and dtype torch\.float32\)$")
    with pytest.raises(ValueError, match=message) as eager:
        soft_greedy_select(H, 3, objective, tau=2.0, mask=mask, modular=beta)
    with pytest.raises(ValueError) as compiled:
        soft_greedy_select(H, 3, objective, tau=2.0, mask=mask, modular=beta, compile=True)
    assert str(compiled.value) == str(eager.value)
    with pytest.raises(ValueError, match=f"^{re.escape(str(eager.value))}$"):  # k = 0 too
        soft_greedy_select(H, 0, objective, tau=2.0, mask=mask, modular=beta, compile=True)


def test_no_compiler_means_no_kernel(tmp_path):
    """Without a working C compiler the kernel is not built (nothing is left in the cache)
    and soft_layers returns None, so callers fall back to torch.compile."""
    script = textwrap.dedent("""
        import torch
        from dgn import _kernels
        assert _kernels._library() is None
        H = torch.rand(2, 5, 4)
        assert _kernels.soft_layers(H, None, torch.ones(2, 5, dtype=torch.bool), None, 2.0, 2) is None
    """)
    env = {**os.environ, "CC": "/bin/false", "DGN_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    assert list((tmp_path / "kernels").iterdir()) == []


def test_kernels_can_be_switched_off(tmp_path):
    """DGN_KERNELS=0 leaves the relaxed layers to torch.compile: nothing is built."""
    script = "from dgn import _kernels; assert not _kernels.available()"
    subprocess.run([sys.executable, "-c", script], check=True,
                   env={**os.environ, "DGN_KERNELS": "0", "DGN_CACHE_DIR": str(tmp_path)})
    assert not (tmp_path / "kernels").exists()


@needs_kernel
def test_kernel_builds_once_into_the_cache(tmp_path):
    """A fresh cache directory gets one built library (no temporary files left); a second
    process loads it instead of building again."""
    script = "from dgn import _kernels; assert _kernels.available()"
    env = {**os.environ, "DGN_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    built = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    assert len(built) == 1 and built[0].startswith("scmm_") and built[0].endswith(".so")
    first = (tmp_path / "kernels" / built[0]).stat()
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    again = (tmp_path / "kernels" / built[0]).stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert len(list((tmp_path / "kernels").iterdir())) == 1


_ALLOCATOR = textwrap.dedent("""
    import ctypes, importlib.util, sys
    # dgn/_memory.py alone, so nothing else (torch) has moved glibc's adaptive thresholds
    spec = importlib.util.spec_from_file_location("_memory", sys.argv[1])
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    print(memory.retain_freed_memory())
    class Info(ctypes.Structure):  # struct mallinfo2 (glibc 2.33+)
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 24 << 20  # a large activation; below MMAP_THRESHOLD, above glibc's default
    before = libc.mallinfo2()
    block = libc.malloc(size)
    held = libc.mallinfo2()
    libc.free(block)
    after = libc.mallinfo2()
    # mapped on its own (mmap); then the heap's free memory after the free (what startup left
    # free at the top of the heap varies, so the total, not the change, is compared)
    print(held.hblkhd - before.hblkhd >= size, after.fordblks >= size)
""")


def _allocator_state(retain: bool) -> list[str]:
    import dgn._memory

    env = {**os.environ, "DGN_RETAIN_MEMORY": "1" if retain else "0"}
    run = subprocess.run([sys.executable, "-c", _ALLOCATOR, dgn._memory.__file__], check=True,
                         capture_output=True, text=True, env=env)
    return run.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_retained_memory_keeps_freed_blocks_in_the_heap():
    """After retain_freed_memory() a block of a training step's size is taken from the heap
    and stays there when freed (the next step reuses its pages: no page faults, which
    benchmarks/train_overheads.py counts). With glibc's defaults (DGN_RETAIN_MEMORY=0) the
    same block is mapped on its own and handed back to the kernel when freed."""
    if os.environ.get("LD_PRELOAD"):
        pytest.skip("LD_PRELOAD set: malloc may not be glibc's")
    try:
        kept = _allocator_state(retain=True)
    except subprocess.CalledProcessError as error:
        if "mallinfo2" in error.stderr:
            pytest.skip("glibc older than 2.33 (no mallinfo2)")
        raise
    assert kept == ["True", "False", "True"]
    if "GLIBC_TUNABLES" in os.environ or any(k.startswith("MALLOC_") for k in os.environ):
        pytest.skip("malloc tuned from the environment: glibc's defaults unknown")
    assert _allocator_state(retain=False) == ["False", "True", "False"]


def test_soft_greedy_select_compile_keeps_its_contract_for_float32():
    """soft_greedy_select(compile=True) on float32 (kernel or not) returns what the eager
    layers return, unbatched input included."""
    H, beta, objective = _problem(1, 8, 12, seed=11)
    a = soft_greedy_select(H[0], 4, objective, tau=2.0, modular=beta[0], compile=True)
    b = soft_greedy_select(H[0], 4, objective, tau=2.0, modular=beta[0])
    assert a.indices.shape == (4,) and torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.distributions, b.distributions, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_kernel_splits_the_batch_over_threads_with_the_same_results():
    """With 2 OpenMP threads (the suite runs with 1) the batch is split between them; the
    outputs equal the 1-thread run's exactly and the gradients to rounding (the weights'
    gradient is summed per thread, then in thread order)."""
    H, beta, objective = _problem(9, 20, 40, seed=13)
    mask = torch.rand(9, 20, generator=torch.Generator().manual_seed(2)) > 0.2
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(_run(H, beta, objective, mask, 3.0, 6, kernel=True))
    finally:
        torch.set_num_threads(before)
    (one, g1), (two, g2) = runs
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@needs_kernel
def test_kernel_outputs_may_be_edited_in_place_and_second_derivatives_raise():
    """As with the eager layers, editing the outputs or the mask in place before backward
    is allowed (the kernel keeps its own copies); a second derivative through the kernel
    raises instead of silently dropping its part."""
    H, beta, objective = _problem(3, 6, 8, seed=17)
    mask = torch.ones(3, 6, dtype=torch.bool)
    feats = H.clone().requires_grad_(True)
    out = soft_greedy_select(feats, 3, objective, tau=2.0, mask=mask, modular=beta, compile=True)
    loss = out.logits[:, 0].logsumexp(-1).sum() + out.gains.sum()
    out.distributions.mul_(2.0)
    out.indices.clamp_(min=0)
    mask[0, 0] = False
    loss.backward()
    assert feats.grad is not None and torch.isfinite(feats.grad).all()
    feats2 = H.clone().requires_grad_(True)
    again = soft_greedy_select(feats2, 3, objective, tau=2.0, modular=beta, compile=True)
    with pytest.raises(RuntimeError, match="no second derivative; use compile=False"):
        torch.autograd.grad(again.gains.sum(), feats2, create_graph=True)


@needs_kernel
def test_kernel_gives_a_zero_row_exactly_zero_gain():
    """A candidate whose features are all zero adds nothing to the coverage: its gain is
    exactly 0 at every layer (as in the eager layers), not a rounding residue."""
    H, _, objective = _problem(2, 7, 37, seed=19, modular=False)
    H[:, 3] = 0.0
    out = _kernels.soft_layers(H, objective.weights(H), torch.ones(2, 7, dtype=torch.bool), None, 2.0, 4)
    assert out is not None
    assert torch.equal(out[5][:, :, 3], torch.zeros(2, 4))


# ---------------------------------------------------------------- the fused encoder


def _relu_backward(G, Y, rows=True, transposed=True, in_place=False, lib=None, head=None):
    lib = lib or _kernels._library()
    R, C = G.shape
    G = G.clone()
    out = G if in_place else (torch.full_like(G, float("nan")) if rows else None)
    outT = torch.full((C, R), float("nan")) if transposed else None
    db = torch.full((C,), float("nan"))
    u, w = head if head is not None else (None, None)
    dw = None if head is None else torch.full((C,), float("nan"))
    ptr = _kernels._ptr
    assert lib.relu_backward(R, C, G.data_ptr(), Y.data_ptr(), ptr(u), ptr(w), ptr(out), ptr(outT), db.data_ptr(),
                             ptr(dw)) == 0
    return out, outT, db, dw


@needs_kernel
@pytest.mark.parametrize(("R", "C"), [(64, 48), (2560, 300), (37, 21), (16, 16), (5, 3), (33, 130)])
def test_relu_backward_kernel_masks_transposes_and_sums(R, C):
    """The C pass of a ReLU's backward against torch: the masked gradient exactly, in rows
    and transposed (whole 16 x 16 tiles, and the edges outside them), the bias gradient
    against a float64 sum; written in place over the incoming gradient too."""
    gen = torch.Generator().manual_seed(R * 1000 + C)
    G = torch.randn(R, C, generator=gen)
    Y = torch.relu(torch.randn(R, C, generator=gen))
    Y[: R // 2, : C // 3] = 0.0
    want = torch.where(Y > 0, G, torch.zeros(()))
    for rows, transposed, in_place in ((True, True, False), (True, False, False), (False, True, False),
                                       (True, True, True), (False, False, False)):
        out, outT, db, _ = _relu_backward(G, Y, rows, transposed, in_place)
        if rows or in_place:
            assert torch.equal(out, want)
        if transposed:
            assert torch.equal(outT, want.t())
        # float32 sums of R terms: error to about R * 1e-7 of the terms' size
        torch.testing.assert_close(db.double(), want.double().sum(0), rtol=1e-5, atol=R * 2e-7)
    # with a head z = Y w + b: its gradient u adds u w^T before the mask; dw = Y^T u
    u, w = torch.randn(R, generator=gen), torch.randn(C, generator=gen)
    want = torch.where(Y > 0, G.double() + torch.outer(u.double(), w.double()), torch.zeros((), dtype=torch.float64))
    out, outT, db, dw = _relu_backward(G, Y, head=(u, w))
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(outT, out.t())
    torch.testing.assert_close(db.double(), want.sum(0), rtol=1e-5, atol=R * 4e-7)
    torch.testing.assert_close(dw.double(), Y.double().t() @ u.double(), rtol=1e-5, atol=R * 4e-7)


@needs_kernel
def test_relu_backward_kernel_without_avx512_and_with_two_threads(tmp_path):
    """The portable build (GCC vector types, no AVX-512 transposes) gives the same masked
    and transposed gradient; with 2 OpenMP threads the rows are split and the result is the
    same (the bias gradient to rounding)."""
    import ctypes
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    so = tmp_path / "relu_plain.so"
    subprocess.run([cc, "-O2", "-fPIC", "-shared", "-o", str(so), str(_kernels._SOURCES[1])], check=True)
    plain = ctypes.CDLL(str(so))
    plain.relu_backward.restype = ctypes.c_int64
    plain.relu_backward.argtypes = [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 8
    gen = torch.Generator().manual_seed(11)
    G, Y = torch.randn(83, 70, generator=gen), torch.relu(torch.randn(83, 70, generator=gen))
    want = torch.where(Y > 0, G, torch.zeros(()))
    out, outT, db, _ = _relu_backward(G, Y, lib=plain)
    assert torch.equal(out, want) and torch.equal(outT, want.t())
    torch.testing.assert_close(db, want.sum(0), rtol=1e-5, atol=1e-5)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        out2, outT2, db2, _ = _relu_backward(G, Y)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out2, want) and torch.equal(outT2, want.t())
    torch.testing.assert_close(db2, want.sum(0), rtol=1e-5, atol=1e-5)


def _encoder(deep, F, Hd, E, seed, dropout=0.0):
    from dgn.encoder import DeepEncoder, Encoder

    torch.manual_seed(seed)
    return (DeepEncoder if deep else Encoder)(F, Hd, E, dropout)


def _encode_grads(enc, x, mask, fused, wrt_x):
    """The encoder's output and the gradients of a weighted sum of it."""
    enc.fused = fused
    x = x.clone().requires_grad_(wrt_x)
    H = enc(x, mask)
    w = torch.randn(H.shape, generator=torch.Generator().manual_seed(7)).to(H.dtype)
    inputs = [p for p in enc.parameters() if p.requires_grad] + ([x] if wrt_x else [])
    return H.detach(), torch.autograd.grad((H * w).sum(), inputs)


@needs_kernel
@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize(
    ("deep", "B", "N", "F", "Hd", "E", "wrt_x"),
    [
        (False, 4, 40, 300, 300, 128, False),  # the benchmark's widths
        (False, 3, 7, 21, 37, 19, True),  # widths and rows (21) off the 16 x 16 tiles
        (True, 5, 9, 33, 48, 16, True),  # three layers
    ],
)
def test_fused_encoder_equals_the_layers(deep, B, N, F, Hd, E, wrt_x, onednn, monkeypatch):
    """Encoder.fused gives nn.Linear + nn.ReLU's outputs and gradients (weights, biases and,
    when asked, the input) to float rounding, padding rows zeroed, through oneDNN and
    through torch's own products; both against a float64 run of the plain layers."""
    if not onednn:
        monkeypatch.setattr(_kernels, "_onednn", lambda: None)
    elif _kernels._onednn() is None:
        pytest.skip("this torch has no oneDNN linear layer")
    enc = _encoder(deep, F, Hd, E, seed=B + N)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(B, N, F, generator=gen)
    mask = torch.rand(B, N, generator=gen) > 0.25
    mask[0] = False  # a problem with no candidate
    calls = []
    monkeypatch.setattr(_kernels._ReluMLP, "apply", _counted(_kernels._ReluMLP.apply, calls))
    H1, g1 = _encode_grads(enc, x, mask, True, wrt_x)
    assert len(calls) == 1, "the fused path did not run"
    H0, g0 = _encode_grads(enc, x, mask, False, wrt_x)
    assert len(calls) == 1
    assert torch.equal(H1[~mask], torch.zeros_like(H1[~mask]))
    torch.testing.assert_close(H1, H0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g0, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    H64, g64 = _encode_grads(enc.double(), x.double(), mask, False, wrt_x)
    torch.testing.assert_close(H1.double(), H64, rtol=1e-4, atol=1e-4)
    for a, b in zip(g1, g64, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-3)


def _counted(fn, calls):
    def wrapper(*args):
        calls.append(1)
        return fn(*args)
    return wrapper


@needs_kernel
def test_fused_encoder_leaves_frozen_layers_and_other_cases_to_the_plain_path(monkeypatch):
    """Frozen layers get no gradient and the others theirs; float64, dropout in training
    mode and empty input run the plain layers (the same bits); without a mask nothing is
    zeroed."""
    enc = _encoder(False, 12, 20, 8, seed=0)
    x = torch.randn(3, 5, 12)
    enc.net[0].weight.requires_grad_(False)
    enc.net[0].bias.requires_grad_(False)
    H1, g1 = _encode_grads(enc, x, None, True, False)
    H0, g0 = _encode_grads(enc, x, None, False, False)
    assert len(g1) == 2
    for a, b in zip(g1, g0, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(H1, H0)

    calls = []
    monkeypatch.setattr(_kernels._ReluMLP, "apply", _counted(_kernels._ReluMLP.apply, calls))
    dropped = _encoder(False, 12, 20, 8, seed=0, dropout=0.5).train()
    dropped.fused = True
    torch.manual_seed(5)
    a = dropped(x)
    dropped.fused = False
    torch.manual_seed(5)
    assert torch.equal(a, dropped(x)) and not calls
    dropped.eval().fused = True
    dropped(x)  # eval mode: no dropout, so the fused path
    assert len(calls) == 1
    enc64 = _encoder(False, 12, 20, 8, seed=0).double()
    enc64.fused = True
    assert torch.equal(enc64(x.double()), _encoder(False, 12, 20, 8, seed=0).double()(x.double()))
    assert enc64(torch.empty(0, 12, dtype=torch.float64)).shape == (0, 8)
    assert enc.eval()(torch.empty(0, 12)).shape == (0, 8) and len(calls) == 1
    with pytest.raises(RuntimeError, match="must match"):  # the plain layers' broadcasting error
        enc(x, torch.ones(3, 4, dtype=torch.bool))


@needs_kernel
def test_fused_encoder_output_edits_and_second_derivatives_raise():
    """Editing the output in place before backward is refused (autograd's check on saved
    tensors), as is a second derivative."""
    enc = _encoder(False, 6, 10, 4, seed=1)
    enc.fused = True
    x = torch.randn(2, 3, 6, requires_grad=True)
    H = enc(x)
    H.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        H.sum().backward()
    H = enc(x)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(H.pow(2).sum(), x, create_graph=True)


@needs_kernel
def test_train_compile_fuses_the_encoder_and_restores_it(monkeypatch):
    """TrainConfig.compile (train_model's _compiled_layers) runs the DGN's encoder fused and
    its greedy layers compiled while training, then gives the model its own settings back;
    an encoder scorer gets the fused encoder too."""
    from dgn.baselines import EncoderScorer
    from dgn.model import DGN, DGNConfig
    from dgn.train import _compiled_layers

    calls = []
    monkeypatch.setattr(_kernels._ReluMLP, "apply", _counted(_kernels._ReluMLP.apply, calls))
    model = DGN(DGNConfig(in_features=5, hidden_features=8, encoded_features=4, steps=2)).train()
    x = torch.randn(3, 6, 5)
    with _compiled_layers(model, True):
        assert model.encoder.fused and model.greedy.compile
        model(x).logits.sum().backward()
    assert len(calls) == 1 and model.encoder.fused is False and model.greedy.compile is False
    with _compiled_layers(model, False):
        model(x)
    assert len(calls) == 1
    scorer = EncoderScorer(5, 8, 4)
    with _compiled_layers(scorer, True):
        scorer(x)
    assert len(calls) == 2 and scorer.encoder.fused is False


def _dgn_grads(model, x, mask, fused):
    """A DGN's training outputs and the gradients of the layer-wise loss into every parameter."""
    from dgn.losses import layerwise_cross_entropy

    model.encoder.fused = fused
    model.zero_grad(set_to_none=True)
    out = model(x, mask)
    gold = torch.zeros(mask.shape)
    gold[:, 1] = 1.0
    layerwise_cross_entropy(out.logits, gold).backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@needs_kernel
@pytest.mark.parametrize(("modular", "skip", "deep"), [(True, False, False), (True, True, True), (False, False, False)])
def test_fused_dgn_encoder_and_modular_term_equal_the_layers(modular, skip, deep):
    """A DGN whose encoder is fused computes its modular term in the encoder's passes; its
    outputs and every parameter's gradient equal the plain layers' to float rounding,
    with padding."""
    from dgn.model import DGN, DGNConfig

    torch.manual_seed(4)
    model = DGN(DGNConfig(in_features=20, hidden_features=36, encoded_features=18, steps=3, modular=modular,
                          modular_skip=skip, deep=deep)).train()
    if skip:
        torch.nn.init.normal_(model.modular_skip.weight)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(5, 11, 20, generator=gen)
    mask = torch.rand(5, 11, generator=gen) > 0.3
    mask[:, :2] = True
    calls = []
    apply = _kernels._ReluMLP.apply
    _kernels._ReluMLP.apply = _counted(apply, calls)
    try:
        fused_out, fused_grads = _dgn_grads(model, x, mask, True)
    finally:
        _kernels._ReluMLP.apply = apply
    assert calls
    plain_out, plain_grads = _dgn_grads(model, x, mask, False)
    torch.testing.assert_close(fused_out.encoded, plain_out.encoded, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused_out.logits, plain_out.logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused_out.indices, plain_out.indices)
    assert fused_grads.keys() == plain_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(fused_grads[name], plain_grads[name], rtol=1e-4, atol=1e-5, msg=name)


@needs_kernel
def test_fused_dgn_with_a_frozen_encoder_still_trains_its_modular_term():
    """With the encoder frozen no ReLU pass runs; the modular layer's gradients still come
    (its weight's from H^T u directly) and equal the plain layers'."""
    from dgn.model import DGN, DGNConfig

    torch.manual_seed(2)
    model = DGN(DGNConfig(in_features=9, hidden_features=12, encoded_features=7, steps=2)).train()
    model.encoder.requires_grad_(False)
    x, mask = torch.randn(3, 6, 9), torch.ones(3, 6, dtype=torch.bool)
    _, fused = _dgn_grads(model, x, mask, True)
    _, plain = _dgn_grads(model, x, mask, False)
    assert set(fused) == set(plain) and "modular.weight" in fused and not any(k.startswith("encoder") for k in fused)
    for name in plain:
        torch.testing.assert_close(fused[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------- the layer-wise loss


def _loss_case(B, K, N, seed):
    """Logits as the relaxed layers give them (-inf where picked before or padding), some
    layers with no candidate left, gold also on padding and on ties."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K, N, generator=gen)
    logits[:, :, N - 1] = logits[:, :, 0]  # ties: the first index wins
    pad = torch.rand(B, N, generator=gen) < 0.2
    logits = logits.masked_fill(pad.unsqueeze(1), float("-inf"))
    picks = logits.argmax(-1)
    for k in range(1, K):
        logits[torch.arange(B).unsqueeze(1), k, picks[:, :k]] = float("-inf")
    logits[0, K - 1] = float("-inf")  # a layer with nothing left
    gold = torch.rand(B, N, generator=gen) < 0.25
    return logits, gold


@needs_kernel
@pytest.mark.parametrize(("B", "K", "N"), [(64, 7, 40), (5, 3, 9), (3, 9, 4), (2, 1, 1)])
@pytest.mark.parametrize("given_picks", [False, True])
def test_loss_kernel_equals_the_composition(B, K, N, given_picks):
    """layerwise_cross_entropy through the C kernel (float32 on the CPU) against its
    PyTorch composition: each problem's loss (+inf where gold is unavailable) and the
    gradient, with the default argmax picks and with given ones; float64 takes the
    composition."""
    from dgn import losses

    logits, gold = _loss_case(B, K, N, seed=B * K * N)
    gen = torch.Generator().manual_seed(1)
    picks = torch.randint(-1, N, (B, K), generator=gen) if given_picks else None
    fused = logits.clone().requires_grad_(True)
    per = losses.layerwise_cross_entropy(fused, gold, picks, reduction="none")
    assert per.grad_fn is not None and "LayerwiseCE" in type(per.grad_fn).__name__
    plain = logits.double().requires_grad_(True)
    want = losses._layerwise_terms(plain, gold, losses._picks(plain, picks, True))
    assert torch.equal(torch.isinf(per), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(per[finite].double(), want[finite], rtol=1e-5, atol=1e-5)
    weights = torch.rand(B, generator=gen)
    (per * weights).sum().backward()
    (want * weights.double()).sum().backward()
    torch.testing.assert_close(fused.grad.double(), plain.grad, rtol=1e-5, atol=1e-6)
    in64 = losses.layerwise_cross_entropy(logits.double().requires_grad_(True), gold, picks, reduction="none")
    assert "LayerwiseCE" not in type(in64.grad_fn).__name__
    torch.testing.assert_close(in64, want.detach())


@needs_kernel
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loss_kernel_reductions_give_the_composition_gradient(reduction):
    """Through a reduction the incoming gradient is an expanded view (not contiguous): the
    kernel's gradient still equals the composition's."""
    from dgn import losses

    logits, gold = _loss_case(33, 5, 17, seed=9)
    for _ in range(3):  # memory freed between calls must not be read
        a = logits.clone().requires_grad_(True)
        losses.layerwise_cross_entropy(a, gold, reduction=reduction).backward()
        b = logits.double().requires_grad_(True)
        losses._reduce(losses._layerwise_terms(b, gold, losses._picks(b, None, True)), reduction).backward()
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_loss_kernel_second_derivative_and_switch_off():
    """A second derivative through the kernel's loss is the composition's; DGN_KERNELS=0
    leaves the loss to the composition."""
    from dgn import losses

    logits, gold = _loss_case(4, 3, 6, seed=3)
    a = logits.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(losses.layerwise_cross_entropy(a, gold), a, create_graph=True)
    (gg,) = torch.autograd.grad(torch.where(torch.isfinite(logits), g, 0.0).pow(2).sum(), a)
    b = logits.double().requires_grad_(True)
    (h,) = torch.autograd.grad(losses.layerwise_cross_entropy(b, gold), b, create_graph=True)
    (hh,) = torch.autograd.grad(torch.where(torch.isfinite(b), h, 0.0).pow(2).sum(), b)
    torch.testing.assert_close(g.double(), h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gg.double(), hh, rtol=1e-4, atol=1e-6)
    script = textwrap.dedent("""
        import torch
        from dgn.losses import layerwise_cross_entropy
        x = torch.randn(2, 3, 5, requires_grad=True)
        loss = layerwise_cross_entropy(x, torch.ones(2, 5, dtype=torch.bool))
        assert "LayerwiseCE" not in type(loss.grad_fn).__name__, loss.grad_fn
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ, "DGN_KERNELS": "0"})


@needs_kernel
def test_fused_encoder_leaves_nan_hooks_and_changed_layers_to_the_plain_path(monkeypatch):
    """NaN in the weights or the input (oneDNN's fused ReLU would make it 0), hooks on any
    layer (pruning), layers other than the built Linear/ReLU ones, a mask that is not bool
    of the input's shape, all run the plain layers, with their results; an encoder of the
    user's own with forward(x) still works inside a DGN."""
    import torch.nn.utils.prune as prune

    from dgn.model import DGN, DGNConfig

    calls = []
    monkeypatch.setattr(_kernels._ReluMLP, "apply", _counted(_kernels._ReluMLP.apply, calls))
    x = torch.randn(2, 5, 6)

    def same(enc, *args, exact=True):
        enc.fused = True
        fused = enc(*args)
        enc.fused = False
        tol = 0 if exact else 1e-5  # the fused path rounds differently
        torch.testing.assert_close(fused, enc(*args), equal_nan=True, rtol=tol, atol=tol)
        return fused

    enc = _encoder(False, 6, 8, 4, seed=0)
    with torch.no_grad():
        enc.net[0].weight[0, 0] = float("nan")
    assert torch.isnan(same(enc, x)).any() and not calls
    enc = _encoder(False, 6, 8, 4, seed=0)
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    assert torch.isnan(same(enc, bad)).any() and not calls
    prune.l1_unstructured(enc.net[0], "weight", amount=0.5)  # a forward pre-hook
    same(enc, x)
    assert not calls
    enc = _encoder(False, 6, 8, 4, seed=0)
    enc.net[1] = torch.nn.Tanh()
    same(enc, x)
    assert not calls
    enc = _encoder(False, 6, 8, 4, seed=0)
    same(enc, x, torch.tensor([1.0, 0.5, 0.0, 1.0, 1.0]))  # a float mask, broadcast over problems
    same(enc, x, torch.tensor([True, False, True, True, True]))  # a bool mask of another shape
    assert not calls
    same(enc, x, torch.rand(2, 5) > 0.5, exact=False)
    assert len(calls) == 1

    class Own(torch.nn.Module):
        fused = True

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 4)

        def forward(self, features):
            return torch.relu(self.lin(features))

    model = DGN(DGNConfig(in_features=6, hidden_features=8, encoded_features=4, steps=2))
    model.encoder = Own()
    out = model.train()(x, torch.ones(2, 5, dtype=torch.bool))
    assert out.logits.shape == (2, 2, 5) and len(calls) == 1


@needs_kernel
def test_sum_squares_equals_a_float64_sum_and_flags_non_finite_entries():
    """The C pass's sum of squares (gradient norms, the fused encoder's weight check)
    against a float64 sum over lengths off its 16-float vectors and 4096-float blocks; inf
    where an entry is inf or too large to square in float, NaN where one is NaN; None for
    tensors it does not read (non-contiguous, float64)."""
    gen = torch.Generator().manual_seed(3)
    tensors = [torch.randn(n, generator=gen) * s for n, s in ((1, 3.0), (15, 1.0), (4096, 0.1), (9000, 2.0),
                                                              (300 * 300, 0.05), (0, 1.0))]
    want = sum(float((t.double() ** 2).sum()) for t in tensors)
    assert _kernels.sum_squares(tensors) == pytest.approx(want, rel=1e-6)
    assert _kernels.sum_squares([]) == 0.0
    for bad, expect in ((float("inf"), math.inf), (-3e19, math.inf), (float("nan"), None)):
        t = tensors[3].clone()
        t[4321] = bad
        got = _kernels.sum_squares([tensors[0], t])
        assert (math.isnan(got) if expect is None else got == expect)
    assert _kernels.sum_squares([torch.randn(4, 5).t()]) is None
    assert _kernels.sum_squares([torch.randn(4, dtype=torch.float64)]) is None


@needs_kernel
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_loss_kernel_finds_nan_and_plus_inf_logits(value):
    """The layer-wise loss leaves the NaN/+inf check of float32 logits to its kernel, which
    declines on such a logit (in any layer or problem); the check then raises the error
    of the float64 path. -inf (an unavailable candidate) is no error."""
    from dgn.losses import _layerwise_terms, layerwise_cross_entropy

    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 6, generator=gen)
    logits[:, 1:, 0] = float("-inf")
    gold = torch.rand(3, 6, generator=gen) > 0.5
    assert _kernels.layerwise_ce(logits, gold, None, _layerwise_terms) is not None
    logits[2, 3, 5] = value
    assert _kernels.layerwise_ce(logits, gold, None, _layerwise_terms) is None
    with pytest.raises(ValueError) as in_double:
        layerwise_cross_entropy(logits.double(), gold)
    with pytest.raises(ValueError) as in_float:
        layerwise_cross_entropy(logits, gold)
    assert str(in_float.value) == str(in_double.value) == "states contain NaN or +inf values"


@needs_kernel
def test_errors_keep_their_order_where_the_kernels_check_the_entries():
    """With the entry checks left to the kernels, a bad entry still gives its error before
    the later checks' (a bad k, mask, tau or relaxation; indices out of range for the
    loss), as without the kernel; a float64 modular term that overflows float32 is an
    error on either path."""
    from dgn.losses import layerwise_cross_entropy

    H, beta, objective = _problem(2, 6, 8, seed=6)
    H[0, 1, 2] = float("nan")
    good = dict(k=3, tau=2.0, mask=torch.ones(2, 6, dtype=torch.bool), relaxation="soft")
    for change in ({"tau": -1.0}, {"k": -1}, {"mask": torch.ones(3, 6, dtype=torch.bool)}, {}):
        args = {**good, **change}
        messages = []
        for compile in (False, True):
            with pytest.raises(ValueError) as error:
                soft_greedy_select(H, args["k"], objective, tau=args["tau"], mask=args["mask"], modular=beta,
                                   relaxation=args["relaxation"], compile=compile)
            messages.append(str(error.value))
        assert messages[0] == messages[1] and "NaN or inf" in messages[0]
    wide = beta.double()
    wide[1, 1] = 1e300  # finite in float64, inf in the features' float32
    for compile in (False, True):
        with pytest.raises(ValueError, match="modular contains NaN or inf"):
            soft_greedy_select(H.abs().nan_to_num(), 3, objective, tau=2.0, modular=wide, compile=compile)
    logits = torch.randn(2, 3, 4)
    logits[1, 2, 0] = float("nan")
    gold = torch.ones(2, 4, dtype=torch.bool)
    bad_picks = torch.full((2, 3), 7)
    for states in (logits, logits.double()):
        with pytest.raises(ValueError, match="NaN or \\+inf"):
            layerwise_cross_entropy(states, gold, bad_picks)
