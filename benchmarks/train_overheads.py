"""The costs around a DGN training step that ``docs/benchmarks.md`` (Training speed) cites.

* ``faults``: what a page fault costs here: filling a fresh 64 MiB tensor (every page
  faulted in) against filling it again (no faults), per fault.
* ``memory``: 600 training steps of varying shapes (N from 20 to 49, the relaxed layers
  compiled, as ``dgn train --compile``) in a child process with freed memory kept
  (``dgn._memory.retain_freed_memory``, what ``train_model`` does) and in one without
  (``DGN_RETAIN_MEMORY=0``): resident and peak memory every 150 steps, page faults a step.
* ``loss``: ``layerwise_cross_entropy`` forward and backward at the benchmark shape (64
  problems, 7 layers, 40 candidates), against the former implementation (its NaN check
  and picked-before mask), median of 300 calls each, interleaved.
* ``products``: the encoder's five matrix products at the benchmark shape (2,560 rows,
  300 -> 300 -> 128), each through ``torch.mm`` with the operands autograd gives it and
  through oneDNN as the fused encoder calls it (weight gradients from the transposed
  operand the ReLU pass writes), median of 30 each, interleaved, operands in cache.
* ``encoder``: whole training steps as ``dgn train --compile`` runs them (benchmark shape,
  the relaxed layers in the kernel, fused Adam) with the encoder three ways, interleaved
  in one process in blocks of 15 steps: plain ``nn.Linear`` + ``nn.ReLU`` layers,
  ``Encoder.fused`` with the modular term as its own layer, and ``Encoder.fused`` with the
  modular term in the encoder's passes (what ``DGN.forward`` does); milliseconds a step
  and the median of the per-round ratios.
* ``checks``: the same compiled steps, interleaved in one process, as they run and with
  the checks done as before the C checks (gradient norm and clip decision by
  ``torch.nn.utils.get_total_norm``, the encoder's weight check by seven sums, the
  entry checks of the relaxed layers' features and modular term and of the loss's
  logits as separate reduction passes before the kernels, instead of in them).

    python benchmarks/train_overheads.py
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import textwrap
import time

import torch


def faults() -> None:
    x = torch.empty(16 << 20)  # 64 MiB, not yet touched
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    x.fill_(1.0)
    cold = time.perf_counter() - start
    count = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    warm = statistics.median(_timed(lambda: x.fill_(2.0)) for _ in range(5))
    print(f"fill 64 MiB: first touch {1e3 * cold:.1f} ms ({count:,} page faults), again {1e3 * warm:.1f} ms: "
          f"{1e6 * (cold - warm) / max(count, 1):.2f} us a fault")


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


_STEPS = textwrap.dedent("""
    import resource, torch
    from dgn._memory import retain_freed_memory
    from dgn.losses import layerwise_cross_entropy
    from dgn.model import DGN, DGNConfig
    from dgn.train import TrainConfig, make_optimizer
    print("freed memory kept:", retain_freed_memory())
    torch.manual_seed(0)
    model = DGN(DGNConfig(in_features=300, hidden_features=300, encoded_features=128, steps=7)).train()
    model.greedy.compile = True
    opt = make_optimizer(model, TrainConfig(lr=1e-3, compile=True))
    gold = torch.zeros(64, 60)
    gold[:, 0] = 1.0
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(601):
        n = 20 + (i * 7) % 30
        x, mask = torch.randn(64, n, 300), torch.ones(64, n, dtype=torch.bool)
        opt.zero_grad(set_to_none=True)
        layerwise_cross_entropy(model(x, mask).logits, gold[:, :n]).backward()
        opt.step()
        if i % 150 == 0:
            now = resource.getrusage(resource.RUSAGE_SELF)
            print(f"  step {i}: resident {rss():.0f} MiB, peak {now.ru_maxrss / 1024:.0f} MiB, "
                  f"{(now.ru_minflt - before) / (150 if i else 1):,.0f} page faults a step")
            before = now.ru_minflt
