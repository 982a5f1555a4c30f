"""Training on several datasets at once, and zero-shot transfer to a dataset not trained on.

A DGN on the default frozen features (``sentence,lexical``) is trained on one or more
datasets and scored on the test sets of others, beside the untrained rows on the same
test problems. Training sets: the FM2 benchmark's train split (FM2 dev less 20%, which
is the early-stopping split), the WiCE benchmark's train split (55% of WiCE dev; its 15%
dev split stops early), all of CLIMATE-FEVER (its one file). Test sets: FM2 test, and all
349 claims of WiCE dev for models that never saw WiCE.

    python benchmarks/transfer.py --data-dir ../shared/data --seeds 0,1,2 --output runs/transfer

Prints one Markdown table per test set: recall@k as mean ± sd over the training seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

SETUPS = {
    # name: (training datasets, test sets)
    "fm2": (["fm2"], ["wice"]),
    "fm2+climate-fever": (["fm2", "climate-fever"], ["wice", "fm2"]),
    "wice": (["wice"], ["fm2"]),
    "wice+climate-fever": (["wice", "climate-fever"], ["fm2"]),
}
KS = (1, 3, 5, 7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--output", default="runs/transfer")
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    from dgn.baselines import bm25_rankings, top_k
    from dgn.benchmark import prepare_data
    from dgn.data import concat_problem_files, convert, locate, read_problems
    from dgn.features.family import default_feature_names
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    fm2 = prepare_data("fm2", args.data_dir, out / "fm2", 0)
    wice_all = out / "wice-all.jsonl"
    convert("wice", locate("wice", "dev", args.data_dir), wice_all, seed=0)
    climate = out / "climate-fever.jsonl"
    convert("climate-fever", locate("climate-fever", "test", args.data_dir), climate, seed=0)
    wice = prepare_data("wice", args.data_dir, out / "wice", 0)  # its dev split stops WiCE-trained runs
    train_files = {"fm2": fm2["train"], "wice": wice["train"], "climate-fever": climate}
    dev_files = {"fm2": fm2["dev"], "wice": wice["dev"]}
    test_files = {"fm2": fm2["test"], "wice": wice_all}
    features = default_feature_names()
    results: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {}

    for setup, (trained_on, tested_on) in SETUPS.items():
        train_path = out / f"train-{setup}.jsonl"
        concat_problem_files([train_files[d] for d in trained_on], train_path)
        dev_path = dev_files[trained_on[0]]
        featurizer = Featurizer(features=features, cache_dir=args.cache_dir, progress=False)
        featurizer.fit_scaler(train_path)
        train = SelectionDataset(train_path, featurizer, max_candidates=TrainConfig().max_candidates)
        dev = SelectionDataset(dev_path, featurizer)
        tests = {t: SelectionDataset(test_files[t], featurizer) for t in tested_on}
        for seed in seeds:
            torch.manual_seed(seed)
            model = DGN(DGNConfig(in_features=featurizer.dim))
            train_model(model, train, dev, TrainConfig(seed=seed), progress=False)
            for t, data in tests.items():
                m = evaluate_rankings(rank(model, data, max(KS)), [i.gold for i in data.infos], ks=KS)
                results.setdefault(t, {}).setdefault(f"DGN trained on {setup}", []).append(m)
            print(f"{setup} seed {seed} done", flush=True)

    for t, path in test_files.items():
        problems = list(read_problems(path))
        golds = [p.gold for p in problems]
        featurizer = Featurizer(features=("sentence",), cache_dir=args.cache_dir, progress=False)
        cos = [top_k(np.asarray(x)[:, -1], max(KS)) for x in featurizer.raw(path)]
        results[t]["Sentence cosine (zero-shot)"] = [evaluate_rankings(cos, golds, ks=KS)]
        results[t]["BM25"] = [evaluate_rankings(bm25_rankings(problems, max(KS)), golds, ks=KS)]

    lines = []
    for t, rows in results.items():
        lines += [f"\n{t} test ({'all 349 claims' if t == 'wice' else '1,380 claims'})\n",
                  "| model | " + " | ".join(f"R@{k}" for k in KS) + " |", "|---|" + "---:|" * len(KS)]
        for name, runs in rows.items():
            cells = []
            for k in KS:
                vals = [r[f"recall@{k}"] for r in runs]
                sd = f" ± {statistics.stdev(vals):.3f}" if len(vals) > 1 else ""
                cells.append(f"{statistics.fmean(vals):.3f}{sd}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    (out / "transfer.md").write_text(table + "\n", encoding="utf-8")
    (out / "transfer.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
