"""DGN settings on FM2, cross-validated over FM2 dev's pages (FM2 test is not read).

The choices the FM2 benchmark could make on its dev side, measured without touching FM2
test: FM2 dev in 5 folds drawn by Wikipedia page (``prepare_folds("fm2", ...)``), each
fold the test part once, early stopping on 15% of the rest (by page too); features
``wordvec,sentence,lexical``; the DGN with ``TrainConfig()`` and ``DGNConfig()`` except
for the settings of each variant; training seeds 0 and 1. Prints the cross-validated
recall at k = 1, 3, 5, 7 and their mean for every variant.

    python benchmarks/fm2_cv_settings.py --data-dir ../shared/data --vectors VECTORS --output runs/fm2-cv
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

#: name -> (DGNConfig fields, TrainConfig fields)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "coverage + modular": ({}, {}),
    "coverage + modular, lr 3e-4": ({}, {"lr": 3e-4}),
    "coverage + modular, lr 1e-4": ({}, {"lr": 1e-4}),
    "coverage + modular, dropout 0.2": ({"dropout": 0.2}, {}),
    "coverage + modular, weight decay 1e-4": ({}, {"weight_decay": 1e-4}),
    "coverage + modular, lr 3e-4, dropout 0.2": ({"dropout": 0.2}, {"lr": 3e-4}),
    "coverage only": ({"modular": False}, {}),
    "coverage only, lr 3e-4": ({"modular": False}, {"lr": 3e-4}),
    "coverage only, lr 1e-4": ({"modular": False}, {"lr": 1e-4}),
    "coverage only, dropout 0.2": ({"modular": False, "dropout": 0.2}, {}),
}


def main() -> None:
    from dgn.benchmark import prepare_folds
    from dgn.data import read_problems
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--vectors", default="../shared/data/word-vectors-spacy-md/"
                        "en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--output", default="runs/fm2-cv")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    folds = prepare_folds("fm2", args.data_dir, Path(args.output), 0, 5)
    data = []
    for fold in folds:
        featurizer = Featurizer(args.vectors, features=("wordvec", "sentence", "lexical"), progress=False)
        featurizer.fit_scaler(fold["train"])
        data.append((
            featurizer,
            SelectionDataset(fold["train"], featurizer, max_candidates=TrainConfig().max_candidates),
            SelectionDataset(fold["dev"], featurizer),
            SelectionDataset(fold["test"], featurizer),
            [p.gold for p in read_problems(fold["test"])],
        ))
    ks = (1, 3, 5, 7)
    print("| variant | R@1 | R@3 | R@5 | R@7 | mean | seconds |\n|---|---:|---:|---:|---:|---:|---:|", flush=True)
    for name, (model_fields, train_fields) in VARIANTS.items():
        start, runs = time.perf_counter(), []
        for featurizer, train, dev, test, golds in data:
            for seed in seeds:
                torch.manual_seed(seed)
                model = DGN(DGNConfig(in_features=featurizer.dim, **model_fields))
                train_model(model, train, dev, replace(TrainConfig(), seed=seed, **train_fields), progress=False)
                runs.append(evaluate_rankings(rank(model.eval(), test, max(ks)), golds, ks=ks, names=("recall",)))
        recall = [statistics.fmean(r[f"recall@{k}"] for r in runs) for k in ks]
        cells = " | ".join(f"{v:.3f}" for v in recall)
        print(f"| {name} | {cells} | {statistics.fmean(recall):.4f} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
