"""Fusion vectors (Dourado et al., Pattern Recognition): fusion graphs embedded as sparse
vectors, so that fused retrieval becomes a vector search.

Embeddings of a :class:`~dgn.fusion.graphs.FusionGraph` (each a sparse vector over a
vocabulary of graph elements, taken from the collection's graphs; elements of a query
graph outside the vocabulary are dropped, the paper's vector quantisation):

* ``"vertex"`` (FV-V): one dimension per item, the vertex weight;
* ``"hybrid"`` (FV-H): the vertex dimensions plus one per edge ``a -> b``, the edge weight;
* ``"kernel"`` (FV-K): the hybrid dimensions plus one per pair ``(a, c)`` joined by a walk
  of two edges, the sum over ``b`` of ``w(a -> b) · w(b -> c)``: the explicit feature map
  of a graph kernel that compares vertices, edges and two-step walks. (The paper names a
  kernel-based embedding without fixing the kernel in its text; this is ours.)

Comparators: ``"cosine"`` and ``"jaccard"`` (weighted: ``sum min / sum max``).

:class:`FusionVectors` holds the collection's vectors as a SciPy CSR matrix and searches
them exactly, or through an HNSW index (faiss, the ``fusion`` extra): the index holds
``dim``-dimensional count sketches of the vectors (each vocabulary element added with a
seeded random sign into a seeded random bucket; the identity when the vocabulary is no
larger than ``dim``), L2-normalised, under inner product; the ``rerank`` best candidates
it returns are then scored exactly with the chosen comparator.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dgn.errors import DgnUserError
from dgn.fusion.graphs import FusionGraph

__all__ = ["EMBEDDINGS", "COMPARATORS", "embed", "FusionVectors"]

EMBEDDINGS: tuple[str, ...] = ("vertex", "hybrid", "kernel")
COMPARATORS: tuple[str, ...] = ("cosine", "jaccard")
_FORMAT = 1


def _check_choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


def embed(graph: FusionGraph, kind: str = "vertex") -> dict[tuple[str, ...], float]:
    """The sparse fusion vector of ``graph``: ``{element key: value}``, zeros left out.

    Keys: ``("v", a)`` for vertices, ``("e", a, b)`` for edges, ``("w", a, c)`` for
    two-step walks.

    Example:
        >>> g = FusionGraph({"a": 1.0, "b": 0.5}, {("a", "b"): 1.0, ("b", "a"): 0.5})
        >>> sorted(embed(g, "kernel").items())
        [(('e', 'a', 'b'), 1.0), (('e', 'b', 'a'), 0.5), (('v', 'a'), 1.0), (('v', 'b'), 0.5)]
    """
    _check_choice(kind, EMBEDDINGS, "embedding")
    vector: dict[tuple[str, ...], float] = {("v", a): w for a, w in graph.vertices.items() if w > 0}
    if kind == "vertex":
        return vector
    for (a, b), w in graph.edges.items():
        if w > 0:
            vector[("e", a, b)] = w
    if kind == "kernel":
        out: dict[str, list[tuple[str, float]]] = {}
        for (a, b), w in graph.edges.items():
            if w > 0:
                out.setdefault(a, []).append((b, w))
        for a, steps in out.items():
            for b, w_ab in steps:
                for c, w_bc in out.get(b, ()):
                    if c != a:
                        key = ("w", a, c)
                        vector[key] = vector.get(key, 0.0) + w_ab * w_bc
    return vector


class FusionVectors:
    """A collection's fusion vectors: exact search, and an HNSW index.

    Args:
        graphs: Item id -> the item's fusion graph (the offline stage).
        embedding: One of :data:`EMBEDDINGS`.
        comparator: One of :data:`COMPARATORS`.

    Example:
        >>> from dgn.fusion.graphs import FusionGraphRetriever
        >>> lists = [{"a": ["a", "b", "c"], "b": ["b", "a", "c"], "c": ["c", "b", "a"]}]
        >>> fg = FusionGraphRetriever(lists, L=2)
        >>> fv = FusionVectors(fg.graphs, "hybrid")
        >>> [item for item, _ in fv.search_exact(fg.query_graph([["a", "b"]]), k=3)]
        ['a', 'b', 'c']
    """

    def __init__(
        self, graphs: Mapping[str, FusionGraph], embedding: str = "vertex", comparator: str = "cosine"
    ) -> None:
        self.embedding = _check_choice(embedding, EMBEDDINGS, "embedding")
        self.comparator = _check_choice(comparator, COMPARATORS, "comparator")
        self.items: list[str] = list(graphs)
        vectors = [embed(g, embedding) for g in graphs.values()]
        vocabulary: dict[tuple[str, ...], int] = {}
        for vector in vectors:
            for key in vector:
                if key not in vocabulary:
                    vocabulary[key] = len(vocabulary)
        self.vocabulary = vocabulary
        self.matrix = self._stack(vectors)
        self._prepare()
        self.index: Any = None
        self.index_settings: dict[str, Any] = {}

    # -- vectors ---------------------------------------------------------------------
    def _stack(self, vectors: Sequence[Mapping[tuple[str, ...], float]]) -> Any:
        from scipy import sparse

        rows, cols, data = [], [], []
        for i, vector in enumerate(vectors):
            for key, value in vector.items():
                j = self.vocabulary.get(key)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                    data.append(value)
        shape = (len(vectors), max(len(self.vocabulary), 1))
        return sparse.csr_matrix((np.asarray(data, dtype=np.float64), (rows, cols)), shape=shape)

    def _prepare(self) -> None:
        x = self.matrix
        self._l1 = np.asarray(x.sum(axis=1)).ravel()
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        self._l2 = norms
        from scipy import sparse

        inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        self._unit = sparse.diags(inverse) @ x
        self._csc = x.tocsc()

    @property
    def nnz(self) -> float:
        """Mean number of nonzero entries per collection vector."""
        return self.matrix.nnz / max(self.matrix.shape[0], 1)

    def vector(self, graph: FusionGraph) -> Any:
        """The graph's fusion vector over this vocabulary, ``(1, d)`` CSR."""
        return self._stack([embed(graph, self.embedding)])

    def scores(self, query: Any, rows: np.ndarray | None = None) -> np.ndarray:
        """Exact comparator scores of a ``(1, d)`` query against every (or the given) row."""
        if self.comparator == "cosine":
            qn = float(np.sqrt(query.multiply(query).sum()))
            unit = self._unit if rows is None else self._unit[rows]
            if qn == 0:
                return np.zeros(unit.shape[0])
            return np.asarray((unit @ query.T).todense()).ravel() / qn
        # weighted Jaccard: sum min / sum max, over the query's nonzero columns
        x = self._csc[:, query.indices].tocoo()
        q_values = query.data
        n = self.matrix.shape[0]
        sum_min = np.bincount(x.row, weights=np.minimum(x.data, q_values[x.col]), minlength=n)
        if rows is not None:
            sum_min = sum_min[rows]
            l1 = self._l1[rows]
        else:
            l1 = self._l1
        sum_max = l1 + float(q_values.sum()) - sum_min
        return np.divide(sum_min, sum_max, out=np.zeros_like(sum_min), where=sum_max > 0)

    def search_exact(self, graph: FusionGraph, k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` items whose vectors score highest against the graph's, best first."""
        scores = self.scores(self.vector(graph))
        return self._top(scores, np.arange(len(scores)), k)

    def _top(self, scores: np.ndarray, rows: np.ndarray, k: int) -> list[tuple[str, float]]:
        k = min(k, len(scores))
        if k <= 0:
            return []
        order = np.lexsort((rows, -scores))[:k]  # score desc, then collection order
        return [(self.items[int(rows[i])], float(scores[i])) for i in order]

    # -- the HNSW index --------------------------------------------------------------
    def _projection(self, dim: int, seed: int) -> Any:
        from scipy import sparse

        d = len(self.vocabulary)
        if d <= dim:
            return sparse.identity(max(d, 1), format="csr")
        rng = np.random.default_rng(seed)
        buckets = rng.integers(0, dim, size=d)
        signs = rng.choice(np.array([-1.0, 1.0]), size=d)
        return sparse.csr_matrix((signs, (np.arange(d), buckets)), shape=(d, dim))

    def _sketch(self, x: Any) -> np.ndarray:
        dense = np.asarray((x @ self._proj).todense(), dtype=np.float32)
        norms = np.linalg.norm(dense, axis=1, keepdims=True)
        np.divide(dense, norms, out=dense, where=norms > 0)
        return np.ascontiguousarray(dense)

    def build_index(
        self, dim: int = 1024, M: int = 32, ef_construction: int = 200, ef_search: int = 128,
        rerank: int = 100, seed: int = 0,
    ) -> None:
        """Build the HNSW index over the collection's sketches (the offline stage).

        Args:
            dim: Sketch dimensions (the vocabulary's size when smaller).
            M: HNSW links per node.
            ef_construction: Candidate list size while building.
            ef_search: Candidate list size while searching (raised to ``rerank``).
            rerank: How many index hits are scored exactly per query.
            seed: Seed of the sketch's buckets and signs.

        Raises:
            DgnUserError: faiss is not installed (the ``fusion`` extra).
        """
        faiss = _faiss()
        for name, value in (("dim", dim), ("M", M), ("ef_construction", ef_construction),
                            ("ef_search", ef_search), ("rerank", rerank)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self._proj = self._projection(dim, seed)
        sketches = self._sketch(self.matrix)
        index = faiss.IndexHNSWFlat(sketches.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.add(sketches)
        index.hnsw.efSearch = max(ef_search, rerank)
        self.index = index
        self.index_settings = {
            "dim": dim, "M": M, "ef_construction": ef_construction, "ef_search": ef_search,
            "rerank": rerank, "seed": seed,
        }

    def search(self, graph: FusionGraph, k: int = 10) -> list[tuple[str, float]]:
        """Indexed search: the index's ``rerank`` best hits, scored exactly, top ``k``.

        Raises:
            DgnUserError: No index (call :meth:`build_index` or :meth:`load`).
        """
        if self.index is None:
            raise DgnUserError("this FusionVectors has no index: call build_index() or load() first")
        query = self.vector(graph)
        rerank = max(self.index_settings["rerank"], k)
        _, hits = self.index.search(self._sketch(query), min(rerank, len(self.items)))
        rows = hits[0][hits[0] >= 0].astype(np.int64)
        return self._top(self.scores(query, rows), rows, k)

    # -- persistence -----------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write vectors, vocabulary and index (if built) to ``directory``, each file atomically."""
        from scipy import sparse

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": _FORMAT, "embedding": self.embedding, "comparator": self.comparator,
            "items": self.items, "vocabulary": [list(key) for key in self.vocabulary],
            "index": self.index_settings or None,
        }
        _atomic(out / "vectors.npz", lambda path: sparse.save_npz(path, self.matrix, compressed=True), ".npz")
        if self.index is not None:
            faiss = _faiss()
            _atomic(out / "index.faiss", lambda path: faiss.write_index(self.index, path), ".faiss")
        _atomic(out / "fusion_vectors.json",
                lambda path: Path(path).write_text(json.dumps(meta), encoding="utf-8"), ".json")

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> FusionVectors:
        """Read what :meth:`save` wrote.

        Raises:
            DgnUserError: A missing or unreadable file, or another format version.
        """
        from scipy import sparse

        src = Path(directory)
        meta_path = src / "fusion_vectors.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise DgnUserError(f"{meta_path}: cannot read fusion vectors ({error})") from None
        if meta.get("format") != _FORMAT:
            raise DgnUserError(f"{meta_path}: format {meta.get('format')!r}, this version reads {_FORMAT}")
        self = cls.__new__(cls)
        self.embedding = meta["embedding"]
        self.comparator = meta["comparator"]
        self.items = list(meta["items"])
        self.vocabulary = {tuple(key): j for j, key in enumerate(meta["vocabulary"])}
        try:
            self.matrix = sparse.load_npz(src / "vectors.npz").tocsr()
        except (OSError, ValueError) as error:
            raise DgnUserError(f"{src / 'vectors.npz'}: cannot read fusion vectors ({error})") from None
        self._prepare()
        self.index = None
        self.index_settings = meta.get("index") or {}
        if self.index_settings:
            faiss = _faiss()
            self._proj = self._projection(self.index_settings["dim"], self.index_settings["seed"])
            self.index = faiss.read_index(str(src / "index.faiss"))
            self.index.hnsw.efSearch = max(self.index_settings["ef_search"], self.index_settings["rerank"])
        return self


def _atomic(target: Path, write: Any, suffix: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise DgnUserError("the HNSW index needs faiss: pip install 'dgn[fusion]' (faiss-cpu)") from None
    return faiss
