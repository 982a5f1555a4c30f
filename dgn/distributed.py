"""Multi-process training on ``torch.distributed``, as ``torchrun`` starts it.

``torchrun --standalone --nproc_per_node=2 --no-python dgn train ...`` runs ``dgn train``
once per process with ``RANK``, ``WORLD_SIZE`` and a rendezvous in the environment.
:func:`process_group` joins the group once per process: gloo on the CPU, nccl when the
model trains on CUDA (each process then on the GPU ``LOCAL_RANK``). The training loops
(:func:`dgn.train.train_model` on frozen features, :func:`dgn.sentence.finetune` end to
end) then split every global batch (``--batch-size``, ``--claims-per-step``: the global
size) into one contiguous slice per rank (:func:`local_slice`), scale each slice's mean
loss by its share of the batch and sum the gradients across ranks with one all-reduce
(:func:`average_gradients`), so every rank takes the step one process would take on the
whole batch (up to the order of float sums); only rank 0 writes checkpoints, training
state and reports.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from dgn.errors import DgnUserError

__all__ = [
    "process_group",
    "rank",
    "world_size",
    "is_main",
    "barrier",
    "all_reduce_sum",
    "all_gather_objects",
    "average_gradients",
    "local_slice",
    "resolve_device",
]


def _env_world() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


def resolve_device(name: str | torch.device | None) -> torch.device:
    """The device a process trains (or predicts) on: ``name`` (default ``"cpu"``), where a
    bare ``"cuda"`` under torchrun means this process's GPU, ``cuda:LOCAL_RANK``.

    Raises:
        DgnUserError: A name torch does not know, or CUDA where torch sees no GPU (or not
            that one).
    """
    try:
        device = torch.device("cpu" if name is None else name)
    except (RuntimeError, ValueError):
        raise DgnUserError(f"--device {name}: not a device name (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DgnUserError(f"--device {name}: torch sees no CUDA device here (torch.cuda.is_available() is False)")
        if device.index is None and _env_world() > 1:
            device = torch.device("cuda", _local_rank())
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise DgnUserError(f"--device {name}: this process would use GPU {index}, but torch sees "
                               f"{torch.cuda.device_count()}")
    elif device.type != "cpu":
        raise DgnUserError(f"--device {name}: only cpu and cuda are supported")
    return device


def process_group(device: str | torch.device | None = None) -> bool:
    """Join the process group when started by torchrun with ``WORLD_SIZE > 1``.

    Args:
        device: Where this process computes: the nccl backend for CUDA (and that GPU made
            current, :func:`resolve_device`), gloo otherwise.

    Returns:
        True when training is distributed (the group is initialised), False otherwise.
    """
    import torch.distributed as dist

    if _env_world() <= 1 or not dist.is_available():
        return False
    if not dist.is_initialized():
        where = resolve_device(device)
        if where.type == "cuda":
            torch.cuda.set_device(where)
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
    return True


def world_size() -> int:
    """The number of processes (1 outside torchrun)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 outside torchrun)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    """Whether this process writes files and reports (rank 0)."""
    return rank() == 0


def barrier() -> None:
    """Wait for every process (nothing outside torchrun)."""
    import torch.distributed as dist

    if world_size() > 1:
        dist.barrier()


def _collective_device() -> torch.device:
    """Where the group's tensors must be: this process's GPU under nccl, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def local_slice(n: int) -> slice:
    """This rank's contiguous share of ``n`` items (a global batch): the first ``n % world``
    ranks take one more. Outside torchrun, all of them.

    Example:
        >>> local_slice(5)
        slice(0, 5, None)
    """
    world, r = world_size(), rank()
    per, extra = divmod(n, world)
    lo = r * per + min(r, extra)
    return slice(lo, lo + per + (1 if r < extra else 0))


def all_reduce_sum(values: list[float]) -> list[float]:
    """Sum a few numbers across processes (float64)."""
    import torch.distributed as dist

    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return t.tolist()


def all_gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order; outside torchrun ``[value]``."""
    import torch.distributed as dist

    if world_size() == 1:
        return [value]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


def average_gradients(parameters: Any) -> None:
    """Sum every parameter's gradient across processes in one all-reduce (the losses were
    scaled by each slice's share of the global batch, so the sum is the global mean).

    A parameter that has a gradient on some ranks only (an empty slice, or a part of the
    model that a slice's problems do not reach) counts zeros for the others; one that
    has none on any rank keeps ``grad = None``, so the optimiser skips it as one process
    would (AdamW would otherwise still decay it).
    """
    import torch.distributed as dist

    if world_size() == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    device = _collective_device()
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
    dist.all_reduce(has)
    params = [p for p, n in zip(params, has.tolist(), strict=True) if n > 0]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset: offset + n].view_as(g).clone()
        offset += n
