"""The one training loop (:func:`dgn.training.fit`): exact resume from a state written within
an epoch, patience with the best epoch restored, the clipping policy, the schedule, progress
lines in a log file, and the frozen-feature task through the same loop."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dgn.training import Task, TrainResult, fit


@dataclass(frozen=True)
class ToyConfig:
    epochs: int = 4
    seed: int = 0
    patience: int = 0
    max_grad_norm: float = 5.0
    eval_ks: tuple[int, ...] = (1,)
    lr: float = 0.05
    optimizer: str = "adam"
    scores: tuple[float, ...] | None = None  # dev scores by epoch (None: from the model)


class ToyTask(Task):
    """A linear scorer with dropout on random features: the loss needs the torch RNG (dropout)
    and the shuffle, so an inexact resume shows in the weights."""

    kind = "toy"
    resumable = ("epochs", "patience")

    def __init__(self, config: ToyConfig, n: int = 22, batch_size: int = 4) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 6, generator=gen)
        self.y = (self.x[:, 0] - self.x[:, 1] > 0).float()
        torch.manual_seed(7)
        self.model = nn.Sequential(nn.Dropout(0.3), nn.Linear(6, 1))
        self.config, self.batch_size, self.num_problems = config, batch_size, n
        self.epochs_seen: list[int] = []
        self.dev_calls = 0

    def settings(self) -> dict[str, Any]:
        return {"in": 6}

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        params = self.model.parameters()
        if self.config.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.config.lr), None
        opt = torch.optim.Adam(params, lr=self.config.lr)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / total_steps))
        return opt, self.schedule

    def loss(self, problems: Sequence[int]) -> torch.Tensor:
        idx = torch.tensor(list(problems))
        logits = self.model(self.x[idx]).squeeze(-1)
        return nn.functional.binary_cross_entropy_with_logits(logits, self.y[idx])

    def dev_metrics(self, progress: bool) -> dict[str, float] | None:
        self.dev_calls += 1
        if self.config.scores is not None:
            return {"recall@1": self.config.scores[self.dev_calls - 1]}
        with torch.no_grad():
            self.model.eval()
            right = ((self.model(self.x).squeeze(-1) > 0).float() == self.y).float().mean()
        return {"recall@1": float(right)}

    @contextlib.contextmanager
    def epoch(self, epoch: int) -> Iterator[None]:
        self.epochs_seen.append(epoch)
        yield


class _Stop(Exception):
    pass


def _stop_at(epoch: int, step: int) -> Any:
    def on_step(e: int, s: int) -> None:
        if (e, s) == (epoch, step):
            raise _Stop

    return on_step


def _same(a: nn.Module, b: nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_a_run_stopped_within_an_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    full = ToyTask(ToyConfig())
    done = fit(full, progress=False)
    state = tmp_path / "state.pt"
    stopped = ToyTask(ToyConfig())
    with pytest.raises(_Stop):  # 22 problems in batches of 4: 6 steps an epoch; stop after step 5 of epoch 2
        fit(stopped, progress=False, state_path=state, save_every=2, on_step=_stop_at(2, 5))
    resumed = ToyTask(ToyConfig())
    again = fit(resumed, progress=False, state_path=state, resume=True, save_every=2)
    _same(full.model, resumed.model)
    assert again.history == done.history and again.best_epoch == done.best_epoch
    assert resumed.epochs_seen == [2, 3, 4]  # from the step after the last saved one (step 4 of epoch 2)
    # without the saved RNG the dropout masks differ, and so do the weights
    stopped = ToyTask(ToyConfig())
    with pytest.raises(_Stop):
        fit(stopped, progress=False, state_path=state, save_every=2, on_step=_stop_at(2, 5))
    saved = torch.load(state, weights_only=True)
    saved["rng"][0]["torch"] = torch.manual_seed(99).get_state()
    torch.save(saved, state)
    other = ToyTask(ToyConfig())
    fit(other, progress=False, state_path=state, resume=True)
    assert not all(torch.equal(x, y) for x, y in zip(full.model.state_dict().values(),
                                                       other.model.state_dict().values(), strict=True))


def test_resume_refuses_another_config_but_may_change_what_only_decides_when_to_stop(tmp_path):
    from dgn.errors import DgnUserError

    state = tmp_path / "state.pt"
    fit(ToyTask(ToyConfig(epochs=2)), progress=False, state_path=state)
    with pytest.raises(DgnUserError, match=r"field 'train_config\.lr': the saved run used 0\.05, this one 0\.1 "
                                           r"\(only epochs and patience may change on resume\)"):
        fit(ToyTask(ToyConfig(epochs=3, lr=0.1)), progress=False, state_path=state, resume=True)
    longer = fit(ToyTask(ToyConfig(epochs=3)), progress=False, state_path=state, resume=True)
    assert [r["epoch"] for r in longer.history] == [1, 2, 3]


def test_patience_stops_and_the_best_epoch_comes_back():
    scores = (0.5, 0.7, 0.6, 0.65, 0.9, 0.95)
    kept: dict[int, dict[str, torch.Tensor]] = {}

    def on_best(model: nn.Module, epoch: int, metrics: dict[str, float]) -> None:
        kept[epoch] = {k: v.clone() for k, v in model.state_dict().items()}

    task = ToyTask(ToyConfig(epochs=6, patience=2, scores=scores))
    result = fit(task, progress=False, on_best=on_best)
    assert [r["epoch"] for r in result.history] == [1, 2, 3, 4]  # epochs 3 and 4 did not beat 0.7
    assert result.best_epoch == 2 and result.best_score == pytest.approx(0.7) and sorted(kept) == [1, 2]
    for name, value in task.model.state_dict().items():
        assert torch.equal(value, kept[2][name]), name
    assert not task.model.training
    no_patience = fit(ToyTask(ToyConfig(epochs=6, scores=scores)), progress=False)
    assert no_patience.best_epoch == 6 and len(no_patience.history) == 6


def test_gradients_are_clipped_at_the_configs_norm():
    """With SGD one step moves the weights by lr times the gradient, scaled to norm
    ``max_grad_norm`` where it is longer: the step measured against the gradient by hand."""
    for max_norm in (1e-3, 1e3):
        task = ToyTask(ToyConfig(epochs=1, optimizer="sgd", lr=1.0, max_grad_norm=max_norm), n=4)
        task.model[0].p = 0.0  # no dropout: the hand-computed gradient is the loop's
        before = [p.detach().clone() for p in task.model.parameters()]
        probe = ToyTask(ToyConfig(), n=4)
        probe.model.load_state_dict(task.model.state_dict())
        probe.model[0].p = 0.0
        probe.loss(list(range(4))).backward()
        grads = [p.grad.clone() for p in probe.model.parameters()]
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        fit(task, progress=False)
        scale = min(1.0, max_norm / (norm + 1e-6))
        for b, g, p in zip(before, grads, task.model.parameters(), strict=True):
            torch.testing.assert_close(b - p.detach(), g * scale, rtol=1e-5, atol=1e-7)


def test_the_schedule_steps_once_per_optimiser_step():
    """22 problems in batches of 4 are 6 steps an epoch: after 2 epochs the loop has stepped
    the task's schedule 12 times, to the end of its linear decay."""
    task = ToyTask(ToyConfig(epochs=2))
    result = fit(task, progress=False)
    assert isinstance(result, TrainResult) and result.seconds_per_epoch > 0
    assert task.schedule.last_epoch == 2 * 6
    assert task.schedule.get_last_lr() == pytest.approx([0.0])


