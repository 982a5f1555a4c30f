"""dgn.checkpoint: what kind of model a directory holds, from its files alone."""

from __future__ import annotations

import json

import pytest

from dgn.baselines import EncoderScorer
from dgn.checkpoint import CONFIG_NAME, END_TO_END_CONFIG, checkpoint_kind, is_end_to_end_model
from dgn.errors import DgnUserError
from dgn.model import DGN, DGNConfig


def test_checkpoint_kind_of_each_model_and_the_errors(tmp_path):
    DGN(DGNConfig(in_features=3)).save_pretrained(tmp_path / "dgn")
    EncoderScorer(3, 4, 2).save_pretrained(tmp_path / "enc")
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / END_TO_END_CONFIG).write_text("{}")
    assert [checkpoint_kind(tmp_path / n) for n in ("dgn", "enc", "e2e")] == ["dgn", "encoder", "end-to-end"]
    assert is_end_to_end_model(tmp_path / "e2e") and not is_end_to_end_model(tmp_path / "dgn")
    with pytest.raises(DgnUserError, match="model directory not found"):
        checkpoint_kind(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DgnUserError, match=r"empty/config\.json: no model config found"):
        checkpoint_kind(tmp_path / "empty")
    meta = json.loads((tmp_path / "enc" / CONFIG_NAME).read_text())
    (tmp_path / "enc" / CONFIG_NAME).write_text(json.dumps({**meta, "model_type": "forest"}))
    with pytest.raises(DgnUserError, match="field 'model_type': unknown model type 'forest'"):
        checkpoint_kind(tmp_path / "enc")
    (tmp_path / "enc" / CONFIG_NAME).write_text("{not json")
    with pytest.raises(DgnUserError, match="cannot read config"):
        checkpoint_kind(tmp_path / "enc")
