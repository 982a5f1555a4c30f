"""Which feature set: the DGN and the Encoder trained on each, chosen by the dev split.

Runs ``dgn.benchmark.run_benchmark`` on FM2 once per feature set (training seeds 0, 1, 2,
the benchmark's split) and prints, per set and model, the mean dev recall over k = 1, 3,
5, 7 (the early-stopping split: what the default is chosen by) beside the test recall.

    python benchmarks/feature_sets.py --data-dir ../shared/data \\
        --vectors ../shared/data/word-vectors-spacy-md/en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz
"""

from __future__ import annotations

import argparse
from pathlib import Path

SETS = ("wordvec", "wordvec,lexical", "lexical", "sentence", "sentence,lexical", "wordvec,sentence,lexical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--vectors", required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--output", default="runs/feature-sets")
    args = parser.parse_args()

    from dgn.benchmark import BenchmarkSettings, run_benchmark

    rows = []
    for features in SETS:
        settings = BenchmarkSettings(
            seeds=tuple(int(s) for s in args.seeds.split(",")),
            features=tuple(features.split(",")),
            models=("Encoder", "DGN"),
        )
        results = run_benchmark(
            "fm2", vectors=args.vectors, output=Path(args.output) / features.replace(",", "+"),
            data_dir=args.data_dir, settings=settings, progress=False,
        )
        for name, row in results["models"].items():
            test = " | ".join(f"{row['metrics'][f'recall@{k}']:.3f}" for k in (1, 3, 5, 7))
            rows.append(f"| {features} | {results['feature_dim']} | {name} | {row['dev_mean_recall']:.4f} | {test} |")
        print(rows[-1], flush=True)
    print("| features | columns | model | dev mean recall | test R@1 | R@3 | R@5 | R@7 |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
