"""End-to-end training and prediction speed on the CPU: what makes them faster, at what cost.

Training: :func:`dgn.sentence.finetune` (one epoch, ``dgn train``'s DGN head, see
:func:`_default_model`, and ``FinetuneConfig()``) over the same ``--claims`` training problems per timed block, each
variant run in turn, ``--rounds`` times, in one process (so that every variant sees the
same machine; the median block is reported, with its ratio to the first variant):

* ``one-pass``: every text of a step (the claim and its up to 24 candidates) in one
  transformer pass, padded to the longest, and AdamW's per-tensor loop (the epoch as it
  was before buckets and the fused optimiser);
* ``buckets``: the texts in length-sorted buckets of ``TRAIN_BUCKET`` (8), the default:
  the same embeddings up to float rounding (the attention mask keeps padding out), and
  AdamW's fused kernel (``FUSED_ADAMW``), the default;
* ``+loop`` (combinable with the rest): AdamW's per-tensor loop instead of its fused
  kernel (the same update up to float rounding);
* ``buckets+bf16``: the same under ``torch.autocast("cpu", torch.bfloat16)``;
* ``buckets+compile``: the transformer through ``torch.compile(dynamic=True)`` (its
  compilation timed apart, in the first block);
* ``buckets+freezeN``: the token embeddings and the bottom N transformer layers fixed
  (``FinetuneConfig.freeze_layers = N``): no backward pass below layer N;
* ``buckets+gradM`` (combinable with ``freezeN``): only the claim, the gold and the M
  BM25-best other candidates embedded with gradients, the rest without
  (``FinetuneConfig.grad_candidates = M``);
* ``+nodrop`` (combinable with the above): the transformer trained without dropout
  (``FinetuneConfig.encoder_dropout = 0``);
* ``+cpsN`` (combinable with the above): N claims per optimiser step
  (``FinetuneConfig.claims_per_step = N``) in one process;
* ``+ddpN`` (combinable with the above but ``compile``): N processes of one thread each, data parallel as
  under ``torchrun`` (gloo, :mod:`dgn.distributed`), with a global batch of N claims per
  step: the steps of ``+cpsN`` in one process, up to the order of float sums. Each block
  starts the processes afresh (a fresh model, an untimed warm-up block, then the timed
  one); the block's seconds are rank 0's, between two barriers.

``--optimizer``: AdamW's step alone over the model's parameters (all of them, then those
left with the bottom 2 layers frozen), given random gradients, with the per-tensor loop and
with the fused kernel, and the gradient-norm clipping beside it. ``--profile``: ``cProfile``
over one epoch of the first variant (after a warm-up epoch), the 45 costliest calls.

Prediction: :func:`dgn.sentence.rank_problems` on ``--predict`` test problems (every text
embedded once, no gradients, batches of 64 sorted by length), in float32 and with the
transformer's linear layers quantized to int8 (``torch.ao.quantization.quantize_dynamic``),
with the recall@k of each so that speed and quality are read together (``--model DIR``: a
trained end-to-end model; default the untrained listwise head, the zero-shot cosine).

    python benchmarks/finetune_speed.py --dataset wice --claims 24 --rounds 3
    python benchmarks/finetune_speed.py --dataset fm2 --model runs/fm2-e2e --predict 1380 --skip-training
    python benchmarks/finetune_speed.py --optimizer --skip-training --predict 0
    python benchmarks/finetune_speed.py --profile --variants buckets+freeze2 --predict 0
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import re
import statistics
import time
from pathlib import Path

import torch

VARIANTS = ("one-pass", "buckets", "buckets+bf16", "buckets+compile")


def _problems(dataset: str, data_dir: str, work: Path) -> tuple[list, list]:
    """Training and test problems of the dataset's first split (WiCE and CLIMATE-FEVER:
    the benchmark's first fold)."""
    from dgn.benchmark import DATASET_SPLITS, prepare_data, prepare_folds
    from dgn.data import read_problems

    if DATASET_SPLITS[dataset]["test"] is None:
        paths = prepare_folds(dataset, data_dir, work / f"data-{dataset}-folds", 0, 5)[0]
    else:
        paths = prepare_data(dataset, data_dir, work / f"data-{dataset}-0", 0)
    train = [p for p in read_problems(paths["train"]) if any(p.gold)]
    test = [p for p in read_problems(paths["test"]) if any(p.gold)]
    return train, test


def _default_model():
    """The DGN head ``dgn train`` trains: its default start and facility-location term."""
    from dgn.sentence import EndToEndModel, default_facility, default_init, load_sentence_model

    return EndToEndModel(load_sentence_model(), "dgn", init=default_init("dgn"), facility=default_facility("dgn"))


