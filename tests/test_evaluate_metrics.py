"""``dgn evaluate --metrics``: graded rank metrics from the command line, checked by hand.

Two problems with graded relevance and one with gold only; the expected values below are
worked out on paper from DESIGN.md's definitions (linear-gain nDCG, MRR = 1 / rank of the
first relevant pick, AP over the relevant candidates), not computed by the library.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dgn.cli import main


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    problems = [
        # graded: relevance 3 at 2, 1 at 0; gold = {2}
        {"id": "a", "query": "q", "candidates": ["s0", "s1", "s2", "s3"], "gold": [[2]],
         "relevance": [1, 0, 3, 0]},
        # graded: relevance 2 at 1 and 2; gold = {1}, {2}
        {"id": "b", "query": "q", "candidates": ["s0", "s1", "s2"], "gold": [[1], [2]],
         "relevance": [0, 2, 2]},
        # no relevance: binary from gold {0, 3}
        {"id": "c", "query": "q", "candidates": ["s0", "s1", "s2", "s3"], "gold": [[0, 3]]},
    ]
    predictions = [
        {"id": "a", "ranking": [0, 2, 1]},
        {"id": "b", "ranking": [0, 2, 1]},
        {"id": "c", "ranking": [1, 3, 0]},
    ]
    return {
        "data": _write_jsonl(tmp_path / "data.jsonl", problems),
        "preds": _write_jsonl(tmp_path / "preds.jsonl", predictions),
    }


def _log2(rank: int) -> float:
    return math.log2(rank + 1)


# a: gains in order of the ranking: 1, 3, 0; ideal 3, 1 (@2: 3, 1)
NDCG2_A = (1 / _log2(1) + 3 / _log2(2)) / (3 / _log2(1) + 1 / _log2(2))
# b: gains 0, 2, 2; ideal 2, 2
NDCG2_B = (2 / _log2(2)) / (2 / _log2(1) + 2 / _log2(2))
# c: binary gains 0, 1, 1; ideal 1, 1
NDCG2_C = (1 / _log2(2)) / (1 / _log2(1) + 1 / _log2(2))
# MRR: a first relevant at rank 1, b at rank 2, c at rank 2
MRR = (1 + 1 / 2 + 1 / 2) / 3
# AP: a relevant {0, 2} found at ranks 1, 2 -> (1 + 1) / 2; b {1, 2} at ranks 3, 2 ->
# (1/2 + 2/3) / 2; c {0, 3} at ranks 3, 2 -> (1/2 + 2/3) / 2
MAP = (1 + (1 / 2 + 2 / 3) / 2 + (1 / 2 + 2 / 3) / 2) / 3
# recall@1 against gold sets: a 0, b 0, c 0; recall@2: a 1, b 1 (set {2}), c 1/2
RECALL2 = (1 + 1 + 0.5) / 3
# precision@3: a 1/3, b 2/3, c 2/3
PRECISION3 = (1 / 3 + 2 / 3 + 2 / 3) / 3


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_metrics_json_is_keyed_by_spec_as_given(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    specs = "ndcg@2,MRR,map,recall@1,recall@2,precision@3"
    code, out, err = _run(
        ["evaluate", "--predictions", files["preds"], "--data", files["data"],
         "--metrics", specs, "--json"],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)
    assert list(report["metrics"]) == specs.split(",")
    expected = {
        "ndcg@2": (NDCG2_A + NDCG2_B + NDCG2_C) / 3,
        "MRR": MRR,
        "map": MAP,
        "recall@1": 0.0,
        "recall@2": RECALL2,
        "precision@3": PRECISION3,
    }
    for spec, value in expected.items():
        assert report["metrics"][spec] == pytest.approx(value, abs=1e-12), spec
    assert report["count"] == 3
    assert report["missing"] == 0


def test_graded_relevance_changes_ndcg_but_not_recall(
    files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dropping ``relevance`` from the data moves nDCG to binary gains; recall stays."""
    records = [json.loads(line) for line in Path(files["data"]).read_text().splitlines()]
    for r in records:
        r.pop("relevance", None)
    binary = _write_jsonl(tmp_path / "binary.jsonl", records)
    args = ["evaluate", "--predictions", files["preds"], "--metrics", "ndcg@2,recall@2", "--json"]
    _, graded_out, _ = _run([*args, "--data", files["data"]], capsys)
    _, binary_out, _ = _run([*args, "--data", binary], capsys)
    graded = json.loads(graded_out)["metrics"]
    plain = json.loads(binary_out)["metrics"]
    # a: binary gains from gold {2} only: 0, 1 against ideal 1
    ndcg2_a_binary = (1 / _log2(2)) / 1.0
    # b: binary gains 0, 1 against ideal 1, 1
    ndcg2_b_binary = (1 / _log2(2)) / (1 + 1 / _log2(2))
    assert plain["ndcg@2"] == pytest.approx((ndcg2_a_binary + ndcg2_b_binary + NDCG2_C) / 3)
    assert graded["ndcg@2"] != pytest.approx(plain["ndcg@2"])
    assert graded["recall@2"] == plain["recall@2"] == pytest.approx(RECALL2)


