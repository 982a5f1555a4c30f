"""End to end through a pretrained sentence encoder: the DGN head against the listwise head.

Both heads fine-tune the same all-MiniLM-L6-v2 on the same problems with the same budget
(one epoch, one claim per step), one run per seed; each run's test scores go to
OUTPUT/<dataset>-<head>-<settings>-seed<S>.json as it finishes, named by every setting that
differs from this script's base.

The script's own defaults stay the base of the greedy-layers study (the cosine start, no
first-layer term, the whole layer-wise gradient into the transformer, encoder_lr 2e-5), so
that the run names and commands in docs/benchmarks.md keep their meaning. ``dgn train``'s
default DGN is ``--init ranker --first-layer-weight 1 --encoder-grad-scale 0
--encoder-lr 4e-5``:

    python benchmarks/finetune_seeds.py --dataset fm2 --heads dgn --init ranker --first-layer-weight 1 \
        --encoder-grad-scale 0 --encoder-lr 4e-5 --seeds 0,1,2 --output runs/e2e
    python benchmarks/finetune_seeds.py --dataset fm2 --heads listwise --seeds 0,1,2 --output runs/e2e
    python benchmarks/finetune_seeds.py --summary --output runs/e2e [--multi-sentence]

Real FEVER (ERASER's release in ../shared/data): ``--dataset fever``; MultiRC, SciFact and
EntailmentBank: ``--dataset multirc | scifact | entailmentbank`` (``dgn benchmark
--finetune-encoder --finetune-seeds 0,1,2`` trains the same two rows with every baseline beside
them). The full FEVER release under --data-dir (see ``dgn data download fever``):
``--dataset fever-wiki --max-claims N``. ``--summary --multi-sentence`` then scores the
claims whose every evidence group holds two or more sentences.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

KS = (1, 3, 5, 7)  # the cutoffs scored and reported
BASE_ENCODER_LR = 2e-5  # the study's base learning rate (FinetuneConfig's default before it): no -elr tag


def main() -> None:
    from dgn.sentence import FinetuneConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fm2")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--heads", default="listwise,dgn")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--loss", default="set_recall", help="the DGN head's loss (default: FinetuneConfig's)")
    parser.add_argument("--tau", type=float, default=None, help="the DGN head's temperature (default: the init's)")
    parser.add_argument("--init", default="cosine", help="how the DGN head starts: cosine (default), coverage, diverse or ranker")
    parser.add_argument("--coverage-weight", type=float, default=None,
                        help="the DGN head's starting SCMM weights alpha (default: the init's)")
    parser.add_argument("--facility", type=float, default=None,
                        help="starting weight of the DGN head's facility location over the sentence embeddings "
                        "(default: dgn.sentence.DEFAULT_FACILITY; 0: none)")
    parser.add_argument("--first-layer-weight", type=float, default=0.0,
                        help="weight of an extra first-layer term in the DGN head's loss")
    parser.add_argument("--encoder-grad-scale", type=float, default=1.0,
                        help="share of the DGN head's layer-wise loss gradient that reaches the transformer "
                        "(FinetuneConfig.encoder_grad_scale; the first-layer term reaches it in full)")
    parser.add_argument("--listwise-loss", default="set_recall",
                        help="the listwise head's target: set_recall (default, the best gold set) or soft_label (gold / |gold|)")
    parser.add_argument("--max-claims", type=int, default=None,
                        help="fever-wiki: read only the first N claims of train.jsonl and of paper_dev.jsonl")
    parser.add_argument("--also-train", default="",
                        help="comma-separated datasets whose training split is added to every run's training problems")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--freeze-layers", type=int, default=0,
                        help="keep the transformer's embeddings and bottom N layers fixed (a speed setting)")
    parser.add_argument("--encoder-dropout", type=float, default=None,
                        help="the transformer's dropout while it trains (FinetuneConfig.encoder_dropout; default: its "
                        "own, 0.1)")
    parser.add_argument("--grad-candidates", type=int, default=None,
                        help="backpropagate through the gold and the N BM25-best other candidates only (a speed setting)")
    parser.add_argument("--encoder-lr", type=float, default=BASE_ENCODER_LR,
                        help="AdamW learning rate of the transformer (FinetuneConfig.encoder_lr; default 2e-5, "
                        "the study's base; dgn train's default is 4e-5)")
    parser.add_argument("--claims-per-step", type=int, default=1,
                        help="problems per optimiser step (FinetuneConfig.claims_per_step; under torchrun "
                        "the global batch, so N processes need N or more)")
    parser.add_argument("--diversity-scales", default="none",
                        help="the DGN head's diversity scales tried on dev after training (FinetuneConfig."
                        "diversity_scales): 'none' (default, the study's base: the model as trained), 'default' "
                        "(dgn train's: dgn.sentence.config.DIVERSITY_SCALES) or comma-separated numbers; the record "
                        "then holds the test picks as trained too")
    parser.add_argument("--folds", type=int, default=None, help="cross-validate (WiCE) instead of the fixed splits")
    parser.add_argument("--top-l", type=int, default=FinetuneConfig().top_l,
                        help="cut problems to their L BM25-best candidates (default: FinetuneConfig's, 24; 0: none)")
    parser.add_argument("--lexical", action="store_true", help="both heads read the lexical match features too")
    parser.add_argument("--output", default="runs/e2e")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--summary", action="store_true", help="only print the table of the runs in --output")
    parser.add_argument("--multi-sentence", action="store_true",
                        help="with --summary: score only the claims whose every gold set holds 2 or more sentences")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="with --summary: also draw each run's recall@k and precision@k minus the listwise head's")
    args = parser.parse_args()
    args.top_l = args.top_l or None
    if args.summary:
        print(summary(Path(args.output), multi_sentence=args.multi_sentence))
        if args.plot:
            plot(Path(args.output), Path(args.plot))
        return
    torch.set_num_threads(args.threads)

    from dgn.benchmark import prepare_data, prepare_folds
    from dgn.data import read_problems
    from dgn.features.lexical import LEXICAL_FEATURES
    from dgn.metrics import evaluate_rankings
    from dgn.sentence import (
        EndToEndModel,
        finetune,
        load_sentence_model,
        rank_problems,
    )
    from dgn.sentence.config import DIVERSITY_SCALES, RENAMED_LOSSES
    from dgn.sentence.encoder import embedding_dim
    from dgn.sentence.finetune import DEFAULT_FACILITY, _default_dgn_config

    scales = {"none": None, "default": DIVERSITY_SCALES}.get(args.diversity_scales)
    if scales is None and args.diversity_scales != "none":
        scales = tuple(float(s) for s in args.diversity_scales.split(","))
    if args.facility is None:
        args.facility = DEFAULT_FACILITY
    args.facility = args.facility or None  # 0: no facility-location term

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    extra_sets = [d for d in args.also_train.split(",") if d]
    extra_train = [p for d in extra_sets
                   for p in read_problems(prepare_data(d, args.data_dir, out / f"data-{d}-0", 0)["train"])]
    for seed in [int(s) for s in args.seeds.split(",")]:
        if args.folds:
            splits = prepare_folds(args.dataset, args.data_dir, out / f"data-{args.dataset}-folds", 0, args.folds)
        else:
            splits = [prepare_data(args.dataset, args.data_dir, out / f"data-{args.dataset}-{seed}", 0,
                                   max_claims=args.max_claims)]
        for head in args.heads.split(","):
            loss = args.loss if head == "dgn" else args.listwise_loss
            if head == "dgn":
                tag = f"-{loss}-{args.init}" + (f"-tau{args.tau:g}" if args.tau else "")
                tag += f"-alpha{args.coverage_weight:g}" if args.coverage_weight is not None else ""
                tag += f"-first{args.first_layer_weight:g}" if args.first_layer_weight else ""
                tag += f"-encgrad{args.encoder_grad_scale:g}" if args.encoder_grad_scale != 1 else ""
                tag += f"-fl{args.facility:g}" if args.facility is not None else ""
            else:
                tag = f"-{loss}" if loss != "soft_label" else ""
            cut = (f"-top{args.top_l}" if args.top_l else "") + ("-lex" if args.lexical else "")
            cut += f"-ep{args.epochs}" if args.epochs != 1 else ""
            cut += f"-freeze{args.freeze_layers}" if args.freeze_layers else ""
            cut += f"-grad{args.grad_candidates}" if args.grad_candidates is not None else ""
            cut += f"-cps{args.claims_per_step}" if args.claims_per_step != 1 else ""
            cut += f"-drop{args.encoder_dropout:g}" if args.encoder_dropout is not None else ""
            cut += f"-elr{args.encoder_lr:g}" if args.encoder_lr != BASE_ENCODER_LR else ""
            cut += "".join(f"-plus-{d}" for d in extra_sets)
            if head == "dgn" and scales is not None:
                cut += "-divdev" if scales == DIVERSITY_SCALES else "-div" + "_".join(f"{s:g}" for s in scales)
            name = f"{args.dataset}{'-cv' + str(args.folds) if args.folds else ''}-{head}{tag}{cut}-seed{seed}"
            target = out / f"{name}.json"
            if target.exists():
                continue
            rankings, golds, ids, train_seconds, test_seconds, fits = [], [], [], 0.0, 0.0, []
            as_trained: list[list[int]] = []  # with a diversity choice: the test picks at scale 1
            learned: list[Any] = []  # the DGN head's learned diversity weights, per split
            for paths in splits:
                train, dev, test = (list(read_problems(paths[n])) for n in ("train", "dev", "test"))
                train += extra_train
                torch.manual_seed(seed)
                encoder = load_sentence_model()
                config = None
                if head == "dgn" and (args.tau or args.coverage_weight is not None):
                    extra = len(LEXICAL_FEATURES) if args.lexical else 0
                    config = _default_dgn_config(embedding_dim(encoder), args.init, extra)
                    if args.tau:
                        config = replace(config, tau=args.tau)
                    if args.coverage_weight is not None:
                        config = replace(config, init_weight=args.coverage_weight)
                model = EndToEndModel(encoder, head, config, init=args.init, lexical=args.lexical,
                                         facility=args.facility if head == "dgn" else None)
                # the study's run names keep the loss names of their time ('soft_label': today's 'listwise')
                ft = FinetuneConfig(seed=seed, loss=RENAMED_LOSSES.get(loss, loss), epochs=args.epochs, top_l=args.top_l,
                                    freeze_layers=args.freeze_layers, grad_candidates=args.grad_candidates,
                                    claims_per_step=args.claims_per_step, encoder_lr=args.encoder_lr,
                                    encoder_dropout=args.encoder_dropout,
                                    first_layer_weight=args.first_layer_weight if head == "dgn" else 0.0,
                                    encoder_grad_scale=args.encoder_grad_scale if head == "dgn" else 1.0,
                                    diversity_scales=scales if head == "dgn" else None)
                t0 = time.perf_counter()
                fits.append(finetune(model, train, dev, ft, progress=False).to_dict())
                t1 = time.perf_counter()
                rankings += rank_problems(model, test, 7, top_l=args.top_l, progress=False)
                learned.append(model.diversity())
                if "diversity_scale" in fits[-1]["choices"]:
                    chosen, model.diversity_scale = model.diversity_scale, 1.0
                    as_trained += rank_problems(model, test, 7, top_l=args.top_l, progress=False)
                    model.diversity_scale = chosen
                golds += [p.gold for p in test]
                ids += [p.id for p in test]
                train_seconds += t1 - t0
                test_seconds += time.perf_counter() - t1
            metrics = evaluate_rankings(rankings, golds, ks=KS, names=("recall", "precision", "f1", "strict"))
            record = {
                "name": name, "head": head, "seed": seed, "finetune": asdict(ft), "results": fits,
                "result": fits[0], "test": metrics, "train_seconds": train_seconds, "test_seconds": test_seconds,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "folds": args.folds, "top_l": args.top_l, "lexical": args.lexical,
                "dev_score": statistics.fmean(f["best_score"] for f in fits),
                "data": str(splits[0]["test"].parent.parent if args.folds else splits[0]["test"]),
                "ids": ids, "rankings": rankings,
            }
            record["diversity"] = learned
            if as_trained:
                record["rankings_as_trained"] = as_trained
                record["test_as_trained"] = evaluate_rankings(as_trained, golds, ks=KS,
                                                              names=("recall", "precision", "f1", "strict"))
                record["diversity_scales"] = [f["choices"]["diversity_scale"]["value"] for f in fits]
            target.write_text(json.dumps(record, indent=2))
            print(name, " ".join(f"R@{k} {metrics[f'recall@{k}']:.3f} P@{k} {metrics[f'precision@{k}']:.3f}"
                                 for k in KS), f"{train_seconds:.0f}s", flush=True)

def _mean_sd(runs: list[dict], metric: str) -> tuple[float, float | None]:
    """The mean of a test metric over the runs (seeds) and its sd (None for a single run)."""
    import statistics

    vals = [r["test"][metric] for r in runs]
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None


def _groups(out: Path) -> dict[str, list[dict]]:
    """The run records in ``out``, grouped by configuration (the name without its seed)."""
    from collections import defaultdict

    groups: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(out.glob("*.json")):
        record = json.loads(path.read_text())
        groups[record["name"].rsplit("-seed", 1)[0]].append(record)
    return groups


def plot(out: Path, png: Path) -> None:
    """Each configuration's recall@k and precision@k minus the listwise head's (mean over
    seeds; bars: the configuration's sd over seeds, the grey band the listwise head's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(out)
    reference = next((n for n in groups if "-listwise" in n), None)
    if reference is None:
        raise SystemExit(f"--plot: no listwise run in {out} to compare with")

    def stats(runs: list[dict], metric: str) -> tuple[list[float], list[float]]:
        pairs = [_mean_sd(runs, f"{metric}@{k}") for k in KS]
        return [m for m, _ in pairs], [sd or 0.0 for _, sd in pairs]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("recall", "precision"), strict=True):
        base, base_sd = stats(groups[reference], metric)
        ax.fill_between(KS, [-s for s in base_sd], base_sd, color="grey", alpha=0.25, label=f"{reference} ± sd")
        ax.axhline(0.0, color="grey", lw=1)
        for name, runs in groups.items():
            if name == reference:
                continue
            mean, sd = stats(runs, metric)
            ax.errorbar(KS, [m - b for m, b in zip(mean, base, strict=True)], yerr=sd, marker="o", capsize=3,
                        label=f"{name} ({len(runs)} seeds)")
        ax.set_xlabel("k")
        ax.set_ylabel(f"{metric}@k minus the listwise head's")
        ax.set_xticks(KS)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{out}: end-to-end heads against the fine-tuned encoder (listwise), mean over seeds")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    print(f"plot written to {png}")