def _config(variant: str):
    """The :class:`FinetuneConfig` a variant name asks for."""
    from dgn.sentence import FinetuneConfig

    frozen = re.search(r"freeze(\d+)", variant)
    grad = re.search(r"grad(\d+)", variant)
    step = re.search(r"(?:cps|ddp)(\d+)", variant)
    return FinetuneConfig(freeze_layers=int(frozen.group(1)) if frozen else 0,
                          encoder_dropout=0.0 if "nodrop" in variant.split("+") else None,
                          grad_candidates=int(grad.group(1)) if grad else None,
                          claims_per_step=int(step.group(1)) if step else 1)


def _ddp_worker(rank: int, world: int, port: int, problems: list, variant: str, out: str) -> None:
    """One process of a ``+ddpN`` block: join the group, warm up, time one block."""
    import os

    import torch.distributed as dist

    from dgn import distributed
    from dgn.sentence import finetune

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    distributed.process_group("cpu")
    torch.manual_seed(0)
    model = _default_model()
    cfg = _config(variant)
    with _variant_context(variant):
        finetune(model, problems, None, cfg, progress=False)  # warm-up, not timed
        dist.barrier()
        start = time.perf_counter()
        finetune(model, problems, None, cfg, progress=False)
        dist.barrier()
    if rank == 0:
        Path(out).write_text(str(time.perf_counter() - start))
    dist.destroy_process_group()


def _ddp_block(problems, variant: str) -> float:
    """Seconds of one ``+ddpN`` block (see the module docstring)."""
    import socket
    import tempfile

    import torch.multiprocessing as mp

    world = int(re.search(r"ddp(\d+)", variant).group(1))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "seconds")
        mp.spawn(_ddp_worker, args=(world, port, problems, variant, out), nprocs=world)
        return float(Path(out).read_text())


@contextlib.contextmanager
def _variant_context(variant: str):
    """What a variant changes around :func:`finetune` besides its config, in one process or
    in each ``+ddpN`` process: ``one-pass`` turns the buckets and the fused AdamW off,
    ``loop`` the fused AdamW, ``bf16`` autocasts."""
    import importlib

    finetune_module = importlib.import_module("dgn.sentence.finetune")
    bucket, fused = finetune_module.TRAIN_BUCKET, finetune_module.FUSED_ADAMW
    parts = variant.split("+")
    if "one-pass" in parts:
        finetune_module.TRAIN_BUCKET = None
    if "one-pass" in parts or "loop" in parts:
        finetune_module.FUSED_ADAMW = False
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if "bf16" in variant else contextlib.nullcontext()
    try:
        with autocast:
            yield
    finally:
        finetune_module.TRAIN_BUCKET, finetune_module.FUSED_ADAMW = bucket, fused


def _train_block(model, problems, variant: str) -> float:
    """Seconds of one epoch of :func:`finetune` over ``problems`` in ``variant``."""
    from dgn.sentence import finetune

    if "ddp" in variant:
        return _ddp_block(problems, variant)
    with _variant_context(variant):
        start = time.perf_counter()
        finetune(model, problems, None, _config(variant), progress=False)
        return time.perf_counter() - start


def train_speed(problems: list, variants: list[str], rounds: int) -> None:
    from dgn.sentence.finetune import cut_candidates

    texts = sum(1 + len(cut_candidates(p, 24, keep_gold=True)[0].candidates) for p in problems)
    torch.manual_seed(0)
    base = _default_model()
    models = {}
    for variant in variants:
        if "ddp" in variant:
            if "compile" in variant:
                raise SystemExit(f"--variants {variant}: +ddpN does not combine with compile")
            continue  # its processes build their own model
        models[variant] = copy.deepcopy(base)
        if "compile" in variant:
            inner = models[variant].encoder[0]
            inner.auto_model = torch.compile(inner.auto_model, dynamic=True)
    times: dict[str, list[float]] = {v: [] for v in variants}
    first: dict[str, float] = {}
    for r in range(rounds + 1):  # round 0 warms up (and compiles); not counted
        for variant in variants:
            seconds = _train_block(models.get(variant), problems, variant)
            if r == 0:
                first[variant] = seconds
            else:
                times[variant].append(seconds)
    print(f"training: {len(problems)} claims ({texts} texts) a block, "
          f"{rounds} blocks a variant, {torch.get_num_threads()} threads")
    print("| variant | claims/s | sentences/s | ratio | first block s |")
    print("|---|---:|---:|---:|---:|")
    ref = statistics.median(times[variants[0]])
    for variant in variants:
        med = statistics.median(times[variant])
        print(f"| {variant} | {len(problems) / med:.2f} | {texts / med:.1f} | {ref / med:.2f} | {first[variant]:.0f} |")


