"""The ``dgn`` command line, run as a real subprocess (``python -m dgn.cli``) on tiny data.

One module-scoped workspace holds a 50-word, 8-d ``.vec`` file, small selection JSONL
files and a DGN trained on them for 2 epochs. Each subprocess pays torch's import (~3 s of
CPU), so the independent commands run concurrently. The error cases of every command are
in ``tests/test_cli_errors.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

WORDS = [f"w{i:02d}" for i in range(50)]
DIM = 8
STEPS = 3


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"DGN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    env.pop("DGN_DATA_URL", None)
    return env


def run_dgn(args: list[str], cache: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dgn.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(cache),
        timeout=timeout,
    )


def _write_vec(path: Path, words: list[str], dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = [f"{len(words)} {dim}"]
    for w in words:
        lines.append(w + " " + " ".join(f"{x:.5f}" for x in rng.normal(size=dim)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _problems(n: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    """Problems whose gold sentences share words with the query; 6-8 candidates."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic = [str(w) for w in rng.choice(WORDS, size=4, replace=False)]
        query = " ".join(topic)
        num = int(rng.integers(6, 9))
        n_gold = int(rng.integers(1, 3))
        gold_idx = sorted(int(g) for g in rng.choice(num, size=n_gold, replace=False))
        cands = []
        for v in range(num):
            if v in gold_idx:
                words = [str(w) for w in rng.choice(topic, size=2, replace=False)]
                words += [str(w) for w in rng.choice(WORDS, size=2)]
            else:
                words = [str(w) for w in rng.choice(WORDS, size=4)]
            cands.append(" ".join(words) + " .")
        out.append({"id": f"{prefix}{i}", "query": query, "candidates": cands, "gold": [gold_idx]})
    return out


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    w = {"root": root, "cache": root / "cache"}
    w["vec8"] = root / "vectors8.vec"
    w["vec6"] = root / "vectors6.vec"
    _write_vec(w["vec8"], WORDS, DIM, seed=1)
    _write_vec(w["vec6"], WORDS, 6, seed=2)
    w["train"] = _write_jsonl(root / "train.jsonl", _problems(40, seed=3, prefix="t"))
    dev = _problems(12, seed=4, prefix="d")
    dev.append({"id": "nogold", "query": "w01 w02", "candidates": ["w01 w03", "w04"], "gold": []})
    w["dev"] = _write_jsonl(root / "dev.jsonl", dev)
    w["model"] = root / "model"
    proc = run_dgn(
        [
            "train", "--train", w["train"], "--dev", w["dev"], "--vectors", w["vec8"], "--features", "wordvec",
            "--output", w["model"], "--epochs", 2, "--encoded-features", 4,
            "--hidden-features", 8, "--steps", STEPS, "--batch-size", 8, "--quiet",
        ],
        w["cache"],
    )
    assert proc.returncode == 0, proc.stderr
    w["train_stdout"] = proc.stdout  # type: ignore[assignment]
    return w


FM2_DEV = SHARED_DATA / "fm2" / "dev.jsonl.gz"