#: Reference cosine above which a pick repeats an earlier gold pick's content (zero-shot
#: all-MiniLM-L6-v2; exact duplicates score 1.0, WiCE's reworded boilerplate about 0.9).
REPEAT_COSINE = 0.9


def redundancy(out: Path, records: list[dict]) -> dict[str, dict[str, float]]:
    """Redundancy of each run's picks, measured with one reference embedding for all runs.

    For the first k picks of every scored problem (k = 3, 5, 7), in the zero-shot
    all-MiniLM-L6-v2 embedding (the same for every model, so that runs compare):

    * ``cos@k``: the mean pairwise cosine of the picked sentences;
    * ``repeat@k``: the share of picks whose cosine with an earlier pick that is gold
      reaches :data:`REPEAT_COSINE` (a pick that repeats gold content already found);
    * ``jaccard@5``: the mean pairwise word overlap of the first 5 picks
      (:func:`dgn.benchmark.redundancy`, the benchmark's redundancy).

    Returns ``{run name: {"cos@k": ..., "repeat@k": ...}}``; the embeddings are cached in
    ``out/reference-embeddings.npz``.
    """
    import numpy as np

    from dgn.benchmark import redundancy as word_overlap
    from dgn.sentence import encode_texts, load_sentence_model

    by_id = _test_problems(records)
    texts = sorted({p.candidates[i] for r in records for pid, row in zip(r["ids"], r["rankings"], strict=True)
                    for p in [by_id[pid]] for i in row})
    cache = out / "reference-embeddings.npz"
    known: dict[str, np.ndarray] = {}
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        known = dict(zip(saved["texts"].tolist(), saved["vectors"], strict=True))
    missing = [t for t in texts if t not in known]
    if missing:
        vectors = encode_texts(load_sentence_model(), missing, progress=False)
        known.update(zip(missing, vectors, strict=True))
        keys = sorted(known)
        np.savez(cache, texts=np.array(keys), vectors=np.stack([known[t] for t in keys]))
    result = {}
    for r in records:
        sums = {f"{m}@{k}": [] for k in (3, 5, 7) for m in ("cos", "repeat")}
        for pid, row in zip(r["ids"], r["rankings"], strict=True):
            p = by_id[pid]
            if not any(p.gold):
                continue
            gold = {v for g in p.gold for v in g}
            E = np.stack([known[p.candidates[i]] for i in row]) if row else np.zeros((0, 1))
            E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
            C = E @ E.T
            for k in (3, 5, 7):
                n = min(k, len(row))
                if n >= 2:
                    sums[f"cos@{k}"].append(float(C[:n, :n][np.triu_indices(n, 1)].mean()))
                repeats = sum(
                    any(row[i] in gold and C[i, j] >= REPEAT_COSINE for i in range(j)) for j in range(n)
                )
                if n:
                    sums[f"repeat@{k}"].append(repeats / n)
        result[r["name"]] = {m: float(np.mean(v)) if v else float("nan") for m, v in sums.items()}
        scored = [(row, by_id[pid]) for pid, row in zip(r["ids"], r["rankings"], strict=True) if any(by_id[pid].gold)]
        result[r["name"]]["jaccard@5"] = word_overlap([row for row, _ in scored], [p for _, p in scored], 5)
    return result


