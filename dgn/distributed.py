"""Multi-process training on ``torch.distributed`` (gloo on CPU), as ``torchrun`` starts it.

``torchrun --standalone --nproc_per_node=2 --no-python dgn train ...`` runs ``dgn train``
once per process with ``RANK``, ``WORLD_SIZE`` and a rendezvous in the environment.
:func:`process_group` joins the group once per process. :func:`dgn.train.train_model`
then splits every global batch (``--batch-size`` stays the global size) into one
contiguous slice per rank, scales each slice's mean loss by its share of the batch and
sums the gradients across ranks with one all-reduce, so every rank takes the step one
process would take on the whole batch (up to the order of float sums); only rank 0
writes checkpoints, training state and reports.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["process_group", "rank", "world_size", "is_main", "barrier", "all_reduce_sum", "average_gradients"]


def _env_world() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def process_group() -> bool:
    """Join the process group when started by torchrun with ``WORLD_SIZE > 1``.

    Returns:
        True when training is distributed (the group is initialised), False otherwise.
    """
    import torch.distributed as dist

    if _env_world() <= 1 or not dist.is_available():
        return False
    if not dist.is_initialized():
        dist.init_process_group("gloo")
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


def all_reduce_sum(values: list[float]) -> list[float]:
    """Sum a few numbers across processes (float64)."""
    import torch.distributed as dist

    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def average_gradients(parameters: Any) -> None:
    """Sum every parameter's gradient across processes in one all-reduce (the losses were
    scaled by each slice's share of the global batch, so the sum is the global mean)."""
    import torch.distributed as dist

    if world_size() == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset: offset + n].view_as(g).clone()
        offset += n
