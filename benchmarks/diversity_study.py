"""How much the DGN head should diversify, per dataset: the learned weights, and the
recall of the trained model when its diversity terms are scaled at prediction time.

For each dataset directory (the ``data/`` folder a ``dgn benchmark --finetune-encoder``
run writes: ``train.jsonl``, ``dev.jsonl``, ``test.jsonl``) and each seed, this trains
both heads as the benchmark does (``EndToEndModel`` with the lexical columns, the
library's default start and facility weight, ``FinetuneConfig(seed=seed)``), saves them
under ``OUTPUT/<dataset>/<head>-s<seed>``, and scores dev and test. The DGN head is scored
once per diversity scale ``s``: the facility-location and SCMM weights of its objective
multiplied by ``s`` (``EndToEndModel.diversity_scale``; 0: the greedy picks by the
modular term alone, a ranking; 1: the model as trained). The summary adds the row
``finetune`` gives by default: per seed the scale with the best mean dev recall. Models
already saved are loaded, not retrained (each at scale 1 and each of the others).

    python benchmarks/diversity_study.py runs/entailmentbank-full/data --seeds 0 --output runs/diversity
    python benchmarks/diversity_study.py --summary --output runs/diversity
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

KS = (1, 3, 5, 7)
SCALES = (0.0, 0.25, 0.5, 1.0, 2.0)  # dgn.sentence.config.DIVERSITY_SCALES
METRICS = ("recall", "strict")


def _problems(path: Path) -> list[Any]:
    from dgn.data import read_problems

    return [p for p in read_problems(path) if p.gold]


class Embedded:
    """A split's problems embedded once by a model, cut as prediction cuts them
    (:func:`dgn.sentence.predict.embedded_batches`), ranked by the head as it stands
    (:func:`dgn.sentence.predict.head_picks`)."""

    def __init__(self, model: Any, problems: list[Any], top_l: int | None, batch_size: int = 64):
        from dgn.sentence.predict import cut_candidates, embedded_batches

        cuts = [cut_candidates(p, top_l) for p in problems]
        self.problems = problems
        self.index = [index for _, index in cuts]
        self.batches = embedded_batches(model, [c for c, _ in cuts], batch_size=batch_size, progress=False)

    @torch.no_grad()
    def rank(self, model: Any, k: int) -> list[list[int]]:
        from dgn.sentence.predict import head_picks

        model.eval()
        out = [picks for batch in self.batches for picks, _ in head_picks(model, batch, k)]
        return [[index[j] for j in r] for r, index in zip(out, self.index, strict=True)]


def metrics(rankings: list[list[int]], problems: list[Any]) -> dict[str, float]:
    from dgn.benchmark import redundancy
    from dgn.metrics import evaluate_rankings

    run = evaluate_rankings(rankings, [p.gold for p in problems], ks=KS, names=METRICS)
    run.pop("count", None)
    run.update({f"redundancy@{k}": redundancy(rankings, problems, k) for k in KS if k > 1})
    return run


def study(data: Path, seed: int, output: Path, heads: tuple[str, ...]) -> None:
    from dgn.sentence import (
        EndToEndModel,
        FinetuneConfig,
        default_facility,
        default_init,
        finetune,
        load_sentence_model,
    )

    name = data.parent.name if data.name == "data" else data.name
    splits = {s: _problems(data / f"{s}.jsonl") for s in ("train", "dev", "test")}
    for head in heads:
        where = output / name / f"{head}-s{seed}"
        record_path = where / "study.json"
        if record_path.exists():
            print(f"{where}: done", flush=True)
            continue
        config = FinetuneConfig(seed=seed)
        started = time.perf_counter()
        if (where / "selector.json").exists():
            model = EndToEndModel.from_pretrained(where)
            seconds = None
        else:
            torch.manual_seed(seed)
            model = EndToEndModel(load_sentence_model("all-MiniLM-L6-v2"), head, lexical=True,
                                  init=default_init(head), facility=default_facility(head))
            print(f"{name}: training {head}, seed {seed}", flush=True)
            finetune(model, splits["train"], splits["dev"], config, progress=False)
            seconds = time.perf_counter() - started
            model.save_pretrained(where)
        record: dict[str, Any] = {"dataset": name, "head": head, "seed": seed, "train_seconds": seconds,
                                  "diversity": model.diversity(), "splits": {}}
        for split in ("dev", "test"):
            embedded = Embedded(model, splits[split], config.top_l)
            if head == "dgn":
                record["splits"][split] = {}
                for s in SCALES:
                    model.diversity_scale = s
                    record["splits"][split][str(s)] = metrics(embedded.rank(model, max(KS)), splits[split])
                model.diversity_scale = 1.0
            else:
                record["splits"][split] = metrics(embedded.rank(model, max(KS)), splits[split])
        record_path.write_text(json.dumps(record, indent=1))
        print(f"{where}: written ({time.perf_counter() - started:.0f} s)", flush=True)


def _line(keys: list[str], split: str, label: str, runs: list[dict[str, float]]) -> None:
    if not runs:
        return
    cells = []
    for key in keys:
        values = [run[key] for run in runs]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        cells.append(f"{statistics.fmean(values):.3f}" + (f" ± {sd:.3f}" if len(values) > 1 else ""))
    print(f"| {split} | {label} | " + " | ".join(cells) + " |")


def head_epochs(data: Path, seed: int, output: Path, epochs: int, lr: float, batch: int = 8) -> None:
    """More epochs for the DGN head alone over the trained model's frozen embeddings: the
    encoder is fixed, the training problems are embedded once (cut as training cuts them,
    the gold kept), and the head trains with the model's own loss at ``lr``; the epoch with
    the best mean dev recall is kept. Writes ``head-study.json`` beside the model: per
    epoch the dev score and the learned weights, and dev/test metrics of the best epoch at
    every scale."""
    from dgn.losses import gold_set_tensor
    from dgn.sentence import EndToEndModel, FinetuneConfig
    from dgn.sentence.predict import cut_candidates

    name = data.parent.name if data.name == "data" else data.name
    where = output / name / f"dgn-s{seed}"
    target = where / f"head-study-{epochs}x{lr:g}.json"
    if target.exists():
        print(f"{target}: done", flush=True)
        return
    model = EndToEndModel.from_pretrained(where)
    config = FinetuneConfig(seed=seed)
    splits = {s: _problems(data / f"{s}.jsonl") for s in ("train", "dev", "test")}
    started = time.perf_counter()
    train = [cut_candidates(p, config.top_l, keep_gold=True)[0] for p in splits["train"]]
    cached = Embedded(model, train, None, batch_size=batch)  # already cut, gold kept
    golds = []
    for start in range(0, len(train), batch):
        part = train[start : start + batch]
        N = max(len(p.candidates) for p in part)
        gold = torch.zeros(len(part), N, dtype=torch.bool)
        for b, p in enumerate(part):
            for g in p.gold:
                gold[b, list(g)] = True
        golds.append((gold, gold_set_tensor([p.gold for p in part], N)))
    dev = Embedded(model, splits["dev"], config.top_l)
    test = Embedded(model, splits["test"], config.top_l)
    print(f"{name} seed {seed}: embedded in {time.perf_counter() - started:.0f} s", flush=True)
    for p in model.encoder.parameters():
        p.requires_grad_(False)
    params = [p for n, p in model.named_parameters() if not n.startswith("encoder.") and p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=config.weight_decay)

    def dev_score() -> float:
        run = metrics(dev.rank(model, max(KS)), splits["dev"])
        return statistics.fmean(run[f"recall@{k}"] for k in config.eval_ks)

    history = [{"epoch": 0, "dev": dev_score(), "diversity": model.diversity()}]
    best = (history[0]["dev"], 0, {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("encoder.")})
    g = torch.Generator().manual_seed(seed)
    for epoch in range(1, epochs + 1):
        model.train()
        for i in torch.randperm(len(cached.batches), generator=g).tolist():
            q, S, mask, lex = cached.batches[i]
            gold, sets = golds[i]
            loss = model.loss(q, S, mask, gold, config.loss, lexical=lex, gold_sets=sets,
                              first_layer_weight=config.first_layer_weight)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
        score = dev_score()
        history.append({"epoch": epoch, "dev": score, "diversity": model.diversity()})
        print(f"  epoch {epoch}: dev {score:.4f} {model.diversity()}", flush=True)
        if score > best[0]:
            best = (score, epoch, {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("encoder.")})
    model.load_state_dict(best[2], strict=False)
    record: dict[str, Any] = {"dataset": name, "seed": seed, "epochs": epochs, "lr": lr, "best_epoch": best[1],
                              "history": history, "diversity": model.diversity(), "splits": {},
                              "seconds": time.perf_counter() - started}
    for split, embedded in (("dev", dev), ("test", test)):
        record["splits"][split] = {}
        for s in SCALES:
            model.diversity_scale = s
            record["splits"][split][str(s)] = metrics(embedded.rank(model, max(KS)), splits[split])
        model.diversity_scale = 1.0
    target.write_text(json.dumps(record, indent=1))
    print(f"{target}: written ({record['seconds']:.0f} s, best epoch {best[1]})", flush=True)


def per_problem(data: Path, seed: int, output: Path, k: int = 5) -> None:
    """Where diversity helps, problem by problem: the saved DGN's recall@k with its diversity
    (scale 1) minus without (scale 0) on the test and dev problems, against each problem's
    pool similarity (the mean pairwise cosine of its candidates, after the cut; known at
    prediction time) and its largest gold set's size (not known then), as Spearman
    correlations."""
    from scipy.stats import spearmanr

    from dgn.metrics import recall_at_k
    from dgn.sentence import EndToEndModel, FinetuneConfig

    name = data.parent.name if data.name == "data" else data.name
    model = EndToEndModel.from_pretrained(output / name / f"dgn-s{seed}").eval()
    problems = _problems(data / "test.jsonl") + _problems(data / "dev.jsonl")
    embedded = Embedded(model, problems, FinetuneConfig().top_l)
    ranks = {}
    for s in (0.0, 1.0):
        model.diversity_scale = s
        ranks[s] = embedded.rank(model, k)
    model.diversity_scale = 1.0
    spread = []
    for _, S, mask, _ in embedded.batches:
        unit = torch.nn.functional.normalize(S, dim=-1)
        cos = unit @ unit.transpose(1, 2)
        for b in range(S.shape[0]):
            n = int(mask[b].sum())
            spread.append(float(cos[b, :n, :n][~torch.eye(n, dtype=torch.bool)].mean()) if n > 1 else 0.0)
    delta = [recall_at_k(r1, p.gold, k) - recall_at_k(r0, p.gold, k)
             for r0, r1, p in zip(ranks[0.0], ranks[1.0], problems, strict=True)]
    size = [max(len(g) for g in p.gold) for p in problems]
    rho, p_rho = spearmanr(spread, delta)
    rho_size, p_size = spearmanr(size, delta)
    print(f"{name} seed {seed}: {len(problems)} problems; R@{k} with minus without diversity: mean "
          f"{statistics.fmean(delta):+.4f}, helps {sum(d > 0 for d in delta)}, hurts {sum(d < 0 for d in delta)}; "
          f"Spearman with the pool's mean cosine {rho:+.3f} (p {p_rho:.2g}), with the gold set's size "
          f"{rho_size:+.3f} (p {p_size:.2g})", flush=True)


def summary(output: Path) -> None:
    records = [json.loads(p.read_text()) for p in sorted(output.glob("*/*/study.json"))]
    for name in sorted({r["dataset"] for r in records}):
        mine = [r for r in records if r["dataset"] == name]
        dgn = [r for r in mine if r["head"] == "dgn"]
        ranker = [r for r in mine if r["head"] == "listwise"]
        print(f"\n## {name}: {len(dgn)} DGN seeds, {len(ranker)} listwise seeds")
        for r in dgn:
            d = r["diversity"]
            print(f"seed {r['seed']}: learned scmm {d['scmm']:.3f} facility {d['facility']:.3f} alpha {d['alpha']:.4f}")
        keys = [f"recall@{k}" for k in KS] + [f"strict@{k}" for k in KS[1:]] + ["redundancy@5"]
        print("| split | row | " + " | ".join(keys) + " |")
        print("|---|---|" + "---:|" * len(keys))

        from dgn.sentence.config import FinetuneConfig
        from dgn.sentence.predict import best_scale

        eval_ks = FinetuneConfig().eval_ks
        chosen = []
        for r in dgn:
            dev = {float(s): statistics.fmean(m[f"recall@{k}"] for k in eval_ks) for s, m in r["splits"]["dev"].items()}
            chosen.append(best_scale(dev))
        print("scale chosen on dev per seed (as finetune chooses it):", ", ".join(f"{s:g}" for s in chosen))
        for split in ("dev", "test"):
            _line(keys, split, "listwise", [r["splits"][split] for r in ranker])
            _line(keys, split, "DGN, scale chosen on dev",
                  [r["splits"][split][str(s)] for r, s in zip(dgn, chosen, strict=True)])
            for s in SCALES:
                _line(keys, split, f"DGN s={s}", [r["splits"][split][str(s)] for r in dgn])


def _wice(records_dir: Path | None) -> list[dict[str, Any]]:
    """``benchmarks/finetune_seeds.py --diversity-scales default`` records (WiCE's folds)."""
    if records_dir is None:
        return []
    return [r for r in (json.loads(p.read_text()) for p in sorted(records_dir.glob("*-divdev-*.json")))
            if r.get("diversity_scales")]


def plot(output: Path, wice_dir: Path | None, png: Path) -> None:
    """Three panels per dataset: the learned weights, the scale chosen on dev, and test
    recall against the listwise head, as trained and at the chosen scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dgn.sentence.config import FinetuneConfig
    from dgn.sentence.predict import best_scale

    records = [json.loads(p.read_text()) for p in sorted(output.glob("*/*/study.json"))]
    names = sorted({r["dataset"] for r in records})
    label = {"entailmentbank-full": "EntailmentBank", "multirc": "MultiRC", "scifact": "SciFact", "wice": "WiCE"}
    learned: dict[str, list[dict[str, float]]] = {n: [r["diversity"] for r in records
                                                      if r["dataset"] == n and r["head"] == "dgn"] for n in names}
    chosen: dict[str, list[float]] = {}
    eval_ks = FinetuneConfig().eval_ks
    for n in names:
        chosen[n] = [best_scale({float(s): statistics.fmean(m[f"recall@{k}"] for k in eval_ks)
                                 for s, m in r["splits"]["dev"].items()})
                     for r in records if r["dataset"] == n and r["head"] == "dgn"]
    wice = _wice(wice_dir)
    if wice:
        names.append("wice")
        learned["wice"] = [d for r in wice for d in r.get("diversity", [])]
        chosen["wice"] = [s for r in wice for s in r["diversity_scales"]]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    x = range(len(names))
    for offset, key, start, color in ((-0.2, "facility", 3.0, "tab:blue"), (0.2, "scmm", 1.0, "tab:orange")):
        means = [statistics.fmean(d[key] for d in learned[n]) if learned[n] else float("nan") for n in names]
        axes[0].bar([i + offset for i in x], means, width=0.4, color=color,
                    label=f"{'facility location' if key == 'facility' else 'SCMM'} weight (starts at {start:g})")
        for i, n in enumerate(names):
            axes[0].scatter([i + offset] * len(learned[n]), [d[key] for d in learned[n]], color="black", s=8, zorder=3)
    axes[0].set_xticks(list(x), [label.get(n, n) for n in names])
    axes[0].set_title("learned diversity weights (one epoch)")
    axes[0].legend(fontsize=8)
    for i, n in enumerate(names):
        values = chosen[n]
        counts = {v: values.count(v) for v in sorted(set(values))}
        axes[1].scatter([i] * len(counts), list(counts), s=[40 * c for c in counts.values()], color="tab:green")
    axes[1].set_xticks(list(x), [label.get(n, n) for n in names])
    axes[1].set_yticks(list(SCALES))
    axes[1].set_ylabel("diversity scale")
    axes[1].set_title("scale chosen on dev (dot size: runs)")
    width = 0.2
    test_names = [n for n in names if n != "wice"]
    for j, (k, rows) in enumerate(((5, "as trained"), (7, "as trained"), (5, "chosen"), (7, "chosen"))):
        diffs = []
        for n in test_names:
            dgn = [r for r in records if r["dataset"] == n and r["head"] == "dgn"]
            ranker = [r for r in records if r["dataset"] == n and r["head"] == "listwise"]
            if not ranker:
                diffs.append(float("nan"))
                continue
            base = statistics.fmean(r["splits"]["test"][f"recall@{k}"] for r in ranker)
            scales = ["1.0"] * len(dgn) if rows == "as trained" else [str(s) for s in chosen[n]]
            diffs.append(statistics.fmean(r["splits"]["test"][s][f"recall@{k}"] for r, s in zip(dgn, scales,
                                                                                                 strict=True)) - base)
        axes[2].bar([i + (j - 1.5) * width for i in range(len(test_names))], diffs, width=width,
                    label=f"R@{k}, {rows}", color=("tab:red" if rows == "as trained" else "tab:green"),
                    alpha=0.5 if k == 5 else 1.0)
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xticks(range(len(test_names)), [label.get(n, n) for n in test_names])
    axes[2].set_title("test recall: DGN minus the listwise head")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="*", type=Path, help="benchmark data/ folders (train, dev, test .jsonl)")
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds")
    parser.add_argument("--heads", default="dgn,listwise")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--summary", action="store_true")
    parser.add_argument("--head-epochs", type=int, default=0,
                        help="train the saved DGN heads this many more epochs over frozen embeddings (head_epochs)")
    parser.add_argument("--head-lr", type=float, default=1e-3)
    parser.add_argument("--per-problem", action="store_true",
                        help="where diversity helps, problem by problem, on the saved DGN models (per_problem)")
    parser.add_argument("--wice", type=Path, default=None,
                        help="with --plot: the finetune_seeds.py --diversity-scales default output of WiCE's folds")
    parser.add_argument("--plot", type=Path, default=None, help="with --summary: draw the study's figure here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.summary:
        summary(args.output)
        if args.plot:
            plot(args.output, args.wice, args.plot)
        return
    for data in args.data:
        for seed in (int(s) for s in args.seeds.split(",")):
            if args.per_problem:
                per_problem(data, seed, args.output)
            elif args.head_epochs:
                head_epochs(data, seed, args.output, args.head_epochs, args.head_lr)
            else:
                study(data, seed, args.output, tuple(args.heads.split(",")))


if __name__ == "__main__":
    main()