def optimizer_speed(steps: int = 10) -> None:
    """Median seconds of AdamW's step, per-tensor loop against fused kernel (see the module docstring)."""
    from torch import nn

    from dgn.sentence.finetune import frozen_bottom

    model = _default_model()
    print("| trained parameters | AdamW loop ms | fused ms | ratio | clip ms |")
    print("|---|---:|---:|---:|---:|")
    for layers in (0, 2):
        with frozen_bottom(model, layers):
            params = [p for p in model.parameters() if p.requires_grad]
            ms = {}
            for fused in (None, True):
                optimizer = torch.optim.AdamW(params, lr=1e-9, weight_decay=0.01, fused=fused)
                for p in params:
                    p.grad = torch.randn_like(p) * 1e-3
                step, clip = [], []
                for _ in range(steps + 2):  # the first two (state allocation) not counted
                    start = time.perf_counter()
                    nn.utils.clip_grad_norm_(params, 1.0)
                    middle = time.perf_counter()
                    optimizer.step()
                    step.append(time.perf_counter() - middle)
                    clip.append(middle - start)
                ms[fused] = 1e3 * statistics.median(step[2:])
                ms["clip"] = 1e3 * statistics.median(clip[2:])
            model.zero_grad(set_to_none=True)
            count = sum(p.numel() for p in params)
            print(f"| {count / 1e6:.1f}M (bottom {layers} frozen) | {ms[None]:.1f} | {ms[True]:.1f} | "
                  f"{ms[None] / ms[True]:.1f}x | {ms['clip']:.1f} |")


def profile_block(problems: list, variant: str) -> None:
    """``cProfile`` over one epoch of ``variant`` (after an untimed one), the 45 costliest calls."""
    import cProfile
    import pstats

    if "ddp" in variant:
        raise SystemExit(f"--profile --variants {variant}: profiles one process; drop +ddpN")
    model = _default_model()
    _train_block(model, problems, variant)  # warm-up
    profiler = cProfile.Profile()
    profiler.enable()
    seconds = _train_block(model, problems, variant)
    profiler.disable()
    print(f"profile of {variant}: {len(problems)} claims, {seconds:.2f} s, {torch.get_num_threads()} threads")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)


def predict_speed(problems: list, model_dir: str | None, rounds: int) -> None:
    from dgn.metrics import evaluate_rankings
    from dgn.sentence import EndToEndModel, load_sentence_model, rank_problems

    torch.manual_seed(0)
    model = EndToEndModel(load_sentence_model(), "listwise") if model_dir is None else \
        EndToEndModel.from_pretrained(model_dir)
    top_l = model.top_l if model_dir is not None else 24
    quantized = copy.deepcopy(model)
    quantized.encoder = torch.ao.quantization.quantize_dynamic(quantized.encoder, {torch.nn.Linear}, dtype=torch.qint8)
    texts = sum(1 + min(len(p.candidates), top_l or len(p.candidates)) for p in problems)
    print(f"prediction: {len(problems)} claims ({texts} texts), top_l {top_l}, "
          f"{'untrained listwise head (zero-shot cosine)' if model_dir is None else model_dir}")
    print("| model | claims/s | sentences/s | ratio | R@1 | R@3 | R@5 | R@7 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ref = None
    for name, m in (("float32", model), ("int8 dynamic", quantized)):
        seconds, picks = [], None
        for _ in range(rounds):
            start = time.perf_counter()
            picks = rank_problems(m, problems, 7, top_l=top_l, progress=False)
            seconds.append(time.perf_counter() - start)
        med = statistics.median(seconds)
        ref = ref or med
        scores = evaluate_rankings(picks, [p.gold for p in problems], ks=(1, 3, 5, 7))
        print(f"| {name} | {len(problems) / med:.2f} | {texts / med:.1f} | {ref / med:.2f} | "
              + " | ".join(f"{scores[f'recall@{k}']:.3f}" for k in (1, 3, 5, 7)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="wice")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--work", default="runs/speed")
    parser.add_argument("--claims", type=int, default=24, help="training claims a timed block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--predict", type=int, default=64, help="test claims to predict (0: skip)")
    parser.add_argument("--model", default=None, help="a trained end-to-end model for the prediction part")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", action="store_true", help="time AdamW's step alone, loop against fused")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile one epoch of the first of --variants instead of timing them")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train, test = _problems(args.dataset, args.data_dir, Path(args.work))
    print(f"torch {torch.__version__}, {args.dataset}")
    if args.optimizer:
        optimizer_speed()
    if args.profile:
        profile_block(train[: args.claims], args.variants.split(",")[0])
    elif not args.skip_training:
        train_speed(train[: args.claims], args.variants.split(","), args.rounds)
    if args.predict:
        predict_speed(test[: args.predict], args.model, args.rounds)


if __name__ == "__main__":
    main()
