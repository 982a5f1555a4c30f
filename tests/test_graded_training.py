"""Graded training: the losses of ``TrainConfig.loss``, encoder-scorer checkpoints and
``dgn finetune`` (run in-process on tiny word-vector data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dgn.baselines import EncoderScorer, RankingOutput
from dgn.cli import main
from dgn.errors import DgnUserError
from dgn.losses import layerwise_cross_entropy, soft_label_cross_entropy
from dgn.model import DGN, DGNConfig, load_model
from dgn.pipeline import Batch
from dgn.train import LOSSES, TrainConfig, training_loss

WORDS = [f"w{i:02d}" for i in range(40)]


def _batch(B: int = 3, N: int = 6, F: int = 5, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(B, N, F, generator=g)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, -2:] = False
    gold = torch.zeros(B, N, dtype=torch.bool)
    gold[:, 0] = True
    gold[1, 2] = True
    relevance = gold.float() * torch.tensor([3.0, 1.0, 2.0]).unsqueeze(1)
    relevance[2, 3] = 0.5  # graded: a candidate outside gold with a low grade
    return Batch(index=torch.arange(B), features=features, mask=mask, gold=gold, relevance=relevance)


def _models(F: int = 5) -> list[Any]:
    torch.manual_seed(0)
    return [DGN(DGNConfig(in_features=F, hidden_features=8, encoded_features=6, steps=3)), EncoderScorer(F, 8, 6)]


@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_trains_both_model_kinds(loss: str) -> None:
    batch = _batch()
    for model in _models():
        value = training_loss(model, batch, TrainConfig(loss=loss), pos_weight=2.0)
        assert value.dim() == 0 and torch.isfinite(value)
        value.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and any(float(g.abs().sum()) > 0 for g in grads)


def test_dgn_losses_are_the_layerwise_functions() -> None:
    batch = _batch()
    model = _models()[0]
    logits = model(batch.features, batch.mask).logits
    sparse = layerwise_cross_entropy(logits, batch.gold)
    dense = soft_label_cross_entropy(logits, batch.relevance)
    torch.testing.assert_close(training_loss(model, batch, TrainConfig(loss="sparse_ce")), sparse)
    torch.testing.assert_close(training_loss(model, batch, TrainConfig(loss="layerwise")), sparse)
    torch.testing.assert_close(training_loss(model, batch, TrainConfig(loss="soft_label")), dense)
    mixed = training_loss(model, batch, TrainConfig(loss="soft_label", sparse_weight=0.5))
    torch.testing.assert_close(mixed, dense + 0.5 * sparse)


def test_encoder_soft_label_is_cross_entropy_against_the_grades() -> None:
    batch = _batch()
    model = _models()[1]
    logits = model(batch.features, batch.mask).logits
    expected = []
    for b in range(logits.shape[0]):  # independent: per row, over the real candidates only
        m = batch.mask[b]
        logp = torch.log_softmax(logits[b][m], dim=0)
        target = batch.relevance[b][m] / batch.relevance[b][m].sum()
        expected.append(-(target * logp).sum())
    torch.testing.assert_close(training_loss(model, batch, TrainConfig(loss="soft_label")), torch.stack(expected).mean())


def test_train_config_rejects_bad_mixing() -> None:
    with pytest.raises(ValueError, match="sparse_weight"):
        TrainConfig(loss="layerwise", sparse_weight=1.0)
    with pytest.raises(ValueError, match="sparse_weight"):
        TrainConfig(loss="soft_label", sparse_weight=-1.0)
    with pytest.raises(ValueError, match="ndcg_temperature"):
        TrainConfig(loss="approx_ndcg", ndcg_temperature=0.0)
    with pytest.raises(ValueError, match="loss"):
        TrainConfig(loss="bce")


def test_encoder_scorer_checkpoint_round_trip(tmp_path: Path) -> None:
    model = EncoderScorer(5, 8, 6, deep=True)
    model.extra = {"note": "x"}
    model.save_pretrained(tmp_path / "enc")
    loaded = load_model(tmp_path / "enc")
    assert isinstance(loaded, EncoderScorer) and loaded.extra == {"note": "x"} and loaded.config == model.config
    x = torch.randn(2, 4, 5)
    model.eval()
    out = loaded(x)
    assert isinstance(out, RankingOutput)
    torch.testing.assert_close(out.logits, model(x).logits)
    with pytest.raises(DgnUserError, match="model_type"):
        DGN.from_pretrained(tmp_path / "enc")
    DGN(DGNConfig(in_features=5)).save_pretrained(tmp_path / "dgn")
    assert isinstance(load_model(tmp_path / "dgn"), DGN)
    with pytest.raises(DgnUserError, match="not an encoder scorer"):
        EncoderScorer.from_pretrained(tmp_path / "dgn")



def test_load_model_reads_the_checkpoint_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_model builds either model type from one read of its weights file, and gives the
    model from_pretrained gives."""
    import dgn.model as model_module

    reads: list[Path] = []
    real = model_module.read_checkpoint

    def counting(directory: Any, map_location: Any = "cpu") -> Any:
        reads.append(Path(directory))
        return real(directory, map_location)

    monkeypatch.setattr(model_module, "read_checkpoint", counting)
    torch.manual_seed(0)
    scorer = EncoderScorer(5, 8, 6)
    scorer.save_pretrained(tmp_path / "enc")
    dgn_model = DGN(DGNConfig(in_features=5))
    dgn_model.save_pretrained(tmp_path / "dgn")
    for directory, original, cls in ((tmp_path / "enc", scorer, EncoderScorer), (tmp_path / "dgn", dgn_model, DGN)):
        reads.clear()
        loaded = load_model(directory)
        assert reads == [directory] and type(loaded) is cls and not loaded.training
        state = loaded.state_dict()
        assert state.keys() == original.state_dict().keys()
        for name, tensor in original.state_dict().items():
            assert torch.equal(state[name], tensor), name

