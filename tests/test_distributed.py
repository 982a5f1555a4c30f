"""``torchrun --nproc_per_node=2 dgn train`` trains the model one process trains, resumes, and
records its world size."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
