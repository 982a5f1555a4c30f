"""One loss vocabulary: every name a training path takes is in :data:`dgn._choices.LOSSES`
and means the same on each path that takes it; the end-to-end name of the binary gold spread
evenly is ``listwise`` (``soft_label`` is the graded loss everywhere), and records written
before the rename read as they trained."""

from __future__ import annotations

import pytest
import torch

from dgn._choices import END_TO_END_LOSSES, FROZEN_LOSSES, GRADED_LOSSES, LOSSES
from dgn.baselines import EncoderScorer
from dgn.losses import soft_cross_entropy, soft_label_cross_entropy
from dgn.model import DGN, DGNConfig
from dgn.pipeline import Batch
from dgn.train import TrainConfig, training_loss


def test_every_path_takes_names_of_the_one_vocabulary():
    from dgn.sentence.config import DENSE_LOSSES
    from dgn.sentence.config import LOSSES as E2E
    from dgn.train import LOSSES as FROZEN
    from dgn.tune import CARD_LOSSES

    assert set(FROZEN) == set(FROZEN_LOSSES) and set(E2E) == set(END_TO_END_LOSSES)
    assert set(DENSE_LOSSES) == set(GRADED_LOSSES)
    for name in (*FROZEN, *E2E, *DENSE_LOSSES, *CARD_LOSSES.values()):
        assert name in LOSSES, name
    assert set(CARD_LOSSES) - set(LOSSES) == {"soft_ce"}  # the model card's one name of its own


def _batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, -1] = False
    gold = torch.zeros(2, 5, dtype=torch.bool)
    gold[0, [0, 3]] = True
    gold[1, 2] = True
    relevance = gold.float() * 2.0
    relevance[0, 1] = 1.0  # a grade outside the gold: 'listwise' must not read it
    return Batch(index=torch.arange(2), features=torch.randn(2, 5, 4, generator=g), mask=mask, gold=gold,
                 relevance=relevance)


def test_frozen_listwise_is_the_gold_spread_evenly_on_both_model_kinds():
    batch = _batch()
    torch.manual_seed(0)
    dgn = DGN(DGNConfig(in_features=4, hidden_features=6, encoded_features=5, steps=3))
    logits = dgn(batch.features, batch.mask).logits
    torch.testing.assert_close(training_loss(dgn, batch, TrainConfig(loss="listwise")),
                               soft_label_cross_entropy(logits, batch.gold.float()))
    scorer = EncoderScorer(4, 6, 5)
    flat = scorer(batch.features, batch.mask).logits
    torch.testing.assert_close(training_loss(scorer, batch, TrainConfig(loss="listwise")),
                               soft_cross_entropy(flat, batch.gold.float(), mask=batch.mask))
    # and not the graded target
    assert not torch.allclose(training_loss(dgn, batch, TrainConfig(loss="listwise")),
                              training_loss(dgn, batch, TrainConfig(loss="soft_label")))


def test_end_to_end_soft_label_is_refused_with_what_to_use_and_old_records_read_as_listwise():
    from dgn.sentence import FinetuneConfig
    from dgn.sentence.config import config_from_record

    with pytest.raises(ValueError, match=r"graded loss: set dense_loss='soft_label'.*loss='listwise'"):
        FinetuneConfig(loss="soft_label")
    with pytest.raises(ValueError, match=r"graded loss: set dense_loss='approx_ndcg'"):
        FinetuneConfig(loss="approx_ndcg")
    assert config_from_record({"loss": "soft_label"}).loss == "listwise"
    assert config_from_record({"loss": "layerwise"}).loss == "layerwise"
    assert config_from_record({}).loss == FinetuneConfig().loss


def test_dgn_train_end_to_end_soft_label_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    from dgn.cli import main
    from dgn.data import Problem, write_problems

    data = tmp_path / "train.jsonl"
    write_problems(data, [Problem("a", "a claim", ["one", "two"], [[0]])])
    code = main(["train", "--finetune-encoder", "--train", str(data), "--output", str(tmp_path / "m"),
                 "--loss", "soft_label", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "dense_loss='soft_label'" in err and "listwise" in err
    assert not (tmp_path / "m").exists()
