"""The DGN module: config, train/eval paths, gradients, persistence, learning."""

from __future__ import annotations

import json

import pytest
import torch

from dgn import (
    DGN,
    DeepEncoder,
    DGNConfig,
    DgnUserError,
    Encoder,
    greedy_select,
    layerwise_cross_entropy,
)

SMALL = dict(in_features=6, hidden_features=8, encoded_features=5, steps=3)


def test_config_defaults_follow_the_paper():
    c = DGNConfig()
    assert c.steps == 7 and 3 <= c.tau <= 6 and c.concave == "sqrt"


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("steps", 0, "steps must be a positive integer"),
        ("tau", 0.0, "tau must be a finite number > 0"),
        ("tau", float("nan"), "tau must be"),
        ("concave", "cube", "concave must be one of"),
        ("relaxation", "gumbel", "relaxation must be one of"),
        ("encoded_features", -3, "encoded_features must be a positive integer"),
        ("dropout", 1.0, "dropout must be in"),
    ],
)
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        DGNConfig(**{**SMALL, field: value})


def test_config_is_frozen():
    with pytest.raises(AttributeError, match="cannot assign to field 'tau'"):
        DGNConfig().tau = 2.0  # type: ignore[misc]


def test_eval_runs_hard_greedy_on_learned_objective():
    model = DGN(DGNConfig(**SMALL)).double().eval()
    with torch.no_grad():
        model.objective.raw_weights.copy_(torch.randn(5, dtype=torch.float64))
    X = torch.randn(4, 7, 6, dtype=torch.float64)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[2, 4:] = False
    out = model(X, mask)
    H = model.encode(X, mask)
    beta = model.modular_scores(H)
    ref = greedy_select(H.detach(), 3, model.objective, mask=mask, modular=beta.detach())
    assert torch.equal(out.indices, ref.indices)
    torch.testing.assert_close(out.gains, ref.gains)
    _, _, sel = model.select(X, mask)
    assert torch.equal(sel.indices, ref.indices)
    # without the modular term the model is the paper's pure SCMM
    pure = DGN(DGNConfig(**SMALL, modular=False)).double().eval()
    Hp = pure.encode(X, mask)
    assert torch.equal(pure(X, mask).indices, greedy_select(Hp.detach(), 3, pure.objective, mask=mask).indices)
    assert out.logits.shape == (4, 3, 7) and out.distributions.shape == (4, 3, 7)
    assert bool((out.encoded >= 0).all())
    assert out.distributions[2, :, 4:].eq(0).all()


@pytest.mark.parametrize("relaxation", ["soft", "straight_through"])
def test_training_path_at_tiny_temperature_picks_what_eval_picks(relaxation):
    config = DGNConfig(**SMALL, tau=1e-7, relaxation=relaxation)
    model = DGN(config).double()
    X = torch.randn(6, 9, 6, dtype=torch.float64)
    train_out = model.train()(X)
    eval_out = model.eval()(X)
    assert torch.equal(train_out.indices, eval_out.indices)


def test_gradcheck_whole_forward_and_loss():
    config = DGNConfig(**SMALL, tau=0.9, relaxation="soft")
    model = DGN(config).double().train()
    X = torch.randn(2, 5, 6, dtype=torch.float64)
    gold = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 0, 1]]).bool()
    names = [n for n, _ in model.named_parameters()]

    def fn(X, *ps):
        out = torch.func.functional_call(model, dict(zip(names, ps, strict=True)), (X,))
        return out.distributions, layerwise_cross_entropy(out.logits, gold, reduction="none")

    inputs = (X.requires_grad_(),) + tuple(p.detach().clone().requires_grad_() for p in model.parameters())
    assert torch.autograd.gradcheck(fn, inputs)


def test_save_and_load_roundtrip(tmp_path):
    model = DGN(DGNConfig(**SMALL))
    with torch.no_grad():
        model.objective.raw_weights.uniform_(-1, 1)
    model.extra = {"featurizer": {"kind": "fasttext", "dim": 6}}
    model.save_pretrained(tmp_path / "ckpt")
    loaded = DGN.from_pretrained(tmp_path / "ckpt")
    assert loaded.config == model.config and loaded.extra == model.extra
    assert not loaded.training
    X = torch.randn(3, 5, 6)
    assert torch.equal(loaded(X).indices, model.eval()(X).indices)
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    assert not list((tmp_path / "ckpt").glob("*.tmp")), "no temporary files left behind"


