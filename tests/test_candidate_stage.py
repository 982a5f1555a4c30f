"""The candidate stage: fused orders against independent computations, cuts, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dgn.data import Problem
from dgn.errors import DgnUserError
from dgn.fusion.candidates import CandidateStage, parse_rankers

CLAIM = "the river flooded the old town in 1921"
CANDIDATES = [
    "a cat sat on the mat",
    "the old town was flooded by the river in 1921",
    "floods hit many towns",
    "the town hall is old",
    "in 1921 the river rose",
    "bread is baked daily",
]


def _problem() -> Problem:
    return Problem("p1", CLAIM, list(CANDIDATES), [[1, 4], [2]], relevance=[0, 3, 1, 0, 2, 0])


def _rank_desc(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))]


def test_single_ranker_order_is_that_rankers_order() -> None:
    from dgn.features.lexical import bm25_scores

    stage = CandidateStage(("bm25",), "rrf", top_l=3)
    assert stage.order(CLAIM, CANDIDATES) == _rank_desc(bm25_scores(CLAIM, CANDIDATES))


def test_rrf_of_two_rankers_by_hand() -> None:
    from dgn.features import TfidfScorer
    from dgn.features.lexical import bm25_scores

    tfidf = TfidfScorer().fit([CLAIM, *CANDIDATES]).score(CLAIM, CANDIDATES)
    bm25 = bm25_scores(CLAIM, CANDIDATES)
    fused = np.zeros(len(CANDIDATES))
    for scores in (tfidf, bm25):
        for rank, v in enumerate(_rank_desc(scores), start=1):
            fused[v] += 1.0 / (60 + rank)
    stage = CandidateStage(("tfidf", "bm25"), "rrf", top_l=3)
    assert stage.order(CLAIM, CANDIDATES) == _rank_desc(fused)


@pytest.mark.parametrize("fusion", ["combsum", "combmnz", "borda", "fg", "fv"])
def test_every_fusion_gives_a_permutation(fusion: str) -> None:
    order = CandidateStage(("tfidf", "bm25"), fusion, top_l=2).order(CLAIM, CANDIDATES)
    assert sorted(order) == list(range(len(CANDIDATES)))
    assert order[0] == 1  # the near-paraphrase wins under every fusion


def test_cut_reindexes_gold_relevance_and_keeps_gold_for_training() -> None:
    stage = CandidateStage(("bm25",), "rrf", top_l=2)
    problem = _problem()
    cut, keep = stage.cut(problem)
    assert len(keep) == 2
    assert cut.candidates == [CANDIDATES[v] for v in keep]
    assert cut.relevance == [problem.relevance[v] for v in keep]
    assert cut.meta["candidate_index"] == keep
    expected_gold = [sorted(keep.index(v) for v in g if v in keep) for g in problem.gold]
    assert cut.gold == [g for g in expected_gold if g]
    train_cut, train_keep = stage.cut(problem, keep_gold=True)
    assert train_keep[:2] == keep
    assert {1, 2, 4} <= set(train_keep)
    assert sorted(v for g in train_cut.gold for v in g) == sorted(
        train_keep.index(v) for v in (1, 2, 4))
    small, same = CandidateStage(("bm25",), "rrf", top_l=10).cut(problem)
    assert small is problem and same == list(range(6))


@pytest.mark.reference
def test_sentence_ranker_is_the_encoder_cosine() -> None:
    pytest.importorskip("sentence_transformers")
    from dgn.sentence.encoder import encode_texts, load_sentence_model

    emb = np.asarray(encode_texts(load_sentence_model(), [CLAIM, *CANDIDATES], progress=False), dtype=np.float64)
    cos = emb[1:] @ emb[0] / (np.linalg.norm(emb[1:], axis=1) * np.linalg.norm(emb[0]))
    stage = CandidateStage(("sentence",), "rrf", top_l=3)
    assert stage.order(CLAIM, CANDIDATES) == _rank_desc(cos)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"rankers": ("bm26",)}, "unknown ranker(s) bm26"),
    ({"rankers": ("bm25", "bm25")}, "named twice"),
    ({"fusion": "mean"}, "--fusion 'mean': unknown"),
    ({"top_l": 0}, "positive integer"),
])
def test_stage_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(DgnUserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        CandidateStage(**{"rankers": ("bm25",), "fusion": "rrf", "top_l": 3, **kwargs})
    assert parse_rankers("tfidf, bm25") == ("tfidf", "bm25")


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from dgn.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _word_problems(seed: int, n: int, candidates: int) -> list[Problem]:
    """Random claims and candidates over a ten-word vocabulary, one gold sentence each."""
    rng = np.random.default_rng(seed)
    words = "river town flood old year rain bridge storm water street".split()
    return [Problem(f"c{i}", " ".join(rng.choice(words, 4)),
                    [" ".join(rng.choice(words, 5)) for _ in range(candidates)],
                    [[int(rng.integers(candidates))]]) for i in range(n)]


def test_train_and_predict_with_a_candidate_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dgn.data import read_predictions, write_problems

    monkeypatch.setenv("DGN_CACHE_DIR", str(tmp_path / "cache"))
    problems = _word_problems(0, 24, 9)
    data = tmp_path / "data.jsonl"
    write_problems(data, problems)
    model = tmp_path / "model"
    code, out, err = _cli(["train", "--train", data, "--dev", data, "--output", model, "--features", "lexical",
                           "--top-l", 4, "--rankers", "tfidf,bm25", "--epochs", 1, "--quiet"], capsys)
    assert code == 0, err
    recorded = json.loads((model / "config.json").read_text())["extra"]["candidate_stage"]
    assert recorded == {"rankers": ["tfidf", "bm25"], "fusion": "rrf", "top_l": 4, "encoder_model": None}
    preds = tmp_path / "preds.jsonl"
    code, out, err = _cli(["predict", "--model", model, "--data", data, "--output", preds, "--k", 3, "--quiet"],
                          capsys)
    assert code == 0, err
    stage = CandidateStage(("tfidf", "bm25"), "rrf", top_l=4)
    for problem, pred in zip(problems, read_predictions(preds), strict=True):
        allowed = set(stage.order(problem.query, problem.candidates)[:4])
        assert len(pred.ranking) == 3
        assert set(pred.ranking) <= allowed, problem.id
    code, _, err = _cli(["train", "--train", data, "--output", tmp_path / "m2", "--features", "lexical",
                         "--rankers", "bm25"], capsys)
    assert code != 0 and "needs --top-l" in err
    code, _, err = _cli(["predict", "--model", model, "--data", data, "--output", preds, "--fusion", "fg"], capsys)
    assert code != 0 and "needs --top-l" in err


def _train_lexical(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                   problems: list[Problem], *options: object) -> Path:
    """Write ``problems`` to ``tmp_path/data.jsonl`` and train ``tmp_path/m`` on them
    (lexical features, one epoch, ``options`` added); return the data file."""
    from dgn.data import write_problems

    monkeypatch.setenv("DGN_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data.jsonl"
    write_problems(data, problems)
    code, _, err = _cli(["train", "--train", data, "--output", tmp_path / "m", "--features", "lexical",
                         *options, "--epochs", 1, "--quiet"], capsys)
    assert code == 0, err
    return data


def test_finetune_keeps_the_candidate_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = _train_lexical(tmp_path, capsys, monkeypatch, _word_problems(1, 16, 8), "--top-l", 3)
    code, _, err = _cli(["finetune", "--model_name_or_path", tmp_path / "m", "--train", data,
                         "--output_dir", tmp_path / "ft", "--loss", "soft_ce", "--num_train_epochs", 1, "--quiet"],
                        capsys)
    assert code == 0, err
    extra = json.loads((tmp_path / "ft" / "config.json").read_text())["extra"]
    assert extra["candidate_stage"]["top_l"] == 3
    cut = [json.loads(line) for line in (tmp_path / "ft" / "candidates-train.jsonl").read_text().splitlines()]
    assert all(3 <= len(p["candidates"]) <= 4 for p in cut)  # top 3, plus the gold beyond the cut


def test_predict_compile_on_gives_the_same_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """--compile on (the compiled SCMM greedy kernel) writes the predictions --compile off writes."""
    from dgn.data import read_predictions

    problems = _word_problems(2, 20, 9)
    data = _train_lexical(tmp_path, capsys, monkeypatch, problems)
    import dgn.layer

    seen: list[bool] = []
    original = dgn.layer.greedy_select

    def recording(*args, **kwargs):
        seen.append(bool(kwargs.get("compile")))
        return original(*args, **kwargs)

    monkeypatch.setattr(dgn.layer, "greedy_select", recording)
    outputs = {}
    for flag in ("off", "on"):
        out = tmp_path / f"{flag}.jsonl"
        code, _, err = _cli(["predict", "--model", tmp_path / "m", "--data", data, "--output", out,
                             "--compile", flag, "--quiet"], capsys)
        assert code == 0, err
        outputs[flag] = [(p.id, p.ranking) for p in read_predictions(out)]
    assert outputs["on"] == outputs["off"]
    assert seen and True in seen and False in seen  # each run took its own path


def test_predict_file_writes_what_dgn_predict_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """dgn.predict.predict_file, the library function behind ``dgn predict``: the same
    predictions as the command, with the model's recorded stage and with one given; the
    picks are indices of the original candidates, within the stage's cut."""
    from dgn.data import read_predictions
    from dgn.predict import predict_file

    problems = _word_problems(3, 18, 9)
    data = _train_lexical(tmp_path, capsys, monkeypatch, problems, "--top-l", 5)
    for options, flags in (({}, []), ({"top_l": 3, "rankers": "tfidf"}, ["--top-l", 3, "--rankers", "tfidf"])):
        cli_out, lib_out = tmp_path / "cli.jsonl", tmp_path / "lib.jsonl"
        code, _, err = _cli(["predict", "--model", tmp_path / "m", "--data", data, "--output", cli_out, "--k", 2,
                             *flags, "--quiet"], capsys)
        assert code == 0, err
        assert predict_file(tmp_path / "m", data, lib_out, k=2, progress=False, **options) == (len(problems), 2)
        cli, lib = list(read_predictions(cli_out)), list(read_predictions(lib_out))
        assert [(p.id, p.ranking, p.scores) for p in lib] == [(p.id, p.ranking, p.scores) for p in cli]
        stage = CandidateStage(("tfidf",), "rrf", top_l=3) if options else CandidateStage(("bm25",), "rrf", top_l=5)
        for problem, pred in zip(problems, lib, strict=True):
            assert len(pred.ranking) == 2
            assert set(pred.ranking) <= set(stage.order(problem.query, problem.candidates)[:stage.top_l])
    bad = tmp_path / "bad.jsonl"
    for options, message in (({"fusion": "fg"}, "--fusion: the candidate stage needs --top-l"),
                             ({"k": 0}, "k must be a positive integer"),
                             ({"batch_size": 0}, "batch_size must be a positive integer"),
                             ({"compile": "yes"}, "compile must be 'auto', 'on' or 'off'")):
        with pytest.raises(DgnUserError, match=message):
            predict_file(tmp_path / "m", data, bad, progress=False, **options)
        assert not bad.exists()
    with pytest.raises(DgnUserError, match="directory .*nowhere does not exist"):
        predict_file(tmp_path / "m", data, tmp_path / "nowhere" / "p.jsonl", progress=False)