# -- the commands, in-process ------------------------------------------------------------


def _problems(n: int, seed: int, prefix: str, graded: bool) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic = [str(w) for w in rng.choice(WORDS, size=4, replace=False)]
        num = int(rng.integers(5, 8))
        gold = sorted(int(g) for g in rng.choice(num, size=2, replace=False))
        cands = []
        for v in range(num):
            pool = topic if v in gold else WORDS
            cands.append(" ".join(str(w) for w in rng.choice(pool, size=3)) + " .")
        record: dict[str, Any] = {"id": f"{prefix}{i}", "query": " ".join(topic), "candidates": cands, "gold": [gold]}
        if graded:
            record["relevance"] = [3.0 if v == gold[0] else 1.0 if v == gold[1] else 0.0 for v in range(num)]
        out.append(record)
    return out


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("graded")
    rng = np.random.default_rng(1)
    vec = root / "v.vec"
    vec.write_text(f"{len(WORDS)} 6\n" + "".join(
        w + " " + " ".join(f"{x:.4f}" for x in rng.normal(size=6)) + "\n" for w in WORDS))
    paths = {"vec": vec, "root": root}
    for name, n, seed, graded in (("train", 30, 2, False), ("dev", 10, 3, False), ("graded", 30, 4, True)):
        p = root / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in _problems(n, seed, name, graded)))
        paths[name] = p
    return paths


def _run(args: list[Any], monkeypatch: pytest.MonkeyPatch, cache: Path) -> int:
    monkeypatch.setenv("DGN_CACHE_DIR", str(cache))
    return main([str(a) for a in args])