def _rewrite_checkpoint(directory, meta):
    """Store ``meta`` as the checkpoint's config, in config.json and inside the weights."""
    from safetensors.torch import load_file, save_file

    (directory / "config.json").write_text(json.dumps(meta))
    weights = directory / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt", "dgn": json.dumps(meta)})


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(DgnUserError, match="model directory not found"):
        DGN.from_pretrained(tmp_path / "missing")
    with pytest.raises(DgnUserError, match="no model config found"):
        DGN.from_pretrained(tmp_path)
    DGN(DGNConfig(**SMALL)).save_pretrained(tmp_path / "a")
    a = tmp_path / "a"
    meta = json.loads((a / "config.json").read_text())
    meta["format_version"] = 99
    _rewrite_checkpoint(a, meta)
    with pytest.raises(DgnUserError, match="field 'format_version': checkpoint format 99 is not supported"):
        DGN.from_pretrained(a)
    meta["format_version"] = 1
    meta["config"]["colour"] = "red"
    _rewrite_checkpoint(a, meta)
    with pytest.raises(DgnUserError, match=r"unknown field\(s\) \['colour'\]"):
        DGN.from_pretrained(a)
    del meta["config"]["colour"]
    meta["config"]["encoded_features"] = 7  # weights no longer fit
    _rewrite_checkpoint(a, meta)
    with pytest.raises(DgnUserError, match="weights do not match the config"):
        DGN.from_pretrained(a)
    (a / "model.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(DgnUserError, match="model.safetensors: cannot read weights"):
        DGN.from_pretrained(a)
    (a / "model.safetensors").unlink()
    with pytest.raises(DgnUserError, match="model weights missing"):
        DGN.from_pretrained(a)


def test_weights_carry_their_own_config(tmp_path):
    """A save interrupted between its two files: the weights' own config is used."""
    model = DGN(DGNConfig(**SMALL))
    model.save_pretrained(tmp_path, extra={"epoch": 1})
    cfg = tmp_path / "config.json"
    meta = json.loads(cfg.read_text())
    meta["config"]["tau"] = 0.5
    meta["extra"] = {"epoch": 2}
    cfg.write_text(json.dumps(meta))  # as if the next save had written only config.json
    with pytest.warns(UserWarning, match="does not match the config stored in"):
        loaded = DGN.from_pretrained(tmp_path)
    assert loaded.config == model.config and loaded.extra == {"epoch": 1}
    cfg.write_text("{not json")
    with pytest.raises(DgnUserError, match="cannot read config"):
        DGN.from_pretrained(tmp_path)
    cfg.unlink()  # the weights alone are a complete checkpoint
    assert DGN.from_pretrained(tmp_path).config == model.config


def test_wrong_feature_size_is_rejected():
    with pytest.raises(ValueError, match="features have F=4 but the model expects in_features=6"):
        DGN(DGNConfig(**SMALL))(torch.randn(2, 3, 4))


def _problems(gen: torch.Generator, B: int, N: int = 12, F: int = 16, gold_per: int = 2):
    """Nonnegative noise; gold items also carry a hidden direction on 3 of F dims."""
    X = torch.rand(B, N, F, generator=gen)
    gold = torch.zeros(B, N, dtype=torch.bool)
    for b in range(B):
        gold[b, torch.randperm(N, generator=gen)[:gold_per]] = True
    signal = torch.zeros(F)
    signal[:3] = 0.6
    X = X + gold.unsqueeze(-1) * signal
    return X, gold


def _recall(indices: torch.Tensor, gold: torch.Tensor) -> float:
    hits = gold.gather(1, indices.clamp_min(0)) & (indices >= 0)
    return float((hits.sum(1) / gold.sum(1)).mean())


def test_training_beats_untrained_scmm_greedy():
    gen = torch.Generator().manual_seed(0)
    X_test, gold_test = _problems(gen, 400)
    k = 2
    untrained = _recall(greedy_select(X_test, k, "sqrt").indices, gold_test)
    model = DGN(DGNConfig(in_features=16, hidden_features=32, encoded_features=16, steps=k, tau=1.0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(300):
        X, gold = _problems(gen, 32)
        out = model(X)
        loss = layerwise_cross_entropy(out.logits, gold)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        trained = _recall(model(X_test).indices, gold_test)
    assert trained >= untrained + 0.25, (trained, untrained)


@pytest.mark.parametrize("cls", [Encoder, DeepEncoder])
def test_encoders_are_nonnegative_and_validate_sizes(cls):
    enc = cls(6, 8, 5)
    assert bool((enc(torch.randn(3, 4, 6)) >= 0).all())
    with pytest.raises(ValueError, match="hidden_features must be a positive integer, got 0"):
        cls(6, 0, 5)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        cls(6, 8, 5, dropout=1.5)


def test_eval_distributions_at_tiny_tau_and_without_candidates():
    model = DGN(DGNConfig(**{**SMALL, "tau": 1e-30})).eval()
    out = model(torch.rand(2, 5, SMALL["in_features"]))
    assert bool(torch.isfinite(out.distributions).all())
    torch.testing.assert_close(out.distributions.sum(-1), torch.ones(2, SMALL["steps"]))
    assert torch.equal(out.distributions.argmax(-1), out.indices)  # the softmax's mode is the pick
    empty = model(torch.rand(2, 0, SMALL["in_features"]))
    assert empty.distributions.shape == (2, SMALL["steps"], 0)
    assert bool((empty.indices == -1).all()) and not bool(empty.valid.any())
