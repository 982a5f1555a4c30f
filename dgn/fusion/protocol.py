"""The Fusion Vectors evaluation protocol, and graph fusion through :func:`dgn.fusion.fuse`.

Every item of a labelled collection is the query once; the collection is the response
set; an item is relevant to the query when it has the query's label (the query itself
included: it is in the collection). Each ranker's run ranks the collection for every
item (the offline stage); a fusion method then answers each query (the online stage)
and is scored by nDCG@10 with binary gains, beside the mean time per query of its online
stage: for the classic fusions, fusing the query's lists; for FG, building the query's
fusion graph and comparing it with every item's; for fusion vectors, building the graph,
embedding it and searching (exact, or the HNSW index).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dgn.fusion.classic import FusedRun, Run, borda, combmnz, combsum, rrf
from dgn.fusion.graphs import FusionGraphRetriever, ranked_lists
from dgn.fusion.vectors import FusionVectors

__all__ = [
    "knn_run",
    "ndcg_at_10",
    "fusion_graph_fuse",
    "fusion_vector_fuse",
    "evaluate_self_retrieval",
]


def knn_run(ids: Sequence[str], similarity: np.ndarray, depth: int) -> dict[str, dict[str, float]]:
    """A run from an ``(n, n)`` similarity matrix: each row's ``depth`` most similar items.

    Ties break by collection order. The item itself is ranked like any other.
    """
    sims = np.asarray(similarity, dtype=np.float64)
    n = len(ids)
    if sims.shape != (n, n):
        raise ValueError(f"similarity must be ({n}, {n}) for {n} ids, got {sims.shape}")
    depth = min(depth, n)
    run: dict[str, dict[str, float]] = {}
    columns = np.arange(n)
    for i, query in enumerate(ids):
        row = sims[i]
        part = np.argpartition(-row, depth - 1)[:depth] if depth < n else columns
        order = part[np.lexsort((part, -row[part]))]
        run[query] = {ids[j]: float(row[j]) for j in order}
    return run


def ndcg_at_10(ranking: Sequence[str], label: Any, labels: Mapping[str, Any], class_size: int) -> float:
    """Binary-gain nDCG@10 of a ranking of items against the query's label."""
    dcg = sum(
        1.0 / math.log2(i + 2) for i, item in enumerate(ranking[:10]) if labels.get(item) == label
    )
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(10, class_size)))
    return dcg / ideal if ideal > 0 else 0.0


def fusion_graph_fuse(runs: Sequence[Run], L: int = 20, depth: int = 100, similarity: str = "mcs") -> FusedRun:
    """FG over a collection whose items are the runs' queries (the self-retrieval setting).

    Each query id must also be an item id: its lists in the runs are the item's own lists.
    Returns every query's ``depth`` best items by fusion-graph similarity.
    """
    _check_depth(depth)
    retriever = FusionGraphRetriever(ranked_lists(runs), L=L, similarity=similarity)
    return {
        q: dict(retriever.search(retriever.query_lists(q), depth)) for q in retriever.items
    }


def fusion_vector_fuse(
    runs: Sequence[Run], L: int = 20, depth: int = 100, embedding: str = "vertex",
    comparator: str = "cosine", index: bool = False,
) -> FusedRun:
    """Fusion vectors over the runs' queries as the collection (see :func:`fusion_graph_fuse`)."""
    _check_depth(depth)
    retriever = FusionGraphRetriever(ranked_lists(runs), L=L)
    vectors = FusionVectors(retriever.graphs, embedding, comparator)
    if index:
        vectors.build_index()
    search = vectors.search if index else vectors.search_exact
    return {q: dict(search(retriever.graphs[q], depth)) for q in retriever.items}


def _check_depth(depth: int) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")


