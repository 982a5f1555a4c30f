"""Fusion graphs (Dourado, Pedronette and Torres, 2019): several ranked lists as one graph.

For a query q and m rankers, each giving q's ranked list (its top ``L``) and, computed
offline, the ranked list of every item of the collection:

* **scores**: every list's scores are replaced by position weights in ``[0.1, 1]``, the
  first item 1, the last 0.1, linear in between (no vertex or edge weighs 0 before the
  final normalisation);
* **vertices**: every item of q's lists; the weight of ``a`` is the sum of its position
  weights over q's lists;
* **edges**: for ``a`` at position ``p_a`` (from 1) of one of q's lists and every ``b`` of
  ``a``'s own lists (all rankers) that is also a vertex, ``b != a``, the edge ``a -> b``
  gains ``weight_a(b) / p_a``, b's position weight in a's list divided by a's position
  in q's list; the contributions add up over the lists;
* vertex weights, then edge weights, are min-max normalised to ``[0, 1]`` (all 1 when
  they are all equal).

Two graphs compare by their weighted common subgraph: with ``size(G)`` the sum of its
vertex and edge weights and ``common(G, H)`` the sum, over the vertices and edges both
have, of the smaller weight, ``similarity = common / max(size(G), size(H))`` (``"mcs"``)
or ``common / (size(G) + size(H) − common)`` (``"wgu"``, weighted graph union). FG
retrieval ranks the collection for q by the similarity of q's fusion graph to each
item's fusion graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dgn.fusion.classic import Run, check_runs

__all__ = [
    "FusionGraph",
    "GRAPH_SIMILARITIES",
    "position_weights",
    "ranked_lists",
    "fusion_graph",
    "graph_similarity",
    "FusionGraphRetriever",
]

#: Graph comparators: weighted maximum common subgraph, weighted graph union.
GRAPH_SIMILARITIES: tuple[str, ...] = ("mcs", "wgu")
#: Lowest position weight: the last item of a list.
MIN_POSITION_WEIGHT = 0.1

#: Per ranker: item id -> its ranked list (best first), cut at ``L``.
RankerLists = Sequence[Mapping[str, Sequence[str]]]


@dataclass
class FusionGraph:
    """A weighted directed graph over item ids.

    Attributes:
        vertices: Item id -> vertex weight.
        edges: ``(a, b)`` -> edge weight.
    """

    vertices: dict[str, float] = field(default_factory=dict)
    edges: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def size(self) -> float:
        """The sum of the vertex and edge weights."""
        return sum(self.vertices.values()) + sum(self.edges.values())


def position_weights(n: int) -> list[float]:
    """Weights of the positions 1..n of a list: 1 down to 0.1, linear (``[1.0]`` for n = 1)."""
    if n <= 1:
        return [1.0] * max(n, 0)
    step = (1.0 - MIN_POSITION_WEIGHT) / (n - 1)
    return [1.0 - i * step for i in range(n)]


def ranked_lists(runs: Sequence[Run], depth: int | None = None) -> list[dict[str, list[str]]]:
    """Each run as ``{query id: [item ids by score, best first]}``, cut at ``depth``.

    Raises:
        ValueError: Malformed runs (as :func:`dgn.fusion.fuse`) or a bad ``depth``.
    """
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"depth must be a positive int or None, got {depth!r}")
    return [
        {query: [item for item, _ in pairs[:depth]] for query, pairs in run.items()}
        for run in check_runs(runs)
    ]


def _minmax_in_place(weights: dict) -> None:
    if not weights:
        return
    low, high = min(weights.values()), max(weights.values())
    span = high - low
    for key in weights:
        weights[key] = (weights[key] - low) / span if span > 0 else 1.0


def fusion_graph(
    query_lists: Sequence[Sequence[str]],
    item_lists: Callable[[str], Iterable[Sequence[str]]] | RankerLists,
) -> FusionGraph:
    """The fusion graph of one query (see the module docstring).

    Args:
        query_lists: The query's ranked list from each ranker, best first (already cut at L).
        item_lists: Every item's own ranked lists: a function of the item id returning
            its lists (one per ranker), or per ranker a mapping item id -> list. Items
            without lists add no edges.

    Returns:
        The normalised :class:`FusionGraph`.
    """
    if callable(item_lists):
        lists_of = item_lists
    else:
        rankers = list(item_lists)

        def lists_of(item: str) -> list[Sequence[str]]:
            return [ranker[item] for ranker in rankers if item in ranker]

    graph = FusionGraph()
    vertices = graph.vertices
    for ranked in query_lists:
        for item, weight in zip(ranked, position_weights(len(ranked)), strict=True):
            vertices[item] = vertices.get(item, 0.0) + weight
    edges = graph.edges
    own: dict[str, list[tuple[list[str], list[float]]]] = {}
    for ranked in query_lists:
        for pos_a, a in enumerate(ranked, start=1):
            if a not in own:
                own[a] = [(list(lst), position_weights(len(lst))) for lst in lists_of(a)]
            for lst, weights in own[a]:
                for b, weight_b in zip(lst, weights, strict=True):
                    if b != a and b in vertices:
                        key = (a, b)
                        edges[key] = edges.get(key, 0.0) + weight_b / pos_a
    _minmax_in_place(vertices)
    _minmax_in_place(edges)
    return graph


def graph_similarity(g: FusionGraph, h: FusionGraph, kind: str = "mcs") -> float:
    """Weighted common-subgraph similarity of two fusion graphs, in ``[0, 1]``.

    Raises:
        ValueError: ``kind`` not in :data:`GRAPH_SIMILARITIES`.
    """
    if kind not in GRAPH_SIMILARITIES:
        raise ValueError(f"unknown graph similarity {kind!r}; choose from {', '.join(GRAPH_SIMILARITIES)}")
    common = _common(g.vertices, h.vertices) + _common(g.edges, h.edges)
    if common <= 0.0:
        return 0.0
    size_g, size_h = g.size, h.size
    denominator = max(size_g, size_h) if kind == "mcs" else size_g + size_h - common
    return common / denominator if denominator > 0 else 0.0


def _common(a: Mapping, b: Mapping) -> float:
    if len(a) > len(b):
        a, b = b, a
    total = 0.0
    for key, weight in a.items():
        other = b.get(key)
        if other is not None:
            total += weight if weight < other else other
    return total


class FusionGraphRetriever:
    """FG retrieval: a collection of fusion graphs, searched by graph similarity.

    Args:
        lists: Per ranker, every collection item's ranked list (``{item: [items]}``), the
            offline stage; a query's lists come from the same rankers.
        L: Cut every list at its first ``L`` items.
        similarity: ``"mcs"`` or ``"wgu"``.

    Example:
        >>> lists = [{"a": ["a", "b", "c"], "b": ["b", "a", "c"], "c": ["c", "b", "a"]}]
        >>> fg = FusionGraphRetriever(lists, L=2)
        >>> [item for item, _ in fg.search(["a", "b"], k=3)]
        ['a', 'b', 'c']
    """

    def __init__(self, lists: RankerLists, L: int = 20, similarity: str = "mcs") -> None:
        if isinstance(L, bool) or not isinstance(L, int) or L < 1:
            raise ValueError(f"L must be a positive int, got {L!r}")
        if similarity not in GRAPH_SIMILARITIES:
            raise ValueError(
                f"unknown graph similarity {similarity!r}; choose from {', '.join(GRAPH_SIMILARITIES)}"
            )
        self.L = L
        self.similarity = similarity
        self.lists: list[dict[str, list[str]]] = [
            {item: list(ranked[:L]) for item, ranked in ranker.items()} for ranker in lists
        ]
        items = list(dict.fromkeys(item for ranker in self.lists for item in ranker))
        self.items: list[str] = items
        self.graphs: dict[str, FusionGraph] = {item: self.graph_of(item) for item in items}

    def query_lists(self, item: str) -> list[list[str]]:
        """A collection item's own lists, one per ranker that has it."""
        return [ranker[item] for ranker in self.lists if item in ranker]

    def graph_of(self, item: str) -> FusionGraph:
        """The fusion graph of a collection item taken as the query."""
        return fusion_graph(self.query_lists(item), self.lists)

    def query_graph(self, query_lists: Sequence[Sequence[str]]) -> FusionGraph:
        """The fusion graph of a new query from its lists (cut at L), against this collection."""
        return fusion_graph([list(ranked[: self.L]) for ranked in query_lists], self.lists)

    def search(self, query_lists: Sequence[Sequence[str]], k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` collection items whose fusion graphs are most similar to the query's.

        Returns:
            ``[(item, similarity), ...]``, best first (ties: collection order).
        """
        graph = self.query_graph(query_lists)
        scored = [(item, graph_similarity(graph, g, self.similarity)) for item, g in self.graphs.items()]
        scored.sort(key=lambda pair: -pair[1])
        return scored[:k]