def test_cut_problem_is_the_one_cut_both_stages_use():
    """A hand case: candidates 3 and 0 kept, gold 0 and 4 (4 kept too with keep_gold), the
    relevance re-indexed; a Problem stays a Problem with the kept indices in its meta, and
    any other problem-like object comes back as a namespace with the same fields."""
    from types import SimpleNamespace

    from dgn.data import Problem
    from dgn.fusion.candidates import cut_problem

    problem = Problem("p", "q", ["a", "b", "c", "d", "e"], [[0, 4], [2]], relevance=[2.0, 0.0, 1.0, 0.0, 1.0])
    cut, keep = cut_problem(problem, [3, 0])
    assert keep == [3, 0] and cut.candidates == ["d", "a"] and cut.gold == [[1]] and cut.relevance == [0.0, 2.0]
    assert isinstance(cut, Problem) and cut.meta["candidate_index"] == [3, 0]
    cut, keep = cut_problem(problem, [3, 0], keep_gold=True)
    assert keep == [3, 0, 2, 4] and cut.gold == [[1, 3], [2]]
    plain = SimpleNamespace(id="p", query="q", candidates=list("abcde"), gold=[[0, 4], [2]], relevance=None)
    cut, keep = cut_problem(plain, [4, 1])
    assert cut.candidates == ["e", "b"] and cut.gold == [[0]] and cut.relevance is None and keep == [4, 1]