def test_train_encoder_predict_and_finetune(
    ws: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    common = ["--vectors", ws["vec"], "--features", "wordvec", "--epochs", "2", "--quiet"]
    assert _run(["train", "--train", ws["train"], "--dev", ws["dev"], "--output", tmp_path / "enc",
                 "--model-type", "encoder", *common], monkeypatch, cache) == 0
    scorer = load_model(tmp_path / "enc")
    assert isinstance(scorer, EncoderScorer)
    assert _run(["predict", "--model", tmp_path / "enc", "--data", ws["dev"], "--k", "3",
                 "--output", tmp_path / "p.jsonl", "--quiet"], monkeypatch, cache) == 0
    preds = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    # independent: the scorer's logits on the recorded features, sorted by hand
    from dgn.pipeline import SelectionDataset, featurizer_for_model

    data = SelectionDataset(ws["dev"], featurizer_for_model(scorer, str(tmp_path / "enc"), vectors=None,
                                                       cache_dir=cache, progress=False))
    batch = next(iter(data.batches(len(data))))  # the scaled features predict sees
    logits = scorer(batch.features, batch.mask).logits
    for b, pred in zip(batch.index.tolist(), preds, strict=True):
        scores = logits[b].tolist()
        n = data.infos[b].num_candidates
        order = sorted(range(n), key=lambda j: -scores[j])[:3]
        assert pred["id"] == data.infos[b].id and pred["ranking"] == order
    capsys.readouterr()
    for source, loss in ((tmp_path / "enc", "soft_ce"), (None, "approx_ndcg")):
        if source is None:
            assert _run(["train", "--train", ws["train"], "--output", tmp_path / "dgn", *common], monkeypatch, cache) == 0
            source = tmp_path / "dgn"
        out = tmp_path / f"ft-{loss}"
        assert _run(["finetune", "--model_name_or_path", source, "--train", ws["graded"], "--dev", ws["dev"],
                     "--output_dir", out, "--loss", loss, "--sparse_weight", "0.5", "--learning_rate", "0.01",
                     "--num_train_epochs", "2", "--quiet"], monkeypatch, cache) == 0
        tuned = load_model(out)
        assert type(tuned) is type(load_model(source))
        assert tuned.extra["train_config"]["loss"] == {"soft_ce": "soft_label"}.get(loss, loss)
        assert tuned.extra["train_config"]["sparse_weight"] == 0.5
        before = dict(load_model(source).state_dict())
        assert any(not torch.equal(v, before[k]) for k, v in tuned.state_dict().items())
        history = json.loads((out / "train_history.json").read_text())
        assert history["finetuned_from"] == str(source.resolve()) and len(history["history"]) == 2


def test_finetune_resume_matches_an_uninterrupted_run(
    ws: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    assert _run(["train", "--train", ws["train"], "--output", tmp_path / "base", "--vectors", ws["vec"],
                 "--features", "wordvec", "--epochs", "1", "--quiet"], monkeypatch, cache) == 0
    args = ["finetune", "--model_name_or_path", tmp_path / "base", "--train", ws["graded"], "--dev", ws["dev"],
            "--loss", "soft_ce", "--quiet"]
    assert _run([*args, "--output_dir", tmp_path / "full", "--num_train_epochs", "3"], monkeypatch, cache) == 0
    assert _run([*args, "--output_dir", tmp_path / "cut", "--num_train_epochs", "1"], monkeypatch, cache) == 0
    assert _run([*args, "--output_dir", tmp_path / "cut", "--num_train_epochs", "3", "--resume"],
                monkeypatch, cache) == 0
    full, cut = load_model(tmp_path / "full").state_dict(), load_model(tmp_path / "cut").state_dict()
    for k, v in full.items():
        torch.testing.assert_close(cut[k], v)


def test_finetune_errors(
    ws: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    assert _run(["train", "--train", ws["train"], "--output", tmp_path / "base", "--vectors", ws["vec"],
                 "--features", "wordvec", "--epochs", "1", "--quiet"], monkeypatch, cache) == 0
    capsys.readouterr()
    base = ["finetune", "--model_name_or_path", tmp_path / "base", "--train", ws["graded"]]
    cases = [
        ([*base, "--output_dir", tmp_path / "base"], "same directory"),
        ([*base, "--output_dir", tmp_path / "o", "--resume"], "no training state"),
        ([*base, "--output_dir", tmp_path / "o", "--head_learning_rate", "0.01"],
         "--head_learning_rate: only for a model trained end to end"),
        (["finetune", "--model_name_or_path", tmp_path / "nope", "--train", ws["graded"], "--output_dir", tmp_path / "o"],
         "nope"),
        (["finetune", "--model_name_or_path", tmp_path / "base", "--train", tmp_path / "missing.jsonl",
          "--output_dir", tmp_path / "o"], "missing.jsonl"),
    ]
    for args, needle in cases:
        assert _run(args, monkeypatch, cache) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    # argparse's errors: exit status 2 and the usage, then the one line naming the option
    for option, needle in (
        (["--loss", "ndcg"], "argument --loss: invalid choice: 'ndcg' (choose from 'soft_ce', 'soft_label', 'approx_ndcg', 'sparse_ce')"),
        (["--sparse_weight", "-1"], "argument --sparse_weight/--sparse-weight: expected a finite number >= 0, got -1"),
    ):
        with pytest.raises(SystemExit) as exc:
            _run([*base, "--output_dir", tmp_path / "o", *option], monkeypatch, cache)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.splitlines()[-1] == f"dgn finetune: error: {needle}", err
    assert not (tmp_path / "o").exists()


def test_train_model_type_rejects_dgn_options(
    ws: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(["train", "--train", ws["train"], "--output", tmp_path / "x", "--vectors", ws["vec"],
                 "--model-type", "encoder", "--steps", "3"], monkeypatch, tmp_path / "cache")
    assert code == 2 and "--steps" in capsys.readouterr().err


def test_dgn_output_ranking_is_picks_then_last_layer_gains() -> None:
    torch.manual_seed(3)
    model = DGN(DGNConfig(in_features=4, hidden_features=8, encoded_features=6, steps=3)).eval()
    x = torch.randn(3, 7, 4)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2:] = False  # fewer candidates than layers: picks end with -1
    out = model(x, mask)
    ranking = out.ranking()
    for b in range(3):
        picks = [i for i in out.indices[b].tolist() if i >= 0]
        last = out.logits[b, -1].tolist()
        rest = sorted((j for j in range(7) if j not in picks and mask[b, j]), key=lambda j: -last[j])
        padding = [j for j in range(7) if not mask[b, j]]
        assert ranking[b].tolist() == picks + rest + padding


def test_train_from_files_checks_its_arguments_first(tmp_path: Path) -> None:
    """Bad arguments are one-line user errors raised before the output directory is made."""
    from dgn.train import train_from_files

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"id": "a", "query": "q", "candidates": ["x", "y"], "gold": [[0]]}) + "\n")
    out = tmp_path / "out"
    cases = [
        ({"model_type": "bogus"}, "model_type must be 'dgn', 'encoder' or 'deep-encoder'"),
        ({"model_options": {"stpes": 3}}, "model_options: .*stpes"),
        ({"model_options": {"steps": 0}}, "model_options: DGNConfig.steps"),
        ({"model_type": "encoder", "model_options": {"steps": 3}}, "model_options steps: DGN settings"),
        ({"features": "wordvec,nope"}, "nope"),
    ]
    for options, message in cases:
        with pytest.raises(DgnUserError, match=message):
            train_from_files(data, out, progress=False, **options)
        assert not out.exists(), options
    with pytest.raises(DgnUserError, match="--train .*missing.jsonl: file not found"):
        train_from_files([data, tmp_path / "missing.jsonl"], out, progress=False)
    assert not out.exists()


def test_train_from_files_resume_refuses_a_dev_file_the_run_had_not(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dgn.train import TrainConfig, read_run_settings, train_from_files

    monkeypatch.setenv("DGN_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "train.jsonl"
    rows = [{"id": f"p{i}", "query": "the cat sat", "candidates": ["a cat sat", "dogs run", "the cat"],
             "gold": [[i % 3]]} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    result, history = train_from_files(data, out, features="lexical", config=TrainConfig(epochs=1, batch_size=2),
                                       progress=False)
    assert history["dev"] is None and result.best_epoch == 1
    settings = read_run_settings(out)
    assert settings["dev"] is None and settings["train_sha256"] is not None
    with pytest.raises(DgnUserError, match="the run being resumed had no --dev"):
        train_from_files(None, out, data, resume_settings=settings, progress=False)