""")


def memory() -> None:
    for label, env in (("kept", {}), ("DGN_RETAIN_MEMORY=0", {"DGN_RETAIN_MEMORY": "0"})):
        print(f"600 compiled training steps, {label}:")
        done = subprocess.run([sys.executable, "-c", _STEPS], env={**os.environ, **env}, capture_output=True,
                              text=True, check=True)
        print(done.stdout.rstrip())


def loss() -> None:
    from dgn.losses import layerwise_cross_entropy

    B, K, N = 64, 7, 40
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(B, K, N, generator=gen)
    picks = logits.argmax(-1)
    for k in range(1, K):  # what the relaxed layers give: earlier picks are -inf
        logits[torch.arange(B).unsqueeze(1), k, picks[:, :k]] = float("-inf")
    logits.requires_grad_(True)
    gold = torch.zeros(B, N, dtype=torch.bool)
    gold[torch.arange(B), torch.randint(N, (B,), generator=gen)] = True

    def former_loss() -> None:  # the implementation before, step by step
        bad = torch.isnan(logits) | (logits == float("inf"))
        assert not bool(bad.any())
        finite = torch.isfinite(logits).any(-1, keepdim=True)
        logp = torch.log_softmax(torch.where(finite, logits, torch.zeros_like(logits)), -1)
        logp = logp.masked_fill(~finite, float("-inf"))
        has = torch.isfinite(logits).any(-1)
        best = logits.argmax(-1)
        picks = torch.where(has, best, torch.full_like(best, -1))
        onehot = torch.zeros(B, K, N + 1, dtype=torch.bool)
        onehot.scatter_(2, torch.where(picks < 0, N, picks).unsqueeze(-1), True)
        onehot = onehot[..., :N]
        unpicked = (torch.cumsum(onehot.to(torch.int32), dim=1) - onehot.to(torch.int32)) == 0
        open_gold = gold.unsqueeze(1) & unpicked
        torch.where(open_gold, -logp, torch.zeros_like(logp)).sum(dim=(1, 2)).mean().backward()

    def library_loss() -> None:
        layerwise_cross_entropy(logits, gold).backward()

    runs = {"layerwise_cross_entropy": library_loss, "the former implementation": former_loss}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(20):
        for fn in runs.values():
            fn()
    for _ in range(300):
        for name, fn in runs.items():
            times[name].append(_timed(fn))
    for name, values in times.items():
        print(f"{name}: {1e3 * statistics.median(values):.3f} ms forward and backward (median of 300)")


def products() -> None:
    from dgn import _kernels

    onednn = _kernels._onednn()
    if onednn is None:
        print("this torch has no oneDNN linear layer")
        return
    R, F, Hd, E = 2560, 300, 300, 128
    gen = torch.Generator().manual_seed(0)
    X, Y1 = torch.randn(R, F, generator=gen), torch.relu(torch.randn(R, Hd, generator=gen))
    W1, b1, W2, b2 = torch.randn(Hd, F), torch.randn(Hd), torch.randn(E, Hd), torch.randn(E)
    z1, z2 = torch.randn(R, Hd, generator=gen), torch.randn(R, E, generator=gen)
    z1T, z2T = z1.t().contiguous(), z2.t().contiguous()
    cases = {
        "layer 1 forward (+ bias, ReLU)": (lambda: torch.addmm(b1, X, W1.t()).relu_(),
                                           lambda: onednn(X, W1, b1, "relu", [], "")),
        "layer 2 forward (+ bias, ReLU)": (lambda: torch.addmm(b2, Y1, W2.t()).relu_(),
                                           lambda: onednn(Y1, W2, b2, "relu", [], "")),
        "layer 2 input gradient": (lambda: torch.mm(z2, W2), lambda: onednn(z2, W2.t(), None, "none", [], "")),
        "layer 2 weight gradient": (lambda: torch.mm(z2.t(), Y1), lambda: onednn(z2T, Y1.t(), None, "none", [], "")),
        "layer 1 weight gradient": (lambda: torch.mm(z1.t(), X), lambda: onednn(z1T, X.t(), None, "none", [], "")),
    }
    total = [0.0, 0.0]
    for name, (plain, fused) in cases.items():
        times: list[list[float]] = [[], []]
        for _ in range(3):
            plain(), fused()
        for _ in range(30):
            times[0].append(_timed(plain))
            times[1].append(_timed(fused))
        a, b = (statistics.median(t) for t in times)
        total[0] += a
        total[1] += b
        print(f"{name}: torch.mm {1e3 * a:.2f} ms, oneDNN {1e3 * b:.2f} ms ({a / b:.2f}x)")
    useful = 4 * R * F * Hd + 6 * R * Hd * E  # the five products' FLOPs (as train_speed.py counts them)
    print(f"all five: torch.mm {1e3 * total[0]:.2f} ms ({useful / total[0] / 1e9:.0f} GFLOP/s), "
          f"oneDNN {1e3 * total[1]:.2f} ms ({useful / total[1] / 1e9:.0f} GFLOP/s)")


def _compiled_step():  # type: ignore[no-untyped-def]
    """A DGN at the benchmark shape and one training step of it as ``dgn train --compile``
    runs it (the relaxed layers in the kernel, fused Adam)."""
    from dgn._memory import retain_freed_memory
    from dgn.losses import layerwise_cross_entropy
    from dgn.model import DGN, DGNConfig
    from dgn.train import TrainConfig, clip_gradients, make_optimizer

    retain_freed_memory()
    torch.manual_seed(0)
    model = DGN(DGNConfig(in_features=300, hidden_features=300, encoded_features=128, steps=7, tau=4.0)).train()
    model.greedy.compile = True
    optimizer = make_optimizer(model, TrainConfig(lr=1e-3, compile=True))
    B, N = 64, 40
    x, mask = torch.randn(B, N, 300), torch.ones(B, N, dtype=torch.bool)
    gold = torch.zeros(B, N)
    gold[torch.arange(B), torch.randint(N, (B,))] = 1.0

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        layerwise_cross_entropy(model(x, mask).logits, gold).backward()
        clip_gradients(model.parameters(), 5.0)
        optimizer.step()

    return model, step


def _interleaved(ways: dict, step, rounds: int) -> None:  # type: ignore[no-untyped-def, type-arg]
    """Blocks of 15 steps under each way in turn (``ways``: name -> a function that sets it
    up), ``rounds`` times; milliseconds a step and the per-round ratios to the last way."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, set_up in ways.items():
            set_up()
            step()
            start = time.perf_counter()
            for _ in range(15):
                step()
            times[name].append((time.perf_counter() - start) / 15)
    last = list(ways)[-1]
    for name, values in times.items():
        ratio = statistics.median(a / b for a, b in zip(values, times[last], strict=True))
        print(f"{name}: {1e3 * statistics.median(values):.2f} ms a step (median of {rounds} blocks), "
              f"{ratio:.2f}x the last")


