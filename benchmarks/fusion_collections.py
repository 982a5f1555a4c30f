"""The Fusion Vectors protocol on two labelled collections: single rankers, classic fusions,
fusion graphs (FG) and fusion vectors (FV-V, FV-H, FV-K; exact and HNSW-indexed).

* ``digits``: scikit-learn's bundled 8x8 digits (1,797 images, 10 classes). Rankers:
  raw pixels (Euclidean), a 16-component PCA (cosine), a small HOG (gradient orientation
  histograms, 9 bins in 4 cells of 4x4 pixels, L2-normalised; Euclidean) and projection
  profiles (row and column sums; Euclidean).
* ``fm2``: the claims of FM2 dev and test (2,549 claims) grouped by their Wikipedia page
  (443 pages). Rankers: TF-IDF cosine (scikit-learn defaults), BM25 (Lucene variant,
  k1 = 1.5, b = 0.75, via bm25s) and the cosine of all-MiniLM-L6-v2 embeddings.

Every item is the query once; relevant = same class (the query itself included); nDCG@10
with binary gains; lists cut at L = 20 for the fusions; mean online time per query.

    python benchmarks/fusion_collections.py --data-dir ../shared/data --output runs/fusion

prints a Markdown table per collection and writes OUTPUT/<collection>.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

ROW_NAMES = {
    "rrf": "RRF", "combsum": "CombSUM", "combmnz": "CombMNZ", "borda": "Borda", "fg": "FG",
    "fv-v": "FV-V", "fv-h": "FV-H", "fv-k": "FV-K",
    "fv-v+index": "FV-V indexed", "fv-h+index": "FV-H indexed", "fv-k+index": "FV-K indexed",
}


def _hog(images: np.ndarray) -> np.ndarray:
    gy, gx = np.gradient(images.astype(np.float64), axis=(1, 2))
    magnitude = np.hypot(gx, gy)
    bins = np.minimum((np.mod(np.arctan2(gy, gx), np.pi) / np.pi * 9).astype(int), 8)
    cells = []
    for r in (0, 4):
        for c in (0, 4):
            m = magnitude[:, r:r + 4, c:c + 4].reshape(len(images), -1)
            b = bins[:, r:r + 4, c:c + 4].reshape(len(images), -1)
            cells.append(np.stack([(m * (b == k)).sum(1) for k in range(9)], axis=1))
    features = np.concatenate(cells, axis=1)
    return features / (np.linalg.norm(features, axis=1, keepdims=True) + 1e-12)


def digits() -> tuple[list[str], dict[str, Any], dict[str, np.ndarray]]:
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.metrics.pairwise import cosine_similarity, euclidean_distances

    x, y = load_digits(return_X_y=True)
    ids = [f"digit-{i}" for i in range(len(y))]
    images = x.reshape(-1, 8, 8)
    profiles = np.concatenate([images.sum(1), images.sum(2)], axis=1)
    similarities = {
        "pixels (Euclidean)": -euclidean_distances(x),
        "PCA-16 (cosine)": cosine_similarity(PCA(16, random_state=0).fit_transform(x)),
        "HOG (Euclidean)": -euclidean_distances(_hog(images)),
        "profiles (Euclidean)": -euclidean_distances(profiles),
    }
    return ids, dict(zip(ids, y.tolist(), strict=True)), similarities


def fm2(data_dir: Path) -> tuple[list[str], dict[str, Any], dict[str, np.ndarray]]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    from dgn.features.text import tokenize
    from dgn.sentence.encoder import encode_texts, load_sentence_model

    claims = []
    for split in ("dev", "test"):
        with gzip.open(data_dir / "fm2" / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            claims.extend(json.loads(line) for line in f if line.strip())
    ids = [c["id"] for c in claims]
    texts = [c["text"] for c in claims]
    labels = {c["id"]: c["wikipedia_page"] for c in claims}
    tfidf = TfidfVectorizer().fit_transform(texts)
    import bm25s

    tokens = [tokenize(t) for t in texts]
    vocab: dict[str, int] = {}
    doc_ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens]
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene", idf_method="lucene", dtype="float64")
    model.index((doc_ids, vocab), create_empty_token=False, show_progress=False)
    bm25 = np.stack([np.asarray(model.get_scores_from_ids(q), dtype=np.float64) for q in doc_ids])
    embeddings = encode_texts(load_sentence_model(), texts, progress=False)
    embeddings = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarities = {
        "TF-IDF cosine": (tfidf @ tfidf.T).toarray(),
        "BM25": bm25,
        "sentence cosine": embeddings @ embeddings.T,
    }
    return ids, labels, similarities


def run_collection(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from dgn.fusion.protocol import evaluate_self_retrieval, knn_run

    start = time.perf_counter()
    ids, labels, similarities = digits() if name == "digits" else fm2(Path(args.data_dir))
    runs = {ranker: knn_run(ids, sims, args.depth) for ranker, sims in similarities.items()}
    print(f"{name}: {len(ids)} items, {len(set(labels.values()))} classes, rankers built in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    rows = evaluate_self_retrieval(
        runs, labels, L=args.L,
        progress=lambda row: print(f"  {row} ...", flush=True),
    )
    result = {"collection": name, "items": len(ids), "classes": len(set(labels.values())),
              "L": args.L, "rankers": list(runs), "rows": rows,
              "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    fg_ms = rows.get("fg", {}).get("ms_per_query", math.nan)
    lines = [
        f"{result['collection']}: {result['items']} items, {result['classes']} classes, L = {result['L']}",
        "",
        "| method | nDCG@10 | ms per query | speed-up over FG | nonzeros per vector |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, row in rows.items():
        ms = row["ms_per_query"]
        cells = [
            ROW_NAMES.get(key, key),
            f"{row['ndcg@10']:.4f}",
            "-" if math.isnan(ms) else f"{ms:.2f}",
            "-" if math.isnan(ms) or key == "fg" or math.isnan(fg_ms) else f"{fg_ms / ms:.0f}x",
            "-" if math.isnan(row["nnz"]) else f"{row['nnz']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--collections", default="digits,fm2")
    parser.add_argument("--L", type=int, default=20)
    parser.add_argument("--depth", type=int, default=100, help="each ranker's list length")
    parser.add_argument("--output", default="runs/fusion")
    parser.add_argument("--summary", action="store_true", help="only reprint the tables in --output")
    args = parser.parse_args()
    for name in args.collections.split(","):
        path = Path(args.output) / f"{name}.json"
        result = json.loads(path.read_text()) if args.summary else run_collection(name, args)
        print(table(result), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
