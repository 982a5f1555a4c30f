"""Models and training states written by dgn 0.1.0 (tests/data/fixtures/checkpoints-0.1.0,
see its README): today's code loads every kind, picks what 0.1.0 picked with the same
gains, and resumes the training states, or says in one line what it needs."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

import dgn
from dgn.checkpoint import checkpoint_kind
from dgn.cli import main
from dgn.data import read_problems

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures" / "checkpoints-0.1.0"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
PROBE = list(read_problems(FIXTURES / "probe.jsonl"))
HAS_ENCODERS = importlib.util.find_spec("sentence_transformers") is not None
needs_encoders = pytest.mark.skipif(not HAS_ENCODERS, reason="the 'encoders' extra is not installed")
KINDS = ["frozen-dgn", "frozen-encoder", "frozen-deep-encoder",
         pytest.param("e2e-dgn", marks=needs_encoders), pytest.param("e2e-listwise", marks=needs_encoders)]


def _picks(path: Path) -> list[dict]:
    selector = dgn.load(path)
    return [selector.select(p.query, p.candidates, k=3) for p in PROBE]


def test_the_fixtures_are_of_the_previous_release():
    assert EXPECTED["version"] == "0.1.0"
    assert set(EXPECTED["picks"]) == {"frozen-dgn", "frozen-encoder", "frozen-deep-encoder", "e2e-dgn", "e2e-listwise"}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_loads_and_picks_what_it_picked(kind):
    want = EXPECTED["picks"][kind]
    for got, expected in zip(_picks(FIXTURES / kind), want, strict=True):
        assert list(got.indices) == expected["indices"]
        assert list(got.gains) == pytest.approx(expected["gains"], rel=1e-5, abs=1e-6)
    want_kind = {"frozen-dgn": "dgn", "frozen-encoder": "encoder", "frozen-deep-encoder": "encoder"}
    assert checkpoint_kind(FIXTURES / kind) == want_kind.get(kind, "end-to-end")


def _copy(kind: str, tmp_path: Path) -> Path:
    target = tmp_path / kind
    shutil.copytree(FIXTURES / kind, target)
    return target


def test_a_frozen_feature_state_resumes_with_the_moved_training_file(tmp_path, capsys):
    run = _copy("frozen-dgn", tmp_path)
    assert main(["train", "--resume", str(run), "--epochs", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is gone; pass --train PATH" in err and len(err.strip().splitlines()) == 1
    assert main(["train", "--resume", str(run), "--epochs", "2", "--train", str(FIXTURES / "train.jsonl"),
                 "--quiet"]) == 0
    history = json.loads((run / "train_history.json").read_text())
    assert [r["epoch"] for r in history["history"]] == [1, 2]  # the old epoch kept, one more trained
    assert len(_picks(run)) == len(PROBE)


@needs_encoders
def test_an_end_to_end_state_resumes_with_the_moved_encoder(tmp_path, capsys):
    run = _copy("e2e-dgn", tmp_path)
    train = str(FIXTURES / "train.jsonl")
    assert main(["train", "--resume", str(run), "--train", train, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "sentence encoder" in err and "is gone; pass --encoder-model PATH" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["train", "--resume", str(run), "--train", train, "--encoder-model", str(FIXTURES / "tiny-encoder"),
                 "--quiet"]) == 0
    # the run had finished its one epoch: resuming it keeps the model it had
    for got, expected in zip(_picks(run), EXPECTED["picks"]["e2e-dgn"], strict=True):
        assert list(got.indices) == expected["indices"]
        assert list(got.gains) == pytest.approx(expected["gains"], rel=1e-5, abs=1e-6)
