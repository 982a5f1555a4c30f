"""Hard-greedy selection over many claims, streamed in batches: throughput and peak memory,
and the ``compile=True`` greedy kernel against the default path on the same inputs.

Shape as ``benchmarks/train_speed.py``: ``DGNConfig(in_features=300, encoded_features=128,
steps=7, tau=4)``, N = 40 candidates a claim; an untrained DGN in ``eval()`` mode (speed
does not depend on the weights). Features are generated batch by batch (seeded) and
dropped after use, as a streamed cache read would be.

* ``DGN.forward`` (encoder, modular term, exact greedy) over ``--claims`` claims in batches
  of ``--batch``: claims per second and the process's peak RSS;
* the greedy step alone on the encoded ``H`` of one batch: ``greedy_select`` with and
  without ``compile=True`` (median of repeats), and whether the picks agree.

    python benchmarks/inference_speed.py --claims 100000
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch


def main() -> None:
    from dgn.greedy import greedy_select
    from dgn.model import DGN, DGNConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    N = args.candidates
    config = DGNConfig(in_features=300, hidden_features=300, encoded_features=128, steps=7, tau=4.0)
    torch.manual_seed(0)
    model = DGN(config).eval()
    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    done = 0
    start = time.perf_counter()
    with torch.no_grad():
        while done < args.claims:
            b = min(args.batch, args.claims - done)
            x = torch.rand(b, N, config.in_features, generator=generator)
            model(x).indices  # noqa: B018  (the picks; nothing is kept)
            done += b
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"DGN.forward, exact greedy: {args.claims:,} claims in {seconds:.1f} s = "
          f"{args.claims / seconds:,.0f} claims/s (batches of {args.batch}); peak RSS {peak_mib:,.0f} MiB")

    with torch.no_grad():
        x = torch.rand(args.batch, N, config.in_features, generator=generator)
        H = model.encode(x)
        beta = model.modular_scores(H, x)
        objective = model.objective
        times: dict[str, list[float]] = {"default": [], "compile=True": []}
        picks = {}
        for name, flag in (("default", False), ("compile=True", True)):
            try:
                picks[name] = greedy_select(H, config.steps, objective, modular=beta, compile=flag).indices
            except Exception as error:  # no C++ compiler: say so and stop
                print(f"{name}: not available here ({type(error).__name__}: {str(error).splitlines()[0]})")
                return
            for _ in range(args.repeats):
                t = time.perf_counter()
                greedy_select(H, config.steps, objective, modular=beta, compile=flag)
                times[name].append(time.perf_counter() - t)
    base = statistics.median(times["default"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"greedy_select on ({args.batch}, {N}, {config.encoded_features}), K = {config.steps}, {name}: "
              f"{1000 * med:.2f} ms (median of {args.repeats}), {base / med:.2f}x the default")
    same = bool(torch.equal(picks["default"], picks["compile=True"]))
    print(f"picks equal: {same}")


if __name__ == "__main__":
    main()
