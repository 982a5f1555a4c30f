"""The FGA-NDCG model card's experiment on real graded data: sparse against graded losses.

For CLIMATE-FEVER (relevance = annotator votes for SUPPORTS or REFUTES, 0 to 5) and WiCE
(relevance = how many of the claim's alternative gold sets hold the sentence), every row
trains the DGN and the Encoder with one loss of ``dgn.train.training_loss``:

* sparse CE: the binary gold (the DGN: the paper's layer-wise loss; the Encoder: listwise
  cross entropy, target gold / #gold),
* soft CE (sparse_weight 0, 0.5, 1.0): soft-label cross entropy on the grades, plus that
  weight times the sparse CE,
* ApproxNDCG (Qin, Liu and Li, 2010), temperature 1, no cutoff.

5-fold cross-validation (each problem is tested once; a seeded 15% of the other folds
stops training early, by dev mean recall@{1,3,5,7} for every row alike), training seeds
0, 1, 2, features ``sentence,lexical``. Scores are pooled over the folds per seed, then
mean and sd over seeds. nDCG@5 and MRR use the grades; recall@k the gold sets.

    python benchmarks/graded_tradeoff.py --data-dir ../shared/data --output runs/graded

writes OUTPUT/<dataset>.json per dataset as it finishes, a Markdown table on stdout and
OUTPUT/graded_tradeoff.png (``--summary`` reprints the table from the JSON files).
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

ROWS = {
    "sparse CE": {"loss": "sparse_ce"},
    "soft CE": {"loss": "soft_label"},
    "soft CE + 0.5 sparse": {"loss": "soft_label", "sparse_weight": 0.5},
    "soft CE + 1.0 sparse": {"loss": "soft_label", "sparse_weight": 1.0},
    "ApproxNDCG": {"loss": "approx_ndcg"},
}
MODELS = ("DGN", "Encoder")
KS = (1, 3, 5, 7)
METRICS = ("ndcg@5", "mrr@7", *(f"recall@{k}" for k in KS), "strict@3")


def with_relevance(dataset: str, path: Path) -> list[Any]:
    """The fold file's problems with the dataset's graded relevance (WiCE: gold-set counts)."""
    from dgn.data import read_problems

    problems = list(read_problems(path))
    if dataset != "wice":
        return problems
    out = []
    for p in problems:
        counts = [float(sum(v in g for g in p.gold)) for v in range(p.num_candidates)]
        out.append(replace(p, relevance=counts))
    return out


def run_dataset(dataset: str, args: argparse.Namespace) -> dict[str, Any]:
    from dgn.baselines import EncoderScorer
    from dgn.benchmark import prepare_folds
    from dgn.data import write_problems
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    work = Path(args.output) / dataset
    folds = prepare_folds(dataset, args.data_dir, work / "data", 0, args.folds)
    seeds = [int(s) for s in args.seeds.split(",")]
    features = tuple(args.features.split(","))
    # per row, model, seed: the rankings of every fold's test problems, in fold order
    rankings: dict[str, list[list[list[int]]]] = {}
    problems_all: list[Any] = []
    seconds: dict[str, float] = {}
    for i, paths in enumerate(folds):
        for name in ("train", "dev", "test"):  # WiCE: write the grades into the fold files
            write_problems(paths[name], with_relevance(dataset, paths[name]))
        featurizer = Featurizer(None, features=features, cache_dir=args.cache_dir, progress=False)
        featurizer.fit_scaler(paths["train"])
        base = TrainConfig()
        train = SelectionDataset(paths["train"], featurizer, max_candidates=base.max_candidates)
        dev = SelectionDataset(paths["dev"], featurizer)
        test = SelectionDataset(paths["test"], featurizer)
        problems_all.extend(with_relevance(dataset, paths["test"]))
        for row, fields in ((r, f) for r, f in ROWS.items() if r in args.rows):
            for model_name in MODELS:
                key = f"{model_name} | {row}"
                per_seed = rankings.setdefault(key, [[] for _ in seeds])
                for s, seed in enumerate(seeds):
                    torch.manual_seed(seed)
                    config = DGNConfig(in_features=featurizer.dim)
                    model: Any = DGN(config) if model_name == "DGN" else EncoderScorer(
                        featurizer.dim, config.hidden_features, config.encoded_features)
                    start = time.perf_counter()
                    train_model(model, train, dev, replace(base, seed=seed, **fields), progress=False)
                    seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start
                    per_seed[s].extend(rank(model, test, max(KS)))
                print(f"{dataset} fold {i}: {key} done", flush=True)
    golds = [p.gold for p in problems_all]
    relevance = [p.relevance_or_binary() for p in problems_all]
    rows: dict[str, Any] = {}
    for key, per_seed in rankings.items():
        runs = [evaluate_rankings(r, golds, relevances=relevance, names=METRICS) for r in per_seed]
        rows[key] = {
            "mean": {m: statistics.fmean(run[m] for run in runs) for m in METRICS},
            "sd": {m: statistics.stdev([run[m] for run in runs]) if len(runs) > 1 else 0.0 for m in METRICS},
            "per_seed": runs,
            "train_seconds": seconds[key] / (len(seeds) * len(folds)),
        }
    result = {
        "dataset": dataset, "folds": args.folds, "seeds": seeds, "features": list(features),
        "problems": len(problems_all), "scored": runs[0].get("count"), "rows": rows,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (Path(args.output) / f"{dataset}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(result: dict[str, Any]) -> str:
    head = "| model | loss | " + " | ".join(METRICS) + " |"
    lines = [f"{result['dataset']}: {result['folds']}-fold CV, seeds {result['seeds']}, "
             f"{result['scored']} problems with gold", "", head, "|---|---|" + "---:|" * len(METRICS)]
    for key, row in result["rows"].items():
        model, loss = key.split(" | ")
        cells = [f"{row['mean'][m]:.3f} ± {row['sd'][m]:.3f}" for m in METRICS]
        lines.append(f"| {model} | {loss} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
    markers = dict(zip(ROWS, "os^vD", strict=True))
    for ax, result in zip(axes[0], results, strict=True):
        for key, row in result["rows"].items():
            model, loss = key.split(" | ")
            ax.errorbar(row["mean"]["ndcg@5"], row["mean"]["mrr@7"], xerr=row["sd"]["ndcg@5"], yerr=row["sd"]["mrr@7"],
                        marker=markers[loss], color="tab:blue" if model == "DGN" else "tab:orange",
                        linestyle="none", capsize=2, label=f"{model}: {loss}")
        ax.set_xlabel("nDCG@5 (graded)")
        ax.set_ylabel("MRR@7 (graded)")
        ax.set_title(f"{result['dataset']} ({result['folds']}-fold CV, {len(result['seeds'])} seeds)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", default="climate-fever,wice")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--features", default="sentence,lexical")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma list of the rows to train (default: all)")
    parser.add_argument("--output", default="runs/graded")
    parser.add_argument("--summary", action="store_true", help="only print the tables of the runs in --output")
    args = parser.parse_args()
    args.rows = [r.strip() for r in args.rows.split(",")]
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {unknown}; choose from {list(ROWS)}")
    Path(args.output).mkdir(parents=True, exist_ok=True)
    results = []
    for dataset in args.datasets.split(","):
        path = Path(args.output) / f"{dataset}.json"
        results.append(json.loads(path.read_text()) if args.summary else run_dataset(dataset, args))
        print(table(results[-1]), flush=True)
        print(flush=True)
    plot(results, Path(args.output) / "graded_tradeoff.png")


if __name__ == "__main__":
    main()
