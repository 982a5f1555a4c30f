"""DGN training throughput, the dense layers' useful FLOP rate against a matmul peak timed in
the same process, and where a training step's time goes.

Shape: ``DGNConfig(in_features=300, encoded_features=128, steps=7, tau=4)`` (hidden 300),
batches of 64 problems of N = 40 candidates, Adam, the layer-wise loss. Random features
and one random gold sentence a problem (speed does not depend on the values).

* Peak: the median FLOP rate of a float32 matrix product at 2048 x 2048 (and at the
  encoder's own shapes), timed first, through ``torch.mm`` (MKL in PyTorch's x86 wheels) and
  through oneDNN's linear layer (which the fused encoder uses), the faster of the two: on
  an AMD EPYC, oneDNN's runs about 15% faster than MKL's.
* Useful FLOPs: the encoder's two linear layers and the modular term's linear layer,
  forward (``2 m n k`` a matmul) and backward: every layer's weight gradient (``2 m n k``)
  and the input gradients of the second layer and the modular term (``2 m n k``); the
  first layer's input is the data, whose gradient autograd does not compute. That is
  ``4 F·H + 6 (H·E + E)`` per candidate per step. The greedy layers' elementwise work
  is not counted as useful FLOPs.
* The step is :func:`dgn.train.train_model`'s: zero the gradients, forward, loss,
  backward, clip the gradient norm at 5 (:func:`dgn.train.clip_gradients`), Adam (:func:`dgn.train.make_optimizer`: fused
  when compiled, as ``dgn train --compile`` runs it). As ``train_model`` does, the script
  first keeps freed memory in the process (:func:`dgn._memory.retain_freed_memory`);
  ``--no-retain-memory`` leaves glibc's malloc as it is, to show what that costs (page
  faults a step are printed either way).
* Compiled, as ``dgn train --compile`` runs it: ``Encoder.fused = True`` runs the encoder's
  linear layers with their ReLUs through oneDNN and each ReLU's backward in one C pass,
  the modular term riding along (:func:`dgn._kernels.relu_mlp`), and
  ``GreedyLayer.compile = True`` runs this model's relaxed layers (``SCMM("sqrt")``,
  ``soft``) in the hand-written kernel of :mod:`dgn._kernels` where it builds, else
  through ``torch.compile``; the line under the heading says which.
* A shared machine's speed drifts by 10 to 20% over a minute, so the peak is also timed
  right before and right after each block of training steps and the share against their
  mean reported (the median over blocks), and once more after the runs.
* Throughput: claims per second over ``--steps`` steps after warm-up, median of
  ``--repeats`` runs; the phase profile times encoder forward, greedy layers (the rest of
  the forward pass), loss, backward and the optimizer step separately, synchronously.

    python benchmarks/train_speed.py
    python benchmarks/train_speed.py --no-retain-memory
    python benchmarks/train_speed.py --compile on --profile
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any

import torch

_OPERANDS: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def shaped_peak(m: int, k: int, n: int, repeats: int = 21, which: str = "best") -> float:
    """The median float32 FLOP rate of an ``(m, k)`` by ``(k, n)`` matrix product: through
    ``torch.mm`` (``which="mm"``), through oneDNN's linear layer (``"onednn"``, the path of
    the fused encoder; 0 where torch lacks it), or the faster of the two (``"best"``).

    Operands and result are allocated once and kept: freeing blocks this large would raise
    glibc malloc's own thresholds and so change what ``--no-retain-memory`` measures."""
    from dgn import _kernels

    if which == "best":
        return max(shaped_peak(m, k, n, repeats, "mm"), shaped_peak(m, k, n, repeats, "onednn"))
    if (m, k, n) not in _OPERANDS:
        _OPERANDS[m, k, n] = (torch.randn(m, k), torch.randn(k, n), torch.empty(m, n))
    a, b, out = _OPERANDS[m, k, n]
    onednn = _kernels._onednn()
    if which == "onednn" and onednn is None:
        return 0.0
    product = (lambda: torch.mm(a, b, out=out)) if which == "mm" else (lambda: onednn(a, b.t(), None, "none", [], ""))
    product()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        rates.append(2 * m * k * n / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    from dgn.model import DGNConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--steps", type=int, default=30, help="training steps per timed run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compile", choices=("off", "on", "both"), default="both",
                        help="the plain layers, the compiled ones (GreedyLayer.compile and Encoder.fused, as "
                             "dgn train --compile), or both in turn")
    parser.add_argument("--no-retain-memory", action="store_true",
                        help="leave glibc malloc's thresholds alone (train_model raises them)")
    parser.add_argument("--profile", action="store_true",
                        help="also print torch.profiler's table of operators over 20 steps")
    args = parser.parse_args()
    from dgn._memory import retain_freed_memory

    retained = False if args.no_retain_memory else retain_freed_memory()
    B, N = args.batch, args.candidates
    config = DGNConfig(in_features=300, hidden_features=300, encoded_features=128, steps=7, tau=4.0)
    F, Hd, E = config.in_features, config.hidden_features, config.encoded_features

    mm_peak, onednn_peak = (shaped_peak(2048, 2048, 2048, repeats=7, which=w) for w in ("mm", "onednn"))
    peak = max(mm_peak, onednn_peak)
    rows = B * N
    layer_peak = statistics.fmean([shaped_peak(rows, F, Hd), shaped_peak(rows, Hd, E)])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; freed memory "
          f"{'kept in the process' if retained else 'returned to the system (glibc default)'}")
    print(f"float32 matmul at 2048^3: torch.mm {mm_peak / 1e9:.1f} GFLOP/s, oneDNN "
          + (f"{onednn_peak / 1e9:.1f} GFLOP/s" if onednn_peak else "not in this torch")
          + f"; the peak is the faster: {peak / 1e9:.1f} GFLOP/s")
    print(f"peak at the encoder's shapes ({rows}x{F}x{Hd}, {rows}x{Hd}x{E}), the faster of the two: "
          f"{layer_peak / 1e9:.1f} GFLOP/s")

    from dgn import _kernels

    for compiled in {"off": (False,), "on": (True,), "both": (False, True)}[args.compile]:
        print(f"\n## {'compiled (GreedyLayer.compile, Encoder.fused)' if compiled else 'eager (plain layers)'}")
        if compiled:
            print("relaxed layers: " + ("the hand-written kernel (dgn._kernels)" if _kernels.available()
                                        else "torch.compile (no kernel on this machine)"))
            print("encoder: " + ("fused (" + ("oneDNN products" if _kernels._onednn() else "torch.mm")
                                 + ", the C pass for the ReLUs' backward)" if _kernels.available()
                                 else "plain layers (no kernel on this machine)"))
        run(config, B, N, args, peak, layer_peak, compiled)
    after = shaped_peak(2048, 2048, 2048, repeats=7)  # the faster of torch.mm and oneDNN
    print(f"\nfloat32 matmul peak timed again after the runs: {after / 1e9:.1f} GFLOP/s "
          f"({100 * after / peak:.0f}% of the first)")