def encoder(rounds: int = 15) -> None:
    model, step = _compiled_step()

    def separately(X: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        H = model.encode(X, valid)
        return H, model.modular_scores(H, X)

    def way(fused: bool, encode_and_score):  # type: ignore[no-untyped-def]
        def set_up() -> None:
            model.encoder.fused = fused
            model._encode_and_score = encode_and_score  # type: ignore[method-assign]
        return set_up

    _interleaved({"plain layers": way(False, model._encode_and_score),
                  "fused, modular term apart": way(True, separately),
                  "fused, modular term in its passes": way(True, model._encode_and_score)}, step, rounds)


def checks(rounds: int = 20) -> None:
    from dgn import _kernels, greedy, losses

    model, step = _compiled_step()
    model.encoder.fused = True
    kept = (_kernels.sum_squares, greedy.as_features, greedy.as_modular, losses._check)

    def before() -> None:
        sum_squares, as_features, as_modular, check = kept
        _kernels.sum_squares = lambda tensors: None  # torch measures the norm; the sums check the weights
        greedy.as_features = lambda *a, values=True, **k: as_features(*a, **k)  # every check up front
        greedy.as_modular = lambda *a, values=True: as_modular(*a)
        losses._check = lambda *a, values=True: check(*a)

    def now() -> None:
        _kernels.sum_squares, greedy.as_features, greedy.as_modular, losses._check = kept

    try:
        _interleaved({"checks before the kernels": before, "checks in the C passes": now}, step, rounds)
    finally:
        now()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts_known = {"faults": faults, "memory": memory, "loss": loss, "products": products, "encoder": encoder,
                   "checks": checks}
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(parts_known)} (default: all)")
    args = parser.parse_args()
    parts = args.parts or list(parts_known)
    unknown = sorted(set(parts) - set(parts_known))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}: choose from {', '.join(parts_known)}")
    for part in parts:
        print(f"## {part}")
        parts_known[part]()


if __name__ == "__main__":
    main()
