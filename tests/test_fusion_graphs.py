"""Fusion graphs, fusion vectors and the self-retrieval protocol: hand-computed cases and
brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dgn.fusion import fuse
from dgn.fusion.graphs import (
    FusionGraph,
    FusionGraphRetriever,
    fusion_graph,
    graph_similarity,
    position_weights,
)
from dgn.fusion.protocol import evaluate_self_retrieval, knn_run, ndcg_at_10
from dgn.fusion.vectors import FusionVectors, embed


def test_position_weights() -> None:
    assert position_weights(0) == []
    assert position_weights(1) == [1.0]
    assert position_weights(3) == pytest.approx([1.0, 0.55, 0.1])


def test_fusion_graph_by_hand() -> None:
    # one ranker; the query's list is [a, b] (weights 1, 0.1); a's own list [a, b, c]
    # (1, 0.55, 0.1), b's [b, a] (1, 0.1), c is no vertex.
    lists = [{"a": ["a", "b", "c"], "b": ["b", "a"]}]
    g = fusion_graph([["a", "b"]], lists)
    # vertices 1 and 0.1 -> min-max 1, 0
    assert g.vertices == pytest.approx({"a": 1.0, "b": 0.0})
    # a -> b: 0.55 / 1; b -> a: 0.1 / 2 -> min-max 1, 0
    assert g.edges == pytest.approx({("a", "b"): 1.0, ("b", "a"): 0.0})


def test_fusion_graph_adds_over_rankers_before_normalising() -> None:
    # two rankers; query lists [a, b, c] and [b, a]; no item lists: edges empty
    g = fusion_graph([["a", "b", "c"], ["b", "a"]], [{}])
    raw = {"a": 1.0 + 0.1, "b": 0.55 + 1.0, "c": 0.1}
    low, high = min(raw.values()), max(raw.values())
    assert g.vertices == pytest.approx({k: (v - low) / (high - low) for k, v in raw.items()})
    assert g.edges == {}


def test_graph_similarity_by_hand() -> None:
    g = FusionGraph({"a": 1.0, "b": 0.5}, {("a", "b"): 1.0})
    h = FusionGraph({"a": 0.5, "c": 1.0}, {("a", "b"): 0.2})
    # common = min(1, .5) + min(1, .2) = .7; sizes 2.5 and 1.7
    assert graph_similarity(g, h, "mcs") == pytest.approx(0.7 / 2.5)
    assert graph_similarity(g, h, "wgu") == pytest.approx(0.7 / (2.5 + 1.7 - 0.7))
    assert graph_similarity(g, g) == pytest.approx(1.0)
    assert graph_similarity(g, FusionGraph({"z": 1.0})) == 0.0
    with pytest.raises(ValueError, match="unknown graph similarity"):
        graph_similarity(g, h, "edit")


def test_embed_kernel_walks_by_hand() -> None:
    g = FusionGraph({"a": 1.0, "b": 0.5, "c": 0.2},
                    {("a", "b"): 0.5, ("b", "c"): 0.4, ("a", "c"): 1.0, ("c", "a"): 0.0})
    vector = embed(g, "kernel")
    assert vector[("w", "a", "c")] == pytest.approx(0.5 * 0.4)
    assert ("w", "b", "a") not in vector  # b -> c -> a has a zero edge
    assert set(embed(g, "vertex")) == {("v", "a"), ("v", "b"), ("v", "c")}
    assert len(embed(g, "hybrid")) == 3 + 3  # the zero edge is left out


def _random_collection(n: int, m: int, seed: int) -> list[dict[str, list[str]]]:
    rng = np.random.default_rng(seed)
    ids = [f"i{j}" for j in range(n)]
    lists = []
    for _ in range(m):
        points = rng.normal(size=(n, 3))
        dist = ((points[:, None] - points[None]) ** 2).sum(-1)
        lists.append({ids[i]: [ids[j] for j in np.argsort(dist[i], kind="stable")] for i in range(n)})
    return lists


def _dense(fv: FusionVectors, graph: FusionGraph) -> tuple[np.ndarray, np.ndarray]:
    x = fv.matrix.toarray()
    q = np.zeros(x.shape[1])
    for key, value in embed(graph, fv.embedding).items():
        if key in fv.vocabulary:
            q[fv.vocabulary[key]] = value
    return x, q


@pytest.mark.parametrize("embedding", ["vertex", "hybrid", "kernel"])
@pytest.mark.parametrize("comparator", ["cosine", "jaccard"])
def test_exact_search_matches_brute_force(embedding: str, comparator: str) -> None:
    fg = FusionGraphRetriever(_random_collection(30, 3, seed=1), L=6)
    fv = FusionVectors(fg.graphs, embedding, comparator)
    for item in ("i0", "i7", "i19"):
        graph = fg.query_graph(fg.query_lists(item))
        x, q = _dense(fv, graph)
        if comparator == "cosine":
            expected = x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
        else:
            expected = np.minimum(x, q).sum(1) / np.maximum(x, q).sum(1)
        got = fv.scores(fv.vector(graph))
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
        hits = fv.search_exact(graph, k=5)
        assert hits[0][0] == item  # its own graph is the closest
        order = sorted(range(len(expected)), key=lambda i: (-expected[i], i))[:5]
        assert [h for h, _ in hits] == [fv.items[i] for i in order]


def test_fg_search_matches_pairwise_similarities() -> None:
    fg = FusionGraphRetriever(_random_collection(25, 2, seed=3), L=5, similarity="wgu")
    graph = fg.query_graph(fg.query_lists("i4"))
    expected = sorted(((item, graph_similarity(graph, g, "wgu")) for item, g in fg.graphs.items()),
                      key=lambda pair: -pair[1])[:4]
    assert fg.search(fg.query_lists("i4"), k=4) == expected
    assert expected[0][0] == "i4"


def test_index_equals_exact_when_it_reranks_everything_and_survives_save_load(tmp_path) -> None:
    pytest.importorskip("faiss")
    fg = FusionGraphRetriever(_random_collection(40, 3, seed=5), L=8)
    fv = FusionVectors(fg.graphs, "hybrid")
    fv.build_index(dim=64, M=8, ef_construction=40, ef_search=40, rerank=40)
    queries = [fg.graphs[f"i{j}"] for j in range(0, 40, 7)]
    for graph in queries:
        assert fv.search(graph, k=10) == fv.search_exact(graph, k=10)
    fv.save(tmp_path / "fv")
    loaded = FusionVectors.load(tmp_path / "fv")
    assert (loaded.embedding, loaded.comparator, loaded.items) == (fv.embedding, fv.comparator, fv.items)
    for graph in queries:
        assert loaded.search(graph, k=10) == fv.search(graph, k=10)
        assert loaded.search_exact(graph, k=10) == fv.search_exact(graph, k=10)
    assert sorted(p.name for p in (tmp_path / "fv").iterdir()) == [
        "fusion_vectors.json", "index.faiss", "vectors.npz"]


def test_vectors_errors(tmp_path) -> None:
    from dgn.errors import DgnUserError

    fg = FusionGraphRetriever(_random_collection(5, 1, seed=0), L=3)
    fv = FusionVectors(fg.graphs)
    with pytest.raises(DgnUserError, match="no index"):
        fv.search(fg.graphs["i0"])
    with pytest.raises(DgnUserError, match="cannot read fusion vectors"):
        FusionVectors.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown embedding"):
        FusionVectors(fg.graphs, "edges")
    with pytest.raises(ValueError, match="rerank must be"):
        fv.build_index(rerank=0)


def test_fuse_fg_and_fv_rank_each_item_first() -> None:
    lists = _random_collection(20, 2, seed=9)
    runs = [{q: {item: -float(rank) for rank, item in enumerate(ranked)} for q, ranked in r.items()}
            for r in lists]
    for method, params in (("fg", {}), ("fv", {"embedding": "kernel"}), ("fv", {"comparator": "jaccard"})):
        fused = fuse(runs, method=method, L=5, depth=3, **params)
        assert set(fused) == set(lists[0])
        for q, items in fused.items():
            assert len(items) == 3
            assert next(iter(items)) == q


def test_knn_run_and_ndcg() -> None:
    sims = np.array([[1.0, 0.5, 0.5], [0.2, 1.0, 0.9], [0.0, 0.3, 1.0]])
    run = knn_run(["a", "b", "c"], sims, depth=2)
    assert run == {"a": {"a": 1.0, "b": 0.5}, "b": {"b": 1.0, "c": 0.9}, "c": {"c": 1.0, "b": 0.3}}
    labels = {"a": 0, "b": 1, "c": 0}
    # query c: ranking c, b, a -> gains 1, 0, 1 against ideal 1, 1
    expected = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_10(["c", "b", "a"], 0, labels, 2) == pytest.approx(expected)


def test_self_retrieval_protocol_by_brute_force() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 4)) * 4
    labels_arr = np.repeat(np.arange(3), 8)
    points = centres[labels_arr] + rng.normal(size=(24, 4))
    ids = [f"p{i}" for i in range(24)]
    labels = dict(zip(ids, labels_arr.tolist(), strict=True))
    sims = -((points[:, None] - points[None]) ** 2).sum(-1)
    noisy = sims + rng.normal(scale=30.0, size=sims.shape)
    runs = {"clean": knn_run(ids, sims, 24), "noisy": knn_run(ids, noisy, 24)}
    rows = evaluate_self_retrieval(runs, labels, L=10, methods=["clean", "noisy", "rrf", "fg", "fv-v"])
    for name, matrix in (("clean", sims), ("noisy", noisy)):
        expected = np.mean([
            ndcg_at_10([ids[j] for j in sorted(range(24), key=lambda j: (-matrix[i, j], j))],
                       labels[ids[i]], labels, 8)
            for i in range(24)
        ])
        assert rows[name]["ndcg@10"] == pytest.approx(expected)
        assert math.isnan(rows[name]["ms_per_query"])
    for row in ("rrf", "fg", "fv-v"):
        assert 0.0 <= rows[row]["ndcg@10"] <= 1.0
        assert rows[row]["ms_per_query"] > 0
    # well-separated clusters: the graph fusions find the class
    assert rows["fg"]["ndcg@10"] > 0.9
    with pytest.raises(ValueError, match="unknown rows"):
        evaluate_self_retrieval(runs, labels, methods=["fv-x"])
