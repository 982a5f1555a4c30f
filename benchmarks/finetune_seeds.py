"""End to end through a pretrained sentence encoder: the DGN head against the listwise head.

Both heads fine-tune the same all-MiniLM-L6-v2 on the same problems with the same budget
(one epoch, one claim per step, AdamW 2e-5 for the transformer), one run per seed; each
run's test scores go to OUTPUT/<dataset>-<head>-<loss>-seed<S>.json as it finishes.

    python benchmarks/finetune_seeds.py --dataset fm2 --heads listwise,dgn --seeds 0,1,2 --output runs/e2e
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fm2")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--heads", default="listwise,dgn")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--loss", default="soft_label", help="the DGN head's loss")
    parser.add_argument("--tau", type=float, default=None, help="the DGN head's temperature (default: the init's)")
    parser.add_argument("--init", default="cosine", help="how the DGN head starts: cosine or coverage")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--output", default="runs/e2e")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dgn.benchmark import prepare_data
    from dgn.data import read_problems
    from dgn.metrics import evaluate_rankings
    from dgn.sentence import (
        EndToEndSelector,
        FinetuneConfig,
        finetune,
        load_sentence_model,
        rank_problems,
    )
    from dgn.sentence.encoder import embedding_dim
    from dgn.sentence.finetune import _default_dgn_config

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for seed in [int(s) for s in args.seeds.split(",")]:
        paths = prepare_data(args.dataset, args.data_dir, out / f"data-{args.dataset}-{seed}", 0)
        train, dev, test = (list(read_problems(paths[n])) for n in ("train", "dev", "test"))
        for head in args.heads.split(","):
            tag = f"-{args.loss}-{args.init}" + (f"-tau{args.tau:g}" if args.tau else "")
            name = f"{args.dataset}-{head}" + (tag if head == "dgn" else "") + f"-seed{seed}"
            target = out / f"{name}.json"
            if target.exists():
                continue
            torch.manual_seed(seed)
            encoder = load_sentence_model()
            config = None
            if head == "dgn" and args.tau:
                config = replace(_default_dgn_config(embedding_dim(encoder), args.init), tau=args.tau)
            model = EndToEndSelector(encoder, head, config, init=args.init)
            ft = FinetuneConfig(seed=seed, loss=args.loss, epochs=args.epochs)
            t0 = time.perf_counter()
            result = finetune(model, train, dev, ft, progress=False)
            t1 = time.perf_counter()
            rankings = rank_problems(model, test, 7, progress=False)
            t2 = time.perf_counter()
            metrics = evaluate_rankings(rankings, [p.gold for p in test], ks=(1, 3, 5, 7))
            record = {
                "name": name, "head": head, "seed": seed, "finetune": asdict(ft), "result": result.to_dict(),
                "test": metrics, "train_seconds": t1 - t0, "test_seconds": t2 - t1,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "splits": [len(train), len(dev), len(test)],
            }
            target.write_text(json.dumps(record, indent=2))
            print(name, " ".join(f"R@{k} {metrics[f'recall@{k}']:.3f} P@{k} {metrics[f'precision@{k}']:.3f}"
                                 for k in (1, 3, 5, 7)), f"{t1 - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