def test_progress_shows_in_a_log_file_as_lines(monkeypatch, capsys):
    """Where bars are off (output to a file), progress is a plain line on stdout at most every
    LOG_EVERY_SECONDS, plus a line per epoch."""
    import dgn.training.loop as loop

    monkeypatch.setattr("dgn._progress._ENABLED", False)
    monkeypatch.setattr(loop, "LOG_EVERY_SECONDS", 0.0)
    fit(ToyTask(ToyConfig(epochs=2)), progress=True)
    out = capsys.readouterr().out.splitlines()
    assert "epoch 1/2: step 1/6, train loss" in out[0]
    assert sum(line.startswith("epoch 2/2: step ") for line in out) == 6
    assert any(line.startswith("epoch 2: train loss") and "dev mean recall" in line for line in out)
    monkeypatch.setattr(loop, "LOG_EVERY_SECONDS", 3600.0)
    fit(ToyTask(ToyConfig(epochs=1)), progress=True)
    assert [line for line in capsys.readouterr().out.splitlines() if ": step " in line] == []


def test_frozen_feature_training_resumes_within_an_epoch(tmp_path):
    """The frozen-feature task through the same loop: a DGN with dropout and an annealed
    temperature, stopped after a state saved within an epoch, resumes to the weights and
    history of the run that was not stopped."""
    from dgn.data import Problem, write_problems
    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.train import TrainConfig, train_model

    rng = np.random.default_rng(0)
    words = "river town flood old year rain bridge storm water street".split()
    problems = [Problem(f"c{i}", " ".join(rng.choice(words, 4)),
                        [" ".join(rng.choice(words, 5)) for _ in range(int(rng.integers(4, 9)))],
                        [[int(rng.integers(4))]]) for i in range(30)]
    write_problems(tmp_path / "train.jsonl", problems[:24])
    write_problems(tmp_path / "dev.jsonl", problems[24:])
    fz = Featurizer(features=("lexical",), cache_dir=tmp_path / "cache", progress=False)
    fz.fit_scaler(tmp_path / "train.jsonl")
    config = TrainConfig(epochs=3, batch_size=5, patience=0, tau_decay=0.8, max_candidates=5)

    def run(**kw: Any) -> tuple[DGN, TrainResult]:
        torch.manual_seed(0)
        model = DGN(DGNConfig(in_features=fz.dim, encoded_features=4, hidden_features=8, steps=3, dropout=0.3))
        train = SelectionDataset(tmp_path / "train.jsonl", fz, max_candidates=config.max_candidates)
        dev = SelectionDataset(tmp_path / "dev.jsonl", fz)
        return model, train_model(model, train, dev, config, progress=False, **kw)

    full, done = run()
    state = tmp_path / "state.pt"
    with pytest.raises(_Stop):  # 5 steps an epoch; the state of step 4 of epoch 2 is the last one
        run(state_path=state, save_every=2, on_step=_stop_at(2, 5))
    assert torch.load(state, weights_only=True)["step"] == 4
    resumed, again = run(state_path=state, resume=True, save_every=2)
    _same(full, resumed)
    assert again.history == done.history and "dev_recall@1" in again.history[0]
    assert resumed.config.tau == full.config.tau == DGNConfig().tau  # the annealing is undone at the end
    with pytest.raises(Exception, match="max_grad_norm must be a finite number > 0"):
        replace(config, max_grad_norm=0)