def run(config: Any, B: int, N: int, args: argparse.Namespace, peak: float, layer_peak: float, compiled: bool) -> None:
    from dgn.losses import layerwise_cross_entropy
    from dgn.model import DGN
    from dgn.train import TrainConfig, clip_gradients, make_optimizer

    F, Hd, E = config.in_features, config.hidden_features, config.encoded_features
    torch.manual_seed(0)
    model = DGN(config).train()
    model.greedy.compile = compiled
    model.encoder.fused = compiled  # as train_model sets both under TrainConfig.compile
    optimizer = make_optimizer(model, TrainConfig(lr=1e-3, compile=compiled))
    x = torch.randn(B, N, F)
    mask = torch.ones(B, N, dtype=torch.bool)
    gold = torch.zeros(B, N)
    gold[torch.arange(B), torch.randint(N, (B,))] = 1.0

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = model(x, mask)
        loss = layerwise_cross_entropy(out.logits, gold)
        loss.backward()
        clip_gradients(model.parameters(), 5.0)
        optimizer.step()

    for _ in range(5):  # warm-up (and, compiled, the compilation)
        step()
    useful = (4 * F * Hd + 6 * (Hd * E + E)) * N  # FLOPs per claim per step
    faults, rates, shares = 0, [], []
    for _ in range(args.repeats):
        before = shaped_peak(2048, 2048, 2048, repeats=3)  # the peak right before this block
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.steps * B / (time.perf_counter() - start))
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
        after = shaped_peak(2048, 2048, 2048, repeats=3)  # and right after it
        shares.append(rates[-1] * useful / ((before + after) / 2))
    claims_per_s = statistics.median(rates)
    rate = claims_per_s * useful
    print(f"training: {claims_per_s:,.0f} claims/s (median of {args.repeats} x {args.steps} steps of {B} claims, "
          f"N = {N}); {faults / (args.repeats * args.steps):,.0f} page faults a step")
    print(f"useful dense FLOPs: {rate / 1e9:.1f} GFLOP/s = {100 * rate / peak:.0f}% of the 2048^3 peak timed first, "
          f"{100 * rate / layer_peak:.0f}% of the peak at the encoder's shapes; "
          f"{100 * statistics.median(shares):.0f}% of the 2048^3 peak timed around each block (median)")

    if args.profile:
        from torch.profiler import profile

        with profile() as prof:
            for _ in range(20):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))

    # where the time goes
    phases = {"encoder + modular term forward": [], "greedy layers forward": [], "loss": [], "backward": [],
              "clip + optimizer": []}
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        X, valid = model._inputs(x, mask)
        H, beta = model._encode_and_score(X, valid)  # DGN.forward's first half
        t1 = time.perf_counter()
        out = model.greedy(H, valid, beta, config.steps, tau=config.tau)
        t2 = time.perf_counter()
        loss = layerwise_cross_entropy(out.logits, gold)
        t3 = time.perf_counter()
        loss.backward()
        t4 = time.perf_counter()
        clip_gradients(model.parameters(), 5.0)
        optimizer.step()
        t5 = time.perf_counter()
        for name, (a, b) in zip(phases, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)), strict=True):
            phases[name].append(b - a)
    total = sum(statistics.median(v) for v in phases.values())
    print("\n| phase | ms per step (median) | share |\n|---|---:|---:|")
    for name, values in phases.items():
        ms = 1000 * statistics.median(values)
        print(f"| {name} | {ms:.2f} | {100 * ms / (1000 * total):.0f}% |")


if __name__ == "__main__":
    main()