def run_many(
    commands: dict[str, list[Any]], cache: Path
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run independent commands concurrently (each pays the torch import on its own)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run_dgn, args, cache) for name, args in commands.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def runs(ws: dict[str, Path]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every command of this module after training, as concurrent subprocesses."""
    out = ws["root"] / "outputs"
    out.mkdir()
    ws["preds"] = out / "preds.jsonl"
    ws["png"] = out / "gains.png"
    ws["converted"] = out / "fm2-dev.jsonl"
    first: dict[str, list[Any]] = {
        "help": ["--help"],
        "predict": ["predict", "--model", ws["model"], "--data", ws["dev"], "--k", 5,
                    "--output", ws["preds"], "--quiet"],
        "explain": ["explain", "--model", ws["model"], "--data", ws["dev"], "--id", "d0",
                    "--png", ws["png"], "--runners-up", 2],
    }
    if FM2_DEV.is_file():
        first["convert"] = ["data", "convert", "--format", "fm2", "--input", FM2_DEV,
                            "--output", ws["converted"], "--seed", 1]
    done = run_many(first, ws["cache"])
    assert done["predict"].returncode == 0, done["predict"].stderr
    done["evaluate_json"] = run_dgn(
        ["evaluate", "--predictions", ws["preds"], "--data", ws["dev"], "--k", "1,3,5", "--json"],
        ws["cache"],
    )
    return done


def cli(
    args: list[Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cache: Path
) -> tuple[int, str, str]:
    """``dgn.cli.main`` in this process (no torch import per call): exit code, stdout, stderr."""
    from dgn.cli import main

    monkeypatch.setenv("DGN_CACHE_DIR", str(cache))
    monkeypatch.delenv("DGN_DATA_URL", raising=False)
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_help(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = runs["help"]
    assert proc.returncode == 0, proc.stderr
    for command in ("data", "train", "predict", "evaluate", "explain", "benchmark"):
        assert command in proc.stdout


def test_convert_fm2(ws: dict[str, Path], runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    if "convert" not in runs:
        pytest.skip(f"real FM2 data not found at {FM2_DEV}")
    from dgn.data import read_problems

    proc = runs["convert"]
    assert proc.returncode == 0, proc.stderr
    problems = list(read_problems(ws["converted"]))
    assert f"written {len(problems)}" in proc.stdout
    assert len(problems) > 1000
    assert all(p.candidates for p in problems)


def test_train_writes_checkpoint_with_library_defaults(ws: dict[str, Path]) -> None:
    from dgn.model import DGNConfig
    from dgn.train import TrainConfig

    model = ws["model"]
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    meta = json.loads((model / "config.json").read_text())
    config = meta["config"]
    # options passed ...
    assert (config["encoded_features"], config["hidden_features"], config["steps"]) == (4, 8, STEPS)
    assert config["in_features"] == DIM
    # ... and the rest are the dataclass defaults
    defaults = DGNConfig()
    assert config["tau"] == defaults.tau and config["relaxation"] == defaults.relaxation
    assert config["modular"] == defaults.modular
    train_config = meta["extra"]["train_config"]
    assert train_config["lr"] == TrainConfig().lr and train_config["patience"] == TrainConfig().patience
    assert train_config["epochs"] == 2
    assert meta["extra"]["featurizer"]["dim"] == DIM
    history = json.loads((model / "train_history.json").read_text())
    assert len(history["history"]) == 2 and 1 <= history["best_epoch"] <= 2
    assert "best epoch" in str(ws["train_stdout"])


def test_predict_then_evaluate(
    ws: dict[str, Path], runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    from dgn.data import read_predictions, read_problems
    from dgn.metrics import evaluate_rankings

    predictions = {p.id: p for p in read_predictions(ws["preds"])}
    problems = list(read_problems(ws["dev"]))
    assert set(predictions) == {p.id for p in problems}
    for p in problems:
        pred = predictions[p.id]
        assert len(pred.ranking) == min(5, p.num_candidates)
        assert len(set(pred.ranking)) == len(pred.ranking)
        assert all(0 <= i < p.num_candidates for i in pred.ranking)
        assert pred.scores is not None and len(pred.scores) == len(pred.ranking)

    proc = runs["evaluate_json"]
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    expected = evaluate_rankings(
        [predictions[p.id].ranking for p in problems], [p.gold for p in problems], ks=(1, 3, 5)
    )
    for name in ("recall", "precision", "f1", "strict"):
        for k in (1, 3, 5):
            key = f"{name}@{k}"
            assert 0.0 <= result[key] <= 1.0
            assert result[key] == pytest.approx(expected[key], abs=1e-12)
    assert result["count"] == expected["count"] == 12  # the problem without gold is skipped
    assert result["missing"] == 0



def test_evaluate_fever_and_table(
    ws: dict[str, Path],
    runs: dict[str, subprocess.CompletedProcess[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evaluate = ["evaluate", "--predictions", ws["preds"], "--data", ws["dev"]]
    # FEVER rules: recall@7 is recall@5 (only the first 5 picks count)
    code, out, err = cli([*evaluate, "--k", "5,7", "--json", "--fever"], capsys, monkeypatch, ws["cache"])
    assert code == 0, err
    fever = json.loads(out)
    assert fever["recall@7"] == pytest.approx(fever["recall@5"])
    # the table form names the metrics
    code, out, err = cli(evaluate, capsys, monkeypatch, ws["cache"])
    assert code == 0, err
    assert "recall" in out and "strict" in out and "precision" in out


def test_explain_text_and_png(ws: dict[str, Path], runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = runs["explain"]
    assert proc.returncode == 0, proc.stderr
    for step in range(1, STEPS + 1):
        assert f"step {step}: pick" in proc.stdout
    assert "f(S)" in proc.stdout and "runner-up" in proc.stdout
    assert ws["png"].is_file() and ws["png"].stat().st_size > 0


def test_explain_matches_predict(ws: dict[str, Path], runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """The library explanation picks what `dgn predict` writes, with the same gains."""
    from dgn.data import read_predictions, read_problems
    from dgn.explain import explain_problem
    from dgn.model import load_model
    from dgn.pipeline import featurizer_for_model

    predicted = {p.id: p for p in read_predictions(ws["preds"])}
    model = load_model(str(ws["model"]))
    featurizer = featurizer_for_model(
        model, str(ws["model"]), vectors=None, cache_dir=ws["cache"], progress=False
    )
    from dgn.pipeline import SelectionDataset
    from dgn.train import rank

    dev = SelectionDataset(ws["dev"], featurizer)
    assert rank(model, dev, 5) == [predicted[info.id].ranking for info in dev.infos]
    for problem in list(read_problems(ws["dev"]))[:4]:
        expl = explain_problem(model, featurizer, problem, steps=5, runners_up=1)
        assert expl.ranking == predicted[problem.id].ranking
        assert [s.pick.gain for s in expl.steps] == pytest.approx(predicted[problem.id].scores, abs=1e-5)
        for s in expl.steps:
            assert all(r.gain <= s.pick.gain + 1e-6 for r in s.runners_up)


# User and internal errors of every command: tests/test_cli_errors.py.
