"""Saving processes killed with SIGKILL at random moments never leave a bad checkpoint.

A child process saves checkpoints (or builds a feature cache) in a loop; the test kills it
after a random delay and checks that what is on disk under the real names is complete: the
last finished checkpoint (or a newer one) loads, its weights agree with the config saved
with them, and leftover temporary files are never read.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dgn import DGN, DGNConfig
from dgn.features.cache import FeatureCache

TRIES = 6
MAX_TRIES = 20
CONFIG = {"in_features": 64, "hidden_features": 256, "encoded_features": 256, "steps": 3}

CHECKPOINT_WRITER = textwrap.dedent(
    """
    import sys
    import torch
    from dgn import DGN, DGNConfig

    directory, start = sys.argv[1], int(sys.argv[2])
    model = DGN(DGNConfig(**{config}))
    print("ready", flush=True)
    i = start
    while True:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(i))
        model.save_pretrained(directory, extra={{"i": i}})
        i += 1
    """
).format(config=CONFIG)

CACHE_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from dgn.features.cache import FeatureCache

    root, data = sys.argv[1], sys.argv[2]

    def build():
        for i in range(200):
            time.sleep(0.002)
            yield np.full((3, 4), i, dtype=np.float32)

    print("ready", flush=True)
    FeatureCache(root).get_or_build(data, {"kind": "kill-test"}, build, progress=False)
    print("built", flush=True)
    """
)


def _kill_after(script: str, args: list[str], delay: float) -> None:
    """Run ``script``, wait until it prints ``ready``, sleep ``delay``, SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


def _load_consistent(directory: Path) -> int:
    """Load the checkpoint; every parameter must equal the index saved with it."""
    with warnings.catch_warnings():
        # config.json may be one save ahead of the weights; the weights' own config is used
        warnings.simplefilter("ignore", UserWarning)
        model = DGN.from_pretrained(directory)
    i = model.extra["i"]
    for name, p in model.named_parameters():
        assert torch.all(p == float(i)), f"{name} does not belong to checkpoint {i}"
    return int(i)


def test_killed_checkpoint_saves_leave_a_loadable_checkpoint(tmp_path: Path) -> None:
    rng = random.Random(0)
    directory = tmp_path / "ckpt"
    model = DGN(DGNConfig(**CONFIG))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.0)
    model.save_pretrained(directory, extra={"i": 0})
    last = interrupted = seen = 0
    for tries in range(1, MAX_TRIES + 1):
        _kill_after(CHECKPOINT_WRITER, [str(directory), str(last + 1)], rng.uniform(0.0, 0.4))
        i = _load_consistent(directory)
        assert i >= last  # the previous checkpoint, or one the killed process finished
        names = {p.name for p in directory.iterdir()}
        assert {"config.json", "model.safetensors"} <= names
        leftovers = names - {"config.json", "model.safetensors"}
        assert all(n.startswith(".") and n.endswith(".tmp") for n in leftovers), leftovers
        interrupted += len(leftovers) > seen
        seen = len(leftovers)
        last = i
        if tries >= TRIES and interrupted:
            break
    assert last > 0, "no save finished in any try; the delays are too short to test anything"
    assert interrupted, f"no kill in {tries} tries landed inside a save; nothing was tested"


def test_killed_cache_build_is_never_mistaken_for_a_cache(tmp_path: Path) -> None:
    rng = random.Random(1)
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    root = tmp_path / "cache"
    cache = FeatureCache(root)
    for _ in range(3):
        _kill_after(CACHE_WRITER, [str(root), str(data)], rng.uniform(0.05, 0.3))
        assert cache.load(data, {"kind": "kill-test"}) is None

    def build():  # type: ignore[no-untyped-def]
        for i in range(200):
            yield np.full((3, 4), i, dtype=np.float32)

    built = cache.get_or_build(data, {"kind": "kill-test"}, build, progress=False)
    assert len(built) == 200 and float(built[199][0, 0]) == 199.0
    assert cache.load(data, {"kind": "kill-test"}) is not None
    # the killed builds' temporary directories are gone once a build of the key succeeded
    assert [p.name for p in root.iterdir() if ".tmp" in p.name] == []


@pytest.mark.parametrize("cut", [1, 100, -1])
def test_truncated_weights_are_rejected(tmp_path: Path, cut: int) -> None:
    """A weights file cut short (e.g. copied by hand) is an error, not a silent load."""
    from dgn.errors import DgnUserError

    DGN(DGNConfig(**CONFIG)).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    blob = weights.read_bytes()
    weights.write_bytes(blob[:cut])
    with pytest.raises(DgnUserError, match="model.safetensors"):
        DGN.from_pretrained(tmp_path)
