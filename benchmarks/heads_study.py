"""The greedy layers against a fine-tuned ranker, read from ``dgn benchmark`` runs.

Each run directory holds a ``results.json`` of ``dgn benchmark --finetune-encoder
--finetune-seeds 0,1,2``: its "DGN end to end" row (``dgn train``'s default) and its
"Fine-tuned encoder" row (the same encoder, data and budget under a listwise head) over
the same training seeds. This prints, per dataset, both rows' mean ± sd of recall@k,
precision@k, strict@k and redundancy@k, the DGN's difference and whether it exceeds two
seed sds (of the larger sd of the two rows), and plots the differences:

    dgn benchmark --dataset multirc --data-dir ../shared/data --vectors VECTORS --finetune-encoder \\
        --finetune-seeds 0,1,2 --output runs/multirc
    ... the same for scifact and entailmentbank ...
    python benchmarks/heads_study.py runs/multirc runs/scifact runs/entailmentbank --plot docs/images/heads_study.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

KS = (1, 3, 5, 7)
DGN_ROW, RANKER_ROW = "DGN end to end", "Fine-tuned encoder"
METRICS = ("recall", "precision", "strict", "redundancy")


def _per_seed(row: dict[str, Any]) -> list[dict[str, float]]:
    return row.get("per_seed") or [row["metrics"]]


def compare(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per ``metric@k``: each row's mean and sd over the seeds, the difference, and its size in sds.

    Returns:
        ``{"recall@3": {"dgn": (mean, sd), "ranker": (mean, sd), "diff": d, "sds": d / max(sd)}, ...}``
        (``sds`` is None when both sds are 0, e.g. a single seed).
    """
    dgn, ranker = (_per_seed(results["models"][name]) for name in (DGN_ROW, RANKER_ROW))
    out: dict[str, dict[str, Any]] = {}
    for metric in METRICS:
        for k in KS:
            key = f"{metric}@{k}"
            if key not in dgn[0]:
                continue
            stats = {}
            for name, runs in (("dgn", dgn), ("ranker", ranker)):
                values = [r[key] for r in runs]
                stats[name] = (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
            diff = stats["dgn"][0] - stats["ranker"][0]
            spread = max(stats["dgn"][1], stats["ranker"][1])
            out[key] = {**stats, "diff": diff, "sds": diff / spread if spread > 0 else None}
    return out


def table(name: str, view: dict[str, dict[str, Any]], seeds: int) -> str:
    lines = [f"{name} ({seeds} seeds)", "",
             "| metric | DGN end to end | fine-tuned encoder (listwise) | difference | in sds |",
             "|---|---:|---:|---:|---:|"]
    for key, v in view.items():
        sds = "-" if v["sds"] is None else f"{v['sds']:+.1f}"
        lines.append(f"| {key} | {v['dgn'][0]:.3f} ± {v['dgn'][1]:.3f} | {v['ranker'][0]:.3f} ± {v['ranker'][1]:.3f} "
                     f"| {v['diff']:+.3f} | {sds} |")
    return "\n".join(lines)


def plot(views: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ("recall", "strict", "precision")
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 4), constrained_layout=True)
    for ax, metric in zip(axes, panels, strict=True):
        for name, view in views.items():
            keys = [f"{metric}@{k}" for k in KS if f"{metric}@{k}" in view]
            ks = [int(key.split("@")[1]) for key in keys]
            diffs = [view[key]["diff"] for key in keys]
            err = [2 * max(view[key]["dgn"][1], view[key]["ranker"][1]) for key in keys]
            ax.errorbar(ks, diffs, yerr=err, marker="o", capsize=3, label=name)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(KS)
        ax.set_xlabel("k (sentences selected)")
        ax.set_ylabel(f"DGN - listwise, {metric}@k")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("DGN end to end against the fine-tuned listwise ranker, same budget "
                 "(mean over seeds; bars: 2 seed sds)")
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="dgn benchmark output directories (results.json inside)")
    parser.add_argument("--plot", default=None, help="write the differences as a PNG here")
    args = parser.parse_args()
    views = {}
    for run in args.runs:
        results = json.loads((Path(run) / "results.json").read_text())
        for row in (DGN_ROW, RANKER_ROW):
            if row not in results["models"]:
                parser.error(f"{run}: no {row!r} row (run dgn benchmark with --finetune-encoder)")
        views[results["dataset"]] = view = compare(results)
        print(table(results["dataset"], view, len(_per_seed(results["models"][DGN_ROW]))), end="\n\n")
    if args.plot:
        plot(views, Path(args.plot))
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