def _test_problems(records: list[dict]) -> dict[str, Any]:
    """The scored problems of the runs, by id (from each run's recorded test files)."""
    from dgn.data import read_problems

    by_id: dict[str, Any] = {}
    for data in sorted({r["data"] for r in records}):
        path = Path(data)
        for file in sorted(path.glob("fold*/test.jsonl")) if path.is_dir() else [path]:
            for p in read_problems(file):
                by_id.setdefault(p.id, p)
    return by_id


def _multi_sentence_metrics(records: list[dict]) -> None:
    """Restrict each record to the claims whose every gold set holds 2 or more sentences
    (the claims that need several sentences): its test metrics and, for the redundancy
    measures, its ids and rankings."""
    from dgn.metrics import evaluate_rankings

    by_id = _test_problems(records)
    for r in records:
        kept = [(pid, row) for pid, row in zip(r["ids"], r["rankings"], strict=True)
                if by_id[pid].gold and min(len(g) for g in by_id[pid].gold) >= 2]
        r["ids"], r["rankings"] = [pid for pid, _ in kept], [row for _, row in kept]
        r["test"] = evaluate_rankings(r["rankings"], [by_id[pid].gold for pid in r["ids"]], ks=KS,
                                      names=("recall", "precision", "f1", "strict"))