def test_metrics_table_and_defaults_unchanged(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["evaluate", "--predictions", files["preds"], "--data", files["data"]]
    code, out, _ = _run([*base, "--metrics", "ndcg@2,mrr"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("selection: 3 problems")
    assert lines[1].split() == ["ndcg@2", f"{(NDCG2_A + NDCG2_B + NDCG2_C) / 3:.4f}"]
    assert lines[2].split() == ["mrr", f"{MRR:.4f}"]
    code, out, _ = _run([*base, "--json"], capsys)
    assert code == 0
    assert set(json.loads(out)) == {
        *(f"{m}@{k}" for m in ("recall", "precision", "f1", "strict") for k in (1, 3, 5, 7)),
        "count", "missing",
    }


def test_unscorable_metric_is_null_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gold but all-zero relevance: nDCG cannot be scored and prints null, not NaN."""
    data = _write_jsonl(tmp_path / "d.jsonl", [
        {"id": "x", "query": "q", "candidates": ["a", "b"], "gold": [[0]], "relevance": [0, 0]},
    ])
    preds = _write_jsonl(tmp_path / "p.jsonl", [{"id": "x", "ranking": [0]}])
    code, out, err = _run(
        ["evaluate", "--predictions", preds, "--data", data, "--metrics", "ndcg,recall@1",
         "--json"],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)  # strict JSON: would fail on NaN only with parse_constant
    assert report["metrics"] == {"ndcg": None, "recall@1": 1.0}


@pytest.mark.parametrize(
    ("specs", "needle"),
    [
        ("ndgc@5", "unknown metric 'ndgc'"),
        ("recall", "recall needs a cutoff"),
        ("ndcg@0", "positive int"),
        ("mrr,,map", "empty metric spec"),
    ],
)
def test_bad_specs_are_one_line_errors(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], specs: str, needle: str
) -> None:
    code, out, err = _run(
        ["evaluate", "--predictions", files["preds"], "--data", files["data"], "--metrics", specs],
        capsys,
    )
    assert code != 0
    assert out == ""
    assert needle in err
    assert "Traceback" not in err


def test_metrics_and_k_are_exclusive(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        ["evaluate", "--predictions", files["preds"], "--data", files["data"],
         "--metrics", "mrr", "--k", "1"],
        capsys,
    )
    assert code != 0
    assert "not allowed with argument" in err


def test_evaluate_files_library_call(files: dict[str, str]) -> None:
    from dgn.errors import DgnUserError
    from dgn.metrics.files import evaluate_files

    results = evaluate_files(files["preds"], files["data"], metrics=["mrr", "mrr@1"])
    assert results["mrr"] == pytest.approx(MRR)
    assert results["mrr@1"] == pytest.approx(1 / 3)  # only a has a relevant first pick
    with pytest.raises(DgnUserError, match="unknown metric"):
        evaluate_files(files["preds"], files["data"], metrics=["bogus"])
