"""The one training loop: every model of the library trains through :func:`fit`.

A :class:`Task` says what is trained (the model, its optimiser, a step's loss, the dev
metrics, settings held for the run such as frozen layers or an annealed temperature); the
loop owns the rest, the same for all: the seeded order of problems, the split of each
global batch across torchrun's processes, gradient averaging and clipping, the
learning-rate schedule, dev evaluation after each epoch, patience, the best epoch's weights
restored at the end, the training state written after every epoch and every ``save_every``
steps with every process's random state (so a run resumes exactly), the history, and
progress (bars on a terminal, a line a minute in a log file).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from dgn.errors import DgnUserError
from dgn.training.clip import clip_gradients
from dgn.training.state import (
    check_resumable,
    load_training_state,
    rng_state,
    saved_rng,
    write_training_state,
)

__all__ = ["Task", "TrainResult", "fit", "LOG_EVERY_SECONDS", "check_global_batch", "check_save_every", "usable_problems"]

#: Where progress bars are off (output to a file), a progress line at most this often.
LOG_EVERY_SECONDS = 60.0


@dataclass
class TrainResult:
    """What a training run did: per-epoch history, the best epoch and its dev scores.

    ``seconds`` is the whole run's time (dev evaluations included, over resumes);
    ``seconds_per_epoch`` the training steps' time per epoch run, without the dev
    evaluation. ``choices``: settings chosen on the dev split after training, by name,
    each with what chose it (e.g. ``{"diversity_scale": {"value": 0.5, "dev_scores":
    {...}}}`` from :func:`dgn.sentence.finetune`); empty when nothing was chosen."""

    best_epoch: int
    best_score: float
    best_metrics: dict[str, float]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    seconds_per_epoch: float = 0.0
    choices: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Task:
    """What :func:`fit` trains. Subclasses set the attributes and implement :meth:`loss`,
    :meth:`optimizer` and :meth:`dev_metrics`; the hooks have defaults.

    Attributes:
        model: The module trained (its ``state_dict`` is saved and restored).
        config: The task's config dataclass, recorded in the state; it has ``epochs``,
            ``seed``, ``patience`` (0: never stop early), ``max_grad_norm`` and
            ``eval_ks`` (the dev score is the mean recall at these cutoffs).
        kind: ``model_kind`` recorded in the state.
        batch_size: Problems per optimiser step (the global batch under torchrun).
        num_problems: Training problems (indices ``0 .. num_problems - 1`` of :meth:`loss`).
        resumable: Config fields a resumed run may change.
        recorded_before: Values that config fields newer than a saved state had in effect.
        batch_option: The option that sets ``batch_size``, for messages.
    """

    model: nn.Module
    config: Any
    kind: str
    batch_size: int
    num_problems: int
    resumable: tuple[str, ...] = ()
    recorded_before: dict[str, Any] = {}
    batch_option: str = "--batch-size"

    def settings(self) -> dict[str, Any]:
        """The model's settings; a resumed run's must equal the saved run's."""
        raise NotImplementedError

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        """The optimiser and its learning-rate schedule (None: none) for ``total_steps`` steps."""
        raise NotImplementedError

    def loss(self, problems: Sequence[int]) -> torch.Tensor:
        """The mean loss of these training problems (a scalar with a graph)."""
        raise NotImplementedError

    def dev_metrics(self, progress: bool) -> dict[str, float] | None:
        """The dev metrics of the model as it is (``recall@k`` for every k of ``eval_ks``
        at least), the same on every process; None: no dev set."""
        raise NotImplementedError

    def run(self) -> contextlib.AbstractContextManager[Any]:
        """Held for the whole run (e.g. frozen layers, compiled kernels)."""
        return contextlib.nullcontext()

    def epoch(self, epoch: int) -> contextlib.AbstractContextManager[Any]:
        """Held while the training steps of ``epoch`` run (e.g. an annealed temperature)."""
        return contextlib.nullcontext()

    @property
    def device(self) -> torch.device:
        param = next(self.model.parameters(), None)
        return torch.device("cpu") if param is None else param.device


def check_save_every(save_every: int | None) -> None:
    """A ``save_every`` that is None or a positive integer, else a user error."""
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, int) or save_every <= 0):
        raise DgnUserError(f"--save-every must be a positive integer (optimiser steps), got {save_every!r}")


def check_global_batch(batch_size: int, world: int, option: str) -> None:
    """Every process needs a problem of each full global batch (a short last one may leave some idle)."""
    if batch_size < world:
        raise DgnUserError(
            f"{option} {batch_size}: the global batch is smaller than the {world} processes "
            f"(each takes a slice of it); give at least {world}"
        )