def evaluate_self_retrieval(
    runs: Mapping[str, Run],
    labels: Mapping[str, Any],
    *,
    queries: Sequence[str] | None = None,
    L: int = 20,
    methods: Sequence[str] | None = None,
    index_settings: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Score single rankers and fusions under the protocol (module docstring).

    Args:
        runs: Ranker name -> its run over the collection (every item a query).
        labels: Item id -> class label.
        queries: The queries to score (default: every labelled item).
        L: Lists are cut at ``L`` for the fusions.
        methods: Rows to compute among the rankers' names, ``"rrf"``, ``"combsum"``,
            ``"combmnz"``, ``"borda"``, ``"fg"``, ``"fv-v"``, ``"fv-h"``, ``"fv-k"``, and
            each ``fv-*`` with ``"+index"`` (default: all).
        index_settings: Keyword arguments of :meth:`FusionVectors.build_index`.
        progress: Called with each row's name as it starts.

    Returns:
        Row -> ``{"ndcg@10", "ms_per_query" (NaN for single rankers), "offline_s",
        "nnz" (fusion vectors: mean nonzeros per vector)}``.
    """
    names = list(runs)
    all_rows = [*names, "rrf", "combsum", "combmnz", "borda", "fg",
                "fv-v", "fv-h", "fv-k", "fv-v+index", "fv-h+index", "fv-k+index"]
    methods = list(methods) if methods is not None else all_rows
    unknown = [m for m in methods if m not in all_rows]
    if unknown:
        raise ValueError(f"unknown rows {unknown}; choose from {all_rows}")
    queries = list(queries) if queries is not None else [q for q in labels]
    sizes: dict[Any, int] = {}
    for label in labels.values():
        sizes[label] = sizes.get(label, 0) + 1
    lists = ranked_lists([runs[name] for name in names], L)
    cut_runs = [
        {q: dict(list(run[q].items())[:L]) for q in run} for run in (runs[name] for name in names)
    ]

    def score(rankings: Mapping[str, Sequence[str]]) -> float:
        return statistics.fmean(
            ndcg_at_10(rankings[q], labels[q], labels, sizes[labels[q]]) for q in queries
        )

    results: dict[str, dict[str, float]] = {}
    retriever: FusionGraphRetriever | None = None
    vectors: dict[str, FusionVectors] = {}
    classic = {"rrf": rrf, "combsum": combsum, "combmnz": combmnz, "borda": borda}
    for row in methods:
        if progress is not None:
            progress(row)
        offline = 0.0
        timings: list[float] = []
        rankings: dict[str, list[str]] = {}
        nnz = math.nan
        if row in runs:
            rankings = {q: list(runs[row][q]) for q in queries}
        elif row in classic:
            for q in queries:
                start = time.perf_counter()
                fused = classic[row]([{q: run[q]} for run in cut_runs if q in run])
                timings.append(time.perf_counter() - start)
                rankings[q] = list(fused[q])
        else:
            if retriever is None:
                start = time.perf_counter()
                retriever = FusionGraphRetriever(lists, L=L)
                offline_graphs = time.perf_counter() - start
            offline = offline_graphs
            if row == "fg":
                for q in queries:
                    start = time.perf_counter()
                    hits = retriever.search(retriever.query_lists(q), 10)
                    timings.append(time.perf_counter() - start)
                    rankings[q] = [item for item, _ in hits]
            else:
                kind = {"v": "vertex", "h": "hybrid", "k": "kernel"}[row[3]]
                indexed = row.endswith("+index")
                start = time.perf_counter()
                if kind not in vectors:
                    vectors[kind] = FusionVectors(retriever.graphs, kind)
                fv = vectors[kind]
                if indexed:
                    fv.build_index(**dict(index_settings or {}))
                offline += time.perf_counter() - start
                nnz = fv.nnz
                search = fv.search if indexed else fv.search_exact
                for q in queries:
                    start = time.perf_counter()
                    graph = retriever.query_graph(retriever.query_lists(q))
                    hits = search(graph, 10)
                    timings.append(time.perf_counter() - start)
                    rankings[q] = [item for item, _ in hits]
        results[row] = {
            "ndcg@10": score(rankings),
            "ms_per_query": 1000 * statistics.fmean(timings) if timings else math.nan,
            "offline_s": offline,
            "nnz": nnz,
        }
    return results
