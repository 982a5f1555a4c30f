"""The benchmark's splits of the real sets in ../shared/data, and the Lead-k row against the raw files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dgn.benchmark import DATASET_SPLITS, lead_rankings, prepare_data
from dgn.data import read_problems
from dgn.metrics import evaluate_rankings


def _raw_lead_recall(annotations: Path, docs: Path, k: int) -> tuple[float, int]:
    """Lead-k recall straight from ERASER's files: the best share of an evidence group that
    lies in the document's first k lines, over the lines whose document is present."""
    with gzip.open(docs, "rt", encoding="utf-8") as fh:
        present = {json.loads(line)["docid"] for line in fh}
    scores = []
    with gzip.open(annotations, "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            groups = [{s for e in group for s in range(e["start_sentence"], e["end_sentence"])}
                      for group in record["evidences"]]
            if record["evidences"][0][0]["docid"] not in present:
                continue
            scores.append(max(len({s for s in g if s < k}) / len(g) for g in groups))
    return sum(scores) / len(scores), len(scores)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_fever_test_split_and_lead_k_match_the_raw_files(shared_data: Path, tmp_path: Path, k: int) -> None:
    paths = prepare_data("fever", shared_data, tmp_path / "fever", 0)
    test = list(read_problems(paths["test"]))
    expected, count = _raw_lead_recall(shared_data / "eraser/fever/test.jsonl.gz",
                                       shared_data / "eraser/fever/docs.jsonl.gz", k)
    assert len(test) == count == 6052  # 6,111 lines, 59 of them naming a missing page
    got = evaluate_rankings(lead_rankings(test, k), [p.gold for p in test], ks=(k,), names=("recall",))
    assert got[f"recall@{k}"] == pytest.approx(expected, abs=1e-12)
    if k == 1:  # SOURCE.md: lead-k recall@1 on test .516 (over every line, the missing pages counted too)
        assert got["recall@1"] == pytest.approx(0.516, abs=0.002)


@pytest.mark.parametrize(("dataset", "group"), [("fever", "docid"), ("multirc", "docid"), ("scifact", "claim_id")])
def test_real_splits_keep_each_page_passage_or_claim_on_one_side(
    shared_data: Path, tmp_path: Path, dataset: str, group: str
) -> None:
    assert DATASET_SPLITS[dataset]["group"] == group
    paths = prepare_data(dataset, shared_data, tmp_path / dataset, 0)
    parts = {name: list(read_problems(path)) for name, path in paths.items()}
    keys = {name: {p.meta[group] for p in problems} for name, problems in parts.items()}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not keys[a] & keys[b], (a, b)
    sizes = {name: len(problems) for name, problems in parts.items()}
    ids = [p.id for problems in parts.values() for p in problems]
    assert len(ids) == len(set(ids))  # no problem in two parts
    if dataset == "fever":  # val alone makes train and dev (a fifth of its pages held out); test is test
        assert sizes["train"] + sizes["dev"] == 6045 and sizes["test"] == 6052
        assert 0.15 < sizes["dev"] / 6045 < 0.25
    else:  # one file: train, dev and test are all of it
        assert sum(sizes.values()) == {"multirc": 631, "scifact": 564}[dataset]
        assert 0.2 < sizes["test"] / sum(sizes.values()) < 0.4


def test_entailmentbank_trains_on_train_and_reports_on_dev(shared_data: Path, tmp_path: Path) -> None:
    paths = prepare_data("entailmentbank", shared_data, tmp_path / "eb", 0)
    parts = {name: list(read_problems(path)) for name, path in paths.items()}
    assert len(parts["train"]) + len(parts["dev"]) == 1313 and len(parts["test"]) == 187
    assert all(len(p.candidates) == 25 and len(p.gold) == 1 and len(p.gold[0]) >= 2 for p in parts["test"])