def summary(out: Path, with_redundancy: bool = True, multi_sentence: bool = False) -> str:
    """Mean ± sd over seeds of every configuration whose runs are in ``out``: dev mean
    recall (where settings are chosen), test recall, precision and strict@k, and the
    redundancy of the picks (:func:`redundancy`)."""
    import statistics

    groups = _groups(out)
    records = [r for runs in groups.values() for r in runs if "rankings" in r]
    if multi_sentence:
        groups = {name: [r for r in runs if "rankings" in r] for name, runs in groups.items()}
        groups = {name: runs for name, runs in groups.items() if runs}
        _multi_sentence_metrics(records)
    red = redundancy(out, records) if with_redundancy and records else {}
    for r in records:
        r["test"].update(red.get(r["name"], {}))
    metrics = [f"{m}@{k}" for k in KS for m in ("recall", "precision")] + [f"strict@{k}" for k in KS]
    # cos@3 too: on CLIMATE-FEVER (5 candidates) the first 5 picks are every candidate
    metrics += ["cos@3", "cos@5", "jaccard@5", "repeat@7"] if red else []
    short = {"recall": "R", "precision": "P", "strict": "S", "cos": "cos", "repeat": "rep", "jaccard": "jac"}
    lines = ["| run | seeds | dev | train s (mean) | "
             + " | ".join(short[m.split("@")[0]] + "@" + m.split("@")[1] for m in metrics) + " |",
             "|---|---|---:|---:|" + "---:|" * len(metrics)]
    for name, runs in groups.items():
        cells = []
        for m in metrics:
            if not all(m in r["test"] for r in runs):
                cells.append("-")
                continue
            mean, sd = _mean_sd(runs, m)
            cells.append(f"{mean:.3f}" + (f" ± {sd:.3f}" if sd is not None else ""))
        seeds = ",".join(str(r["seed"]) for r in runs)
        secs = statistics.fmean(r["train_seconds"] for r in runs)
        devs = [r.get("dev_score") for r in runs]
        dev = f"{statistics.fmean(devs):.4f}" if all(d is not None for d in devs) else "-"
        lines.append(f"| {name} | {seeds} | {dev} | {secs:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