class _Progress:
    """A bar per epoch where bars are on; else, with ``progress``, a line on stdout at most
    every :data:`LOG_EVERY_SECONDS` (so a log file shows how a long epoch goes)."""

    def __init__(self, progress: bool, epoch: int, epochs: int, first: int, steps: int) -> None:
        from tqdm.auto import tqdm

        from dgn._progress import bars

        self.epoch, self.epochs, self.steps = epoch, epochs, steps
        self.lines = progress and not bars(progress)
        self.bar = tqdm(total=steps, initial=first, desc=f"epoch {epoch}/{epochs}", disable=not bars(progress),
                        leave=False)
        self.last = time.perf_counter()

    def step(self, done: int, loss: float) -> None:
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}")
        if self.lines and time.perf_counter() - self.last >= LOG_EVERY_SECONDS:
            self.last = time.perf_counter()
            print(f"epoch {self.epoch}/{self.epochs}: step {done}/{self.steps}, train loss {loss:.4f}", flush=True)

    def close(self) -> None:
        self.bar.close()


def fit(
    task: Task,
    *,
    on_best: Callable[[nn.Module, int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    progress: bool = True,
    state_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    save_every: int | None = None,
    extra_state: dict[str, Any] | None = None,
) -> TrainResult:
    """Train ``task.model``; keep the epoch with the best mean dev recall.

    The model trains on the device its parameters are on. Under ``torchrun`` (the process
    group joined, :func:`dgn.distributed.process_group`) every process runs this with the
    same task: ``task.batch_size`` stays the global batch, each process computes the loss
    of its contiguous slice (:func:`dgn.distributed.local_slice`) weighted by its share,
    the gradients are summed in one all-reduce, and every process clips and steps alike.
    Only rank 0 calls ``on_best`` and writes the training state.

    Args:
        task: What is trained.
        on_best: Called with ``(model, epoch, dev_metrics)`` whenever the dev score
            improves, and once at the end without a dev set (e.g. to save a checkpoint).
        on_step: Called with ``(epoch, step)`` after every optimiser step (``step`` counts
            from 1 within the epoch), after the state of ``save_every`` is written.
        progress: Progress bars (or, where bars are off, a line a minute) and a line per
            epoch, on rank 0.
        state_path: Write the whole training state here (:mod:`dgn.training.state`)
            after every epoch and every ``save_every`` steps, atomically.
        resume: Continue from the state in ``state_path``: with the same task the run
            ends with exactly the weights of an uninterrupted one (one process, CPU, same
            thread count; under torchrun up to the order of float sums).
        save_every: Also write the state every this many optimiser steps within an epoch
            (None: at epoch ends only).
        extra_state: JSON-like values stored in the state (e.g. the run's files).

    Returns:
        A :class:`TrainResult`; the model holds the best epoch's weights, in eval mode.

    On Linux (glibc) the first call raises malloc's mmap and trim thresholds for the
    process (:mod:`dgn._memory`), so that memory freed by one step is reused by the next;
    ``DGN_RETAIN_MEMORY=0`` in the environment turns this off.

    Raises:
        DgnUserError: ``resume`` without a readable state or from another model or
            config, a global batch smaller than the number of processes, a bad
            ``save_every``.
    """
    from dgn import distributed
    from dgn._memory import retain_freed_memory

    retain_freed_memory()
    world, main = distributed.world_size(), distributed.is_main()
    check_global_batch(task.batch_size, world, task.batch_option)
    check_save_every(save_every)
    if resume and state_path is None:
        raise ValueError("resume=True needs a state_path")
    if task.num_problems == 0:
        raise DgnUserError("no training problem has gold evidence; nothing to train on")
    with task.run():
        return _fit(task, world, main, on_best, on_step, progress and main, state_path, resume, save_every,
                    extra_state)


def _fit(task: Task, world: int, main: bool, on_best: Any, on_step: Any, progress: bool, state_path: Any,
         resume: bool, save_every: int | None, extra_state: dict[str, Any] | None) -> TrainResult:
    from tqdm.auto import tqdm

    from dgn import distributed

    cfg, model, device = task.config, task.model, task.device
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    steps_per_epoch = math.ceil(task.num_problems / task.batch_size)
    optimizer, schedule = task.optimizer(steps_per_epoch * cfg.epochs)
    result = TrainResult(best_epoch=-1, best_score=-math.inf, best_metrics={})
    best_state: dict[str, torch.Tensor] | None = None
    done, first_step, partial, stale = 0, 0, (0.0, 0), 0  # epochs done; steps of the next; its loss sum, count
    seconds_before = train_seconds = 0.0
    if resume:
        saved = load_training_state(state_path)
        check_resumable(saved, state_path, kind=task.kind, model_config=task.settings(), train_config=cfg,
                        resumable=task.resumable, recorded_before=task.recorded_before)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if schedule is not None:
            schedule.load_state_dict(saved["schedule"])
        rng = saved_rng(saved, distributed.rank(), world)
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] is not None and device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)
        generator.set_state(saved["generator"])  # as before the shuffle of the epoch in progress
        result = TrainResult(best_epoch=saved["best_epoch"], best_score=saved["best_score"],
                             best_metrics=dict(saved["best_metrics"]), history=list(saved["history"]))
        best_state, stale = saved["best_state"], saved.get("stale", 0)
        done, first_step = saved["epoch"], saved.get("step", 0)
        partial = tuple(saved.get("epoch_loss", (0.0, 0))) if main else (0.0, 0)  # summed over processes
        seconds_before, train_seconds = saved["seconds"], saved.get("train_seconds", 0.0)
    start = time.perf_counter()

    def save_state(epoch: int, step: int, shuffle: torch.Tensor, loss: tuple[float, float], spent: float) -> None:
        """The state after ``step`` steps of epoch ``epoch + 1`` (``shuffle``: the generator before its shuffle)."""
        rngs = distributed.all_gather_objects(rng_state(device))
        loss_sum = distributed.all_reduce_sum([loss[0], float(loss[1])])
        if main:
            write_training_state(state_path, {
                "model_kind": task.kind,
                "model_config": task.settings(),
                "train_config": asdict(cfg),
                "epoch": epoch,
                "step": step,
                "generator": shuffle,
                "epoch_loss": [loss_sum[0], int(loss_sum[1])],
                "model": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
                "optimizer": optimizer.state_dict(),
                "schedule": None if schedule is None else schedule.state_dict(),
                "rng": rngs,
                "world_size": world,
                "best_epoch": result.best_epoch,
                "best_score": result.best_score,
                "best_metrics": dict(result.best_metrics),
                "history": list(result.history),
                "best_state": best_state,
                "stale": stale,
                "seconds": seconds_before + time.perf_counter() - start,
                "train_seconds": spent,
                "extra": extra_state or {},
            })
        distributed.barrier()  # rank 0 has written the state before any process goes on

    epochs_run = len(result.history)
    for epoch in range(done + 1, cfg.epochs + 1):
        if cfg.patience and stale >= cfg.patience:
            break
        epoch_start = time.perf_counter()
        shuffle = generator.get_state()
        order = torch.randperm(task.num_problems, generator=generator).tolist()
        first = first_step if epoch == done + 1 else 0
        total, count = partial if first else (0.0, 0)
        bar = _Progress(progress, epoch, cfg.epochs, first, steps_per_epoch)
        with task.epoch(epoch):
            model.train()
            for step in range(first, steps_per_epoch):
                chunk = order[step * task.batch_size : (step + 1) * task.batch_size]
                local = chunk[distributed.local_slice(len(chunk))]  # this process's slice of the global batch
                optimizer.zero_grad()
                if local:  # (a short last batch may leave a process without problems)
                    loss = task.loss(local)
                    # each slice's mean, weighted by its share: the summed gradients are the batch mean's
                    (loss * (len(local) / len(chunk))).backward()
                    total += float(loss.detach()) * len(local)
                    count += len(local)
                distributed.average_gradients(model.parameters())
                clip_gradients(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                bar.step(step + 1, total / max(1, count))
                if state_path is not None and save_every and (step + 1) % save_every == 0 \
                        and step + 1 < steps_per_epoch:
                    save_state(epoch - 1, step + 1, shuffle, (total, count),
                               train_seconds + time.perf_counter() - epoch_start)
                if on_step is not None:
                    on_step(epoch, step + 1)
        bar.close()
        train_seconds += time.perf_counter() - epoch_start
        epochs_run = epoch
        total, count = distributed.all_reduce_sum([total, float(count)])
        record: dict[str, Any] = {"epoch": epoch, "train_loss": total / max(1, count)}
        metrics = task.dev_metrics(progress)
        if metrics is not None:
            score = sum(metrics[f"recall@{k}"] for k in cfg.eval_ks) / len(cfg.eval_ks)
            record.update({"dev_score": score, **{f"dev_{k}": v for k, v in metrics.items()}})
            if score > result.best_score + 1e-9:
                result.best_score, result.best_epoch, result.best_metrics = score, epoch, metrics
                stale = 0
                if cfg.epochs > 1:
                    best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                if on_best is not None and main:
                    on_best(model, epoch, metrics)
            else:
                stale += 1
        result.history.append(record)
        if state_path is not None:
            save_state(epoch, 0, generator.get_state(), (0.0, 0), train_seconds)
        if progress:
            msg = f"epoch {epoch}: train loss {record['train_loss']:.4f}"
            if metrics is not None:
                msg += f", dev mean recall {record['dev_score']:.4f}" + (" *" if stale == 0 else "")
            tqdm.write(msg, file=sys.stdout)
            sys.stdout.flush()  # a line per epoch in a log file too
    if best_state is not None:
        model.load_state_dict(best_state)
    if result.best_epoch < 0:
        result.best_epoch = epochs_run
        if on_best is not None and main:
            on_best(model, result.best_epoch, {})
    distributed.barrier()  # rank 0 has written its files before any process returns
    result.seconds = seconds_before + time.perf_counter() - start
    result.seconds_per_epoch = train_seconds / max(1, epochs_run)
    model.eval()
    return result


def usable_problems(golds: Sequence[Any]) -> list[int]:
    """The indices of the problems that have gold evidence (the ones training steps on)."""
    return [i for i, gold in enumerate(golds) if any(gold)]
