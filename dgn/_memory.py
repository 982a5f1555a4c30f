"""Keep freed memory in the process during training (glibc's malloc).

A training step allocates and frees the same few-megabyte tensors every step (activations,
gradients, the relaxed layers' outputs). glibc's malloc hands blocks that large back to the
kernel when they are freed (``munmap``, or trimming the top of the heap), so the next step
takes a page fault on every 4 KiB page it touches again: 1,200 to 2,700 faults a step
at the shape of ``benchmarks/train_speed.py``, about 0.7 us each on the 2-core machine
measured (``python benchmarks/train_overheads.py``), 1 to 2 ms of a 15 ms step. Raising
malloc's mmap and trim thresholds keeps the pages mapped for reuse. Peak memory barely
moves (freed memory is reused by later allocations, not added to: 342 against 339 MiB
over 600 training steps of varying shapes, same command), but memory freed after the
peak goes back to the system only when the process ends. PyTorch's CPU performance guide
suggests jemalloc or tcmalloc for the same reason; this needs neither.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed threshold on 64 bit).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap up to this size is kept.
TRIM_THRESHOLD = 1 << 30


@functools.cache
def retain_freed_memory() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process (once).

    Returns True when they were set; False where the C library is not glibc or
    ``DGN_RETAIN_MEMORY=0`` is set in the environment.
    """
    if os.environ.get("DGN_RETAIN_MEMORY", "1").strip() == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
