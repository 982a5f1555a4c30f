"""FM2: Encoder, DeepEncoder and DGN over several training seeds (one fixed data split).

``dgn benchmark --dataset fm2`` reports one seed; on FM2's 935 training claims the models
overfit within a few epochs, and the seed alone moves test recall by about 0.01-0.02. This
script keeps the data split of ``--split-seed`` (as ``dgn benchmark --seed`` makes it) and
trains each model with every seed of ``--seeds``, with the defaults of ``dgn train``
(``DGNConfig()``, ``TrainConfig(seed=s)``), then prints per-seed mean recall and the mean
recall / precision at k = 1, 3, 5, 7 over seeds, with the standard deviation.

Usage:
    python benchmarks/fm2_seeds.py --data-dir ../shared/data \\
        --vectors ../shared/data/word-vectors-spacy-md/en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz \\
        [--seeds 0 1 2 3 4 5] [--work runs/fm2-seeds] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dgn.baselines import EncoderScorer
from dgn.benchmark import prepare_data
from dgn.model import DGN, DGNConfig
from dgn.pipeline import Featurizer, SelectionDataset
from dgn.train import TrainConfig, evaluate_model, train_model

KS = (1, 3, 5, 7)
MODELS = ("Encoder", "DeepEncoder", "DGN")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--vectors", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--work", default="runs/fm2-seeds")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: reproducible timings)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    work = Path(args.work)
    paths = prepare_data("fm2", args.data_dir, work / "data", args.split_seed)
    featurizer = Featurizer(args.vectors, progress=False)
    featurizer.fit_scaler(paths["train"])
    train, dev, test = (SelectionDataset(paths[n], featurizer) for n in ("train", "dev", "test"))
    config = DGNConfig(in_features=featurizer.dim)

    results: dict[str, list[dict[str, float]]] = {name: [] for name in MODELS}
    for seed in args.seeds:
        for name in MODELS:
            torch.manual_seed(seed)
            model: DGN | EncoderScorer
            if name == "DGN":
                model = DGN(config)
            else:
                model = EncoderScorer(
                    config.in_features, config.hidden_features, config.encoded_features, deep=name == "DeepEncoder"
                )
            t0 = time.perf_counter()
            fit = train_model(model, train, dev, TrainConfig(seed=seed), progress=False)
            metrics = evaluate_model(model, test, KS)
            metrics["best_epoch"] = fit.best_epoch
            results[name].append(metrics)
            mean_r = statistics.mean(metrics[f"recall@{k}"] for k in KS)
            print(f"seed {seed} {name:<12} best epoch {fit.best_epoch:>2}  mean recall@1,3,5,7 {mean_r:.4f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)

    lines = [
        f"FM2 test, split seed {args.split_seed}, training seeds {args.seeds}: mean over seeds (sd)",
        "",
        "| model | " + " | ".join(f"R@{k}" for k in KS) + " | " + " | ".join(f"P@{k}" for k in KS)
        + " | mean R@1,3,5,7 (sd over seeds) |",
        "|---|" + "---:|" * (2 * len(KS) + 1),
    ]
    for name in MODELS:
        runs = results[name]
        cells = [f"{statistics.mean(r[f'{m}@{k}'] for r in runs):.3f}" for m in ("recall", "precision") for k in KS]
        means = [statistics.mean(r[f"recall@{k}"] for k in KS) for r in runs]
        sd = statistics.stdev(means) if len(means) > 1 else 0.0
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.mean(means):.4f} ({sd:.4f}) |")
    table = "\n".join(lines)
    print(table)
    (work / "seeds.json").write_text(json.dumps(results, indent=2) + "\n")
    (work / "seeds.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
