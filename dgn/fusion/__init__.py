"""Unsupervised rank fusion: several rankers' runs in, one run out.

A run maps a query id to ``{item id: score}`` (higher is better), the shape of ranx:

    >>> from dgn.fusion import fuse
    >>> bm25 = {"q1": {"s3": 7.1, "s0": 5.2, "s9": 1.0}}
    >>> cosine = {"q1": {"s0": 0.83, "s4": 0.80, "s3": 0.41}}
    >>> list(fuse([bm25, cosine], method="rrf"))
    ['q1']
    >>> list(fuse([bm25, cosine], method="rrf")["q1"])
    ['s0', 's3', 's4', 's9']

Methods: see :data:`FUSION_METHODS` and the modules :mod:`dgn.fusion.classic` (RRF,
CombSUM, CombMNZ, Borda), :mod:`dgn.fusion.graphs` (fusion graphs, FG retrieval) and
:mod:`dgn.fusion.vectors` (fusion vectors, exact and HNSW search);
:mod:`dgn.fusion.protocol` has the Fusion Vectors evaluation protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dgn.fusion.classic import NORMS, FusedRun, Run, borda, combmnz, combsum, rrf
from dgn.fusion.protocol import fusion_graph_fuse, fusion_vector_fuse

__all__ = [
    "fuse", "FUSION_METHODS", "NORMS", "Run", "FusedRun", "rrf", "combsum", "combmnz", "borda",
    "fusion_graph_fuse", "fusion_vector_fuse",
]

_METHODS: dict[str, tuple[Callable[..., FusedRun], tuple[str, ...]]] = {
    "rrf": (rrf, ("k",)),
    "combsum": (combsum, ("norm",)),
    "combmnz": (combmnz, ("norm",)),
    "borda": (borda, ()),
    "fg": (fusion_graph_fuse, ("L", "depth", "similarity")),
    "fv": (fusion_vector_fuse, ("L", "depth", "embedding", "comparator", "index")),
}
#: The names :func:`fuse` accepts.
FUSION_METHODS: tuple[str, ...] = tuple(_METHODS)


def fuse(runs: Sequence[Run], method: str = "rrf", **params: Any) -> FusedRun:
    """Fuse several runs over the same queries into one.

    Args:
        runs: Runs, each ``{query id: {item id: score}}``; a query may be missing from
            some runs.
        method: One of :data:`FUSION_METHODS`: ``"rrf"`` (param ``k=60``), ``"combsum"``
            and ``"combmnz"`` (param ``norm="min-max"``, one of :data:`NORMS`),
            ``"borda"``; ``"fg"`` (fusion graphs; ``L=20``, ``depth=100``,
            ``similarity="mcs"``) and ``"fv"`` (fusion vectors; ``L``, ``depth``,
            ``embedding="vertex"``, ``comparator="cosine"``, ``index=False``). ``"fg"`` and
            ``"fv"`` rank a collection by the similarity of fusion graphs, so they need
            every item's own lists: the runs' query ids are the collection, each query's
            lists being that item's (the self-retrieval setting of the Fusion Vectors
            protocol).
        **params: The method's parameters.

    Returns:
        ``{query id: {item id: fused score}}``, each query's items in descending order of
        score.

    Raises:
        ValueError: Malformed runs (the message names the run, query and item), an
            unknown method, or a parameter the method does not take or a bad value.
    """
    entry = _METHODS.get(method) if isinstance(method, str) else None
    if entry is None:
        raise ValueError(f"unknown fusion method {method!r}; choose from {', '.join(FUSION_METHODS)}")
    function, accepted = entry
    unexpected = sorted(set(params) - set(accepted))
    if unexpected:
        raise ValueError(
            f"unexpected parameter(s) {', '.join(unexpected)} for fusion method {method!r}; "
            f"it takes {', '.join(accepted) or 'none'}"
        )
    return function(runs, **params)
