"""WiCE's long candidate lists: the DGN on a fused top-L against the DGN on every candidate.

5-fold cross-validation of WiCE dev as in ``dgn benchmark --dataset wice --folds 5``
(features ``sentence,lexical``, ``TrainConfig()``), once per candidate stage:

* ``all``: no cut (training problems capped at 64 candidates as usual);
* ``bm25 top L``, ``tfidf+bm25 rrf top L``, ``tfidf+bm25 fv top L``: every problem cut to its
  L best candidates by :class:`dgn.fusion.candidates.CandidateStage` (training keeps the
  gold beyond the cut; dev and test do not).

Reported per stage: recall@k and strict@k against the original gold (the cut's losses
included), the cut's own recall@L (its ceiling), the stage's time per problem and the
DGN's selection time per problem (hard greedy over the featurized test problems),
mean ± sd over the training seeds.

    python benchmarks/fused_candidates.py --data-dir ../shared/data --output runs/fused
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

KS = (1, 3, 5, 7)
STAGES = {
    "all": None,
    "bm25 top L": (("bm25",), "rrf"),
    "tfidf+bm25 rrf top L": (("tfidf", "bm25"), "rrf"),
    "tfidf+bm25 fv top L": (("tfidf", "bm25"), "fv"),
}


def main() -> None:
    from dgn.benchmark import prepare_folds
    from dgn.data import read_problems
    from dgn.fusion.candidates import CandidateStage
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--top-l", type=int, default=24)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--output", default="runs/fused")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.output)
    folds = prepare_folds("wice", args.data_dir, out / "data", 0, args.folds)
    results: dict[str, Any] = {}
    for name in args.stages.split(","):
        spec = STAGES[name]
        stage = None if spec is None else CandidateStage(spec[0], spec[1], args.top_l)
        golds: list[Any] = []
        per_seed: list[list[list[int]]] = [[] for _ in seeds]
        ceiling: list[list[int]] = []
        stage_s = select_s = 0.0
        n_test = 0
        for i, paths in enumerate(folds):
            files = dict(paths)
            kept_test = None
            if stage is not None:
                work = out / "cut" / name.replace(" ", "_") / f"fold{i}"
                work.mkdir(parents=True, exist_ok=True)
                stage.cut_file(paths["train"], work / "train.jsonl", keep_gold=True, progress=False)
                stage.cut_file(paths["dev"], work / "dev.jsonl", progress=False)
                start = time.perf_counter()
                kept_test = stage.cut_file(paths["test"], work / "test.jsonl", progress=False)
                stage_s += time.perf_counter() - start
                files = {k: work / f"{k}.jsonl" for k in ("train", "dev", "test")}
            test_problems = list(read_problems(paths["test"]))
            golds.extend(p.gold for p in test_problems)
            n_test += len(test_problems)
            ceiling.extend(kept_test if kept_test is not None else [list(range(len(p.candidates))) for p in test_problems])
            featurizer = Featurizer(None, features=("sentence", "lexical"), cache_dir=args.cache_dir, progress=False)
            featurizer.fit_scaler(files["train"])
            base = TrainConfig()
            train = SelectionDataset(files["train"], featurizer, max_candidates=base.max_candidates)
            dev = SelectionDataset(files["dev"], featurizer)
            test = SelectionDataset(files["test"], featurizer)
            for s, seed in enumerate(seeds):
                torch.manual_seed(seed)
                model = DGN(DGNConfig(in_features=featurizer.dim))
                train_model(model, train, dev, replace(base, seed=seed), progress=False)
                start = time.perf_counter()
                rankings = rank(model, test, max(KS))
                select_s += time.perf_counter() - start
                if kept_test is not None:
                    rankings = [[kept[j] for j in r] for r, kept in zip(rankings, kept_test, strict=True)]
                per_seed[s].extend(rankings)
            print(f"{name}: fold {i} done", flush=True)
        names = ("recall", "strict")
        runs = [evaluate_rankings(r, golds, ks=KS, names=names) for r in per_seed]
        keys = [f"{m}@{k}" for m in names for k in KS]
        cut = evaluate_rankings(ceiling, golds, ks=(args.top_l,), names=names)
        results[name] = {
            "mean": {k: statistics.fmean(r[k] for r in runs) for k in keys},
            "sd": {k: statistics.stdev([r[k] for r in runs]) if len(runs) > 1 else 0.0 for k in keys},
            "cut_recall": cut[f"recall@{args.top_l}"] if stage is not None else 1.0,
            "cut_strict": cut[f"strict@{args.top_l}"] if stage is not None else 1.0,
            "stage_ms_per_problem": 1000 * stage_s / n_test,
            "select_ms_per_problem": 1000 * select_s / (n_test * len(seeds)),
        }
        (out / "fused_candidates.json").write_text(json.dumps(
            {"top_l": args.top_l, "seeds": seeds, "folds": args.folds, "stages": results}, indent=2) + "\n")
    print()
    print(f"| candidates | recall@{args.top_l} of the cut | " + " | ".join(f"R@{k}" for k in KS)
          + " | " + " | ".join(f"strict@{k}" for k in KS) + " | stage ms/problem | DGN selection ms/problem |")
    print("|---|---:|" + "---:|" * (2 * len(KS) + 2))
    for name, row in results.items():
        cells = [f"{row['mean'][k]:.3f} ± {row['sd'][k]:.3f}" for k in row["mean"]]
        label = name.replace("top L", f"top {args.top_l}")
        print(f"| {label} | {row['cut_recall']:.3f} | " + " | ".join(cells)
              + f" | {row['stage_ms_per_problem']:.1f} | {row['select_ms_per_problem']:.2f} |")


if __name__ == "__main__":
    main()
