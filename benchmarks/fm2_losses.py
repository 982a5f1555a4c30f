"""The training losses on FM2's frozen features: does a graded or ranking loss lift the DGN
past the sentence cosine at k = 1?

The README's main job's setting (FM2 converted with seed 0, trained on 80% of FM2 dev,
early stopping on the other 20%, tested on FM2 test; features ``wordvec,sentence,lexical``;
``TrainConfig()`` otherwise), the DGN trained with each loss for seeds 0, 1, 2. FM2's gold
is binary, so ``soft_label`` spreads the target evenly over the gold sentences not yet
picked. Prints each loss's dev scores (the early-stopping score per seed) and the test
recall and precision, mean ± sd over the seeds.

    python benchmarks/fm2_losses.py --data-dir ../shared/data --vectors VECTORS --output runs/fm2-losses
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

import torch

VARIANTS = {
    "layerwise": {},
    "soft_label": {"loss": "soft_label"},
    "approx_ndcg": {"loss": "approx_ndcg"},
    "approx_ndcg + 0.5 sparse": {"loss": "approx_ndcg", "sparse_weight": 0.5},
}


def main() -> None:
    from dgn.benchmark import prepare_data
    from dgn.data import read_problems
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--vectors", default="../shared/data/word-vectors-spacy-md/"
                        "en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--output", default="runs/fm2-losses")
    args = parser.parse_args()
    paths = prepare_data("fm2", args.data_dir, Path(args.output) / "data", 0)
    featurizer = Featurizer(args.vectors, features=("wordvec", "sentence", "lexical"), cache_dir=args.cache_dir,
                            progress=False)
    featurizer.fit_scaler(paths["train"])
    base = TrainConfig()
    train = SelectionDataset(paths["train"], featurizer, max_candidates=base.max_candidates)
    dev = SelectionDataset(paths["dev"], featurizer)
    test = SelectionDataset(paths["test"], featurizer)
    golds = [p.gold for p in read_problems(paths["test"])]
    keys = ("recall@1", "precision@1", "recall@3", "recall@5", "recall@7")
    for name, fields in VARIANTS.items():
        devs, runs = [], []
        for seed in (int(s) for s in args.seeds.split(",")):
            torch.manual_seed(seed)
            model = DGN(DGNConfig(in_features=featurizer.dim))
            result = train_model(model, train, dev, replace(base, seed=seed, **fields), progress=False)
            devs.append(result.best_score)
            runs.append(evaluate_rankings(rank(model, test, 7), golds, ks=(1, 3, 5, 7), names=("recall", "precision")))
        cells = " ".join(
            f"{k} {statistics.fmean(r[k] for r in runs):.3f}±{statistics.stdev([r[k] for r in runs]) if len(runs) > 1 else 0.0:.3f}"
            for k in keys
        )
        print(f"{name}: dev {[round(d, 4) for d in devs]} {cells}", flush=True)


if __name__ == "__main__":
    main()
