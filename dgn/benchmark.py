"""The paper's Table 1 on real data: every baseline and the DGN, trained and evaluated.

``run_benchmark("fm2", ...)`` converts the raw files (seeded candidate shuffle), builds
the claim-sentence features, trains Encoder, DeepEncoder and DGN with the same settings
as ``dgn train``, and scores every model at k = 7, 5, 3, 1 (Powers et al., 2018, Table 1).

Splits: FM2 trains on its dev file (a seeded 20% of it held out for early stopping) and
is evaluated on its test file. WiCE has only its dev file here: it is split 55/15/30 into
train / early-stopping / test with the seed.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from dgn.errors import DgnUserError

__all__ = ["BenchmarkSettings", "run_benchmark", "format_results", "prepare_data", "DATASET_SPLITS", "MODEL_NAMES"]

#: Raw files each benchmark dataset uses, and how train / dev / test are formed.
DATASET_SPLITS: dict[str, dict[str, Any]] = {
    "fm2": {"train": "dev", "test": "test", "dev_fraction": 0.2},
    "wice": {"train": "dev", "test": None, "dev_fraction": 0.15, "test_fraction": 0.3},
}

MODEL_NAMES = ("TF-IDF", "Embedding cosine", "SCMM greedy (untrained)", "Encoder", "DeepEncoder", "DGN")


@dataclass(frozen=True)
class BenchmarkSettings:
    """Knobs of the benchmark (defaults = the reported table and plain ``dgn train``)."""

    seed: int = 0
    ks: tuple[int, ...] = (7, 5, 3, 1)
    epochs: int | None = None
    models: tuple[str, ...] = MODEL_NAMES


def _split(path: Path, out: dict[str, Path], fractions: dict[str, float], seed: int) -> dict[str, int]:
    """Split a selection JSONL file into seeded parts (``train`` takes the rest)."""
    from dgn.data import read_problems, write_problems

    problems = list(read_problems(path))
    order = list(range(len(problems)))
    random.Random(f"split:{seed}").shuffle(order)
    counts: dict[str, int] = {}
    start = 0
    parts: dict[str, list[int]] = {}
    for name, frac in fractions.items():
        n = max(1, round(frac * len(order)))
        parts[name] = order[start : start + n]
        start += n
    parts["train"] = order[start:]
    for name, idx in parts.items():
        counts[name] = write_problems(out[name], (problems[i] for i in sorted(idx)))
    return counts


def prepare_data(dataset: str, data_dir: str | os.PathLike[str] | None, work: Path, seed: int) -> dict[str, Path]:
    """Convert and split a registered dataset into ``work/{train,dev,test}.jsonl``."""
    from dgn.data import convert, locate

    if dataset not in DATASET_SPLITS:
        raise DgnUserError(f"unknown benchmark dataset {dataset!r}; choose from {sorted(DATASET_SPLITS)}")
    plan = DATASET_SPLITS[dataset]
    work.mkdir(parents=True, exist_ok=True)
    paths = {name: work / f"{name}.jsonl" for name in ("train", "dev", "test")}
    raw_train = locate(dataset, plan["train"], data_dir)
    converted = work / f"{dataset}-{plan['train']}.converted.jsonl"
    convert(dataset, raw_train, converted, seed=seed)
    fractions = {"dev": plan["dev_fraction"]}
    if plan["test"] is None:
        fractions["test"] = plan["test_fraction"]
    _split(converted, paths, fractions, seed)
    converted.unlink()
    if plan["test"] is not None:
        convert(dataset, locate(dataset, plan["test"], data_dir), paths["test"], seed=seed)
    return paths


def run_benchmark(
    dataset: str,
    *,
    vectors: str | os.PathLike[str],
    output: str | os.PathLike[str],
    data_dir: str | os.PathLike[str] | None = None,
    settings: BenchmarkSettings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train and evaluate every model of Table 1 on ``dataset``; write the reports.

    Writes ``results.json``, ``results.md`` and ``recall_precision.png`` into ``output``.

    Returns:
        The results dict (also in ``results.json``).
    """
    from dgn.baselines import EncoderScorer, cosine_rankings, scmm_rankings, tfidf_rankings
    from dgn.data import read_problems
    from dgn.metrics import evaluate_rankings
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, rank, train_model

    s = settings or BenchmarkSettings()
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    paths = prepare_data(dataset, data_dir, out / "data", s.seed)
    featurizer = Featurizer(vectors, cache_dir=cache_dir, progress=progress)
    featurizer.fit_scaler(paths["train"])
    train = SelectionDataset(paths["train"], featurizer)
    dev = SelectionDataset(paths["dev"], featurizer)
    test = SelectionDataset(paths["test"], featurizer)
    test_problems = list(read_problems(paths["test"]))
    golds = [p.gold for p in test_problems]
    kmax = max(s.ks)
    model_config = DGNConfig(in_features=featurizer.dim)
    train_config = TrainConfig(seed=s.seed)
    if s.epochs is not None:
        train_config = replace(train_config, epochs=s.epochs)

    rows: dict[str, dict[str, Any]] = {}

    def score(name: str, rankings: list[list[int]], params: int | None, seconds: float) -> None:
        metrics = evaluate_rankings(rankings, golds, ks=s.ks, names=("recall", "precision", "f1", "strict"))
        rows[name] = {"metrics": metrics, "parameters": params, "train_seconds": seconds}
        if progress:
            r = ", ".join(f"R@{k} {metrics[f'recall@{k}']:.3f}" for k in s.ks)
            print(f"{name}: {r}", flush=True)

    if "TF-IDF" in s.models:
        fit_texts = [t for p in read_problems(paths["train"]) for t in (p.query, *p.candidates)]
        score("TF-IDF", tfidf_rankings(test_problems, kmax, fit_texts), None, 0.0)
    if "Embedding cosine" in s.models:
        score("Embedding cosine", cosine_rankings(test_problems, featurizer.vectors, kmax), None, 0.0)
    if "SCMM greedy (untrained)" in s.models:
        score("SCMM greedy (untrained)", scmm_rankings(iter(test.raw), kmax), None, 0.0)
    trained: dict[str, Any] = {}
    for name in ("Encoder", "DeepEncoder", "DGN"):
        if name not in s.models:
            continue
        torch.manual_seed(s.seed)
        if name == "DGN":
            model: Any = DGN(model_config)
        else:
            model = EncoderScorer(
                model_config.in_features,
                model_config.hidden_features,
                model_config.encoded_features,
                deep=name == "DeepEncoder",
            )
        if progress:
            print(f"training {name} ({model.num_parameters():,} parameters)", flush=True)
        result = train_model(model, train, dev, train_config, progress=progress)
        trained[name] = result.to_dict()
        score(name, rank(model, test, kmax), model.num_parameters(), result.seconds)
        if name == "DGN":
            model.save_pretrained(out / "dgn-model", extra={"featurizer": featurizer.settings()})

    results = {
        "dataset": dataset,
        "seed": s.seed,
        "ks": list(s.ks),
        "splits": {name: len(data.infos) for name, data in (("train", train), ("dev", dev), ("test", test))},
        "model_config": model_config.to_dict(),
        "train_config": asdict(train_config),
        "models": rows,
        "training": trained,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_reports(results, out)
    return results


def format_results(results: dict[str, Any]) -> str:
    """The paper's Table 1 layout: a block per k, one row per model."""
    ks = results["ks"]
    lines = [
        "| model | params | train time | " + " | ".join(f"R@{k} | P@{k} | F1@{k}" for k in ks) + " |",
        "|---|---:|---:|" + "---:|" * (3 * len(ks)),
    ]
    for name, row in results["models"].items():
        m = row["metrics"]
        params = f"{row['parameters']:,}" if row["parameters"] else "-"
        secs = f"{row['train_seconds']:.0f} s" if row["train_seconds"] else "-"
        cells = " | ".join(
            f"{m[f'recall@{k}']:.3f} | {m[f'precision@{k}']:.3f} | {m[f'f1@{k}']:.3f}" for k in ks
        )
        lines.append(f"| {name} | {params} | {secs} | {cells} |")
    return "\n".join(lines)


def write_reports(results: dict[str, Any], out: Path) -> None:
    """``results.json``, ``results.md`` and a PNG of recall@k and precision@k per model."""
    from dgn.data import atomic_write

    with atomic_write(out / "results.json") as fh:
        json.dump(results, fh, indent=2, sort_keys=True)
        fh.write("\n")
    header = (
        f"# {results['dataset']} evidence selection (seed {results['seed']})\n\n"
        f"Test problems: {results['splits']['test']}; trained on {results['splits']['train']}, "
        f"early stopping on {results['splits']['dev']}.\n\n"
    )
    with atomic_write(out / "results.md") as fh:
        fh.write(header + format_results(results) + "\n")
    try:
        plot_results(results, out / "recall_precision.png")
    except ImportError:
        pass


def plot_results(results: dict[str, Any], path: Path) -> None:
    """Recall@k and precision@k per model, two panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(results["ks"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for name, row in results["models"].items():
        m = row["metrics"]
        style = {"linewidth": 2.5} if name == "DGN" else {"linewidth": 1.2}
        axes[0].plot(ks, [m[f"recall@{k}"] for k in ks], marker="o", label=name, **style)
        axes[1].plot(ks, [m[f"precision@{k}"] for k in ks], marker="o", label=name, **style)
    for ax, what in zip(axes, ("recall@k", "precision@k"), strict=True):
        ax.set_xlabel("k (sentences selected)")
        ax.set_ylabel(what)
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{results['dataset']} test, seed {results['seed']}")
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
