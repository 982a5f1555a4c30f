"""Training a model end to end: its task in the library's training loop (:class:`EndToEndTask`),
:func:`finetune`, and :func:`train_end_to_end`, what ``dgn train`` runs by default."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dgn._paths import model_directory, one_train_file, train_file_list
from dgn.errors import DgnUserError
from dgn.features.sentence import (
    DEFAULT_MODEL,
    load_sentence_model,
    resolve_model_path,
)
from dgn.sentence.config import (
    HEADS,
    INITS,
    RECORDED_BEFORE,
    FinetuneConfig,
    FinetuneResult,
    config_from_record,
    default_facility,
    default_init,
)
from dgn.sentence.model import EndToEndModel
from dgn.sentence.predict import choose_diversity_scale, cut_candidates, rank_problems
from dgn.training import (
    END_TO_END_KIND,
    Task,
    check_global_batch,
    check_save_every,
    fit,
    usable_problems,
)

__all__ = ["EndToEndTask", "finetune", "train_end_to_end", "bottom_modules", "frozen_bottom", "transformer_dropout", "FUSED_ADAMW"]

#: AdamW's fused kernel (one pass over each parameter for the whole update, instead of
#: about eight elementwise passes): the same update up to float rounding, about 6x faster
#: on MiniLM's 22.7M parameters on the CPU (``benchmarks/finetune_speed.py --optimizer``). Used where the installed torch has it for the
#: parameters' device (CPU since torch 2.4); the per-tensor loop otherwise.
FUSED_ADAMW = True


def _gold_mask(problem: Any, n: int) -> list[bool]:
    g = [False] * n
    for group in problem.gold:
        for v in group:
            if v < n:
                g[v] = True
    return g


def _relevance_rows(problems: Sequence[Any], mask: Tensor) -> Tensor:
    """``(B, N)`` float: each problem's ``relevance`` (binary gold where it has none), 0 on padding."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for b, p in enumerate(problems):
        n = len(p.candidates)
        grades = getattr(p, "relevance", None)
        out[b, :n] = torch.tensor(_gold_mask(p, n) if grades is None else grades, dtype=torch.float32)
    return out


def _adamw(groups: list[dict[str, Any]], weight_decay: float) -> torch.optim.AdamW:
    """AdamW over ``groups``, fused where :data:`FUSED_ADAMW` asks and torch has the kernel
    for every parameter's device (torch checks that only at the first step, so it is
    checked here)."""
    fused = FUSED_ADAMW and _fused_adamw_available([p for g in groups for p in g["params"]])
    return torch.optim.AdamW(groups, weight_decay=weight_decay, fused=True if fused else None)


def _fused_adamw_available(params: list[Tensor]) -> bool:
    """Whether the installed torch has fused optimiser kernels for all of ``params``' devices
    (the CPU from torch 2.4 on)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return False
    devices = set(_get_fused_kernels_supported_devices())
    return all(p.device.type in devices and p.is_floating_point() for p in params)


def _optimizer(model: EndToEndModel, cfg: FinetuneConfig, total_steps: int) -> tuple[torch.optim.AdamW, Any]:
    """AdamW (the transformer at ``encoder_lr``, the head at ``head_lr``) and its schedule:
    linear warm-up over ``warmup`` of the ``total_steps``, then linear decay to 0."""
    head_params = [p for n, p in model.named_parameters() if not n.startswith("encoder.") and p.requires_grad]
    groups = [{"params": [p for p in model.encoder.parameters() if p.requires_grad], "lr": cfg.encoder_lr}]
    if head_params:
        groups.append({"params": head_params, "lr": cfg.head_lr})
    optimizer = _adamw(groups, cfg.weight_decay)
    warm = max(1, int(cfg.warmup * total_steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total_steps - s) / max(1, total_steps - warm)))
    )
    return optimizer, schedule


def _batch_loss(model: EndToEndModel, problems: Sequence[Any], cfg: FinetuneConfig) -> Tensor:
    """The mean training loss of ``problems`` (each cut to ``cfg.top_l``, its gold kept), on
    the model's device."""
    from dgn.losses import gold_set_tensor

    batch = [cut_candidates(p, cfg.top_l, keep_gold=True)[0] for p in problems]
    cands = [p.candidates for p in batch]
    golds = [_gold_mask(p, len(c)) for p, c in zip(batch, cands, strict=True)]
    grad = None if cfg.grad_candidates is None else [
        _with_gradients(p.query, c, g, cfg.grad_candidates) for p, c, g in zip(batch, cands, golds, strict=True)
    ]
    queries = [p.query for p in batch]
    # without grad_candidates, the plain call (a subclass may override embed_problems as it was)
    q, S, mask = model.embed_problems(queries, cands) if grad is None else model.embed_problems(queries, cands, grad)
    gold = torch.zeros(mask.shape, dtype=torch.bool)
    for b, g in enumerate(golds):
        gold[b, : len(g)] = torch.tensor(g)
    sets = gold_set_tensor([p.gold for p in batch], mask.shape[1]).to(mask.device) if cfg.loss == "set_recall" else None
    lex = model.lexical_for(queries, cands, mask.shape[1])
    # graded relevance (dgn finetune): cfg.dense_loss on the grades, mixed with the sparse loss
    graded: dict[str, Any] = {} if cfg.dense_loss is None else {
        "relevance": _relevance_rows(batch, mask).to(mask.device), "dense": cfg.dense_loss,
        "sparse_weight": cfg.sparse_weight, "ndcg_temperature": cfg.ndcg_temperature, "ndcg_k": cfg.ndcg_k,
    }
    # passed only when set, so that an override of loss without the argument keeps working
    scale = {} if cfg.encoder_grad_scale == 1 else {"encoder_grad_scale": cfg.encoder_grad_scale}
    return model.loss(q, S, mask, gold.to(mask.device), cfg.loss, lexical=lex, gold_sets=sets,
                      first_layer_weight=cfg.first_layer_weight, **graded, **scale)


def _with_gradients(query: str, candidates: Sequence[str], gold: Sequence[bool], others: int) -> list[bool]:
    """Which candidates a training step backpropagates through: the gold ones and the
    ``others`` non-gold ones BM25 ranks highest (``FinetuneConfig.grad_candidates``)."""
    from dgn.features.lexical import bm25_scores

    wants = list(gold)
    if others >= len(candidates) - sum(wants):
        return [True] * len(candidates)
    if others:
        scores = bm25_scores(query, list(candidates))
        ranked = sorted((i for i in range(len(candidates)) if not gold[i]), key=lambda i: (-scores[i], i))
        for i in ranked[:others]:
            wants[i] = True
    return wants


def _check_facility(facility: Any, head: str) -> None:
    if facility is None:
        return
    if isinstance(facility, bool) or not isinstance(facility, (int, float)) or not (0 < facility < float("inf")):
        raise DgnUserError(f"--facility must be a positive number (0: no facility-location term), got {facility!r}")
    if head != "dgn":
        raise DgnUserError(f"--facility {facility:g}: the facility-location term is the DGN head's; "
                           "the listwise head has no greedy steps")


def _model_settings(model: EndToEndModel) -> dict[str, Any]:
    """What makes two selectors the same model (a resumed run's must match the saved one's)."""
    return {
        "head": model.head, "init": model.init, "scale": model.scale, "lexical": model.lexical,
        "facility": model.facility is not None,
        "dgn_config": None if model.dgn is None else model.dgn.config.to_dict(),
    }


def _dev_rankings(model: EndToEndModel, dev: Sequence[Any], cfg: FinetuneConfig, progress: bool) -> list[list[int]]:
    """:func:`rank_problems` on every dev problem; under torchrun each process ranks a
    contiguous slice and every process gets all the rankings (so all agree on the score)."""
    from dgn import distributed

    mine = rank_problems(model, list(dev)[distributed.local_slice(len(dev))], max(cfg.eval_ks),
                         top_l=cfg.top_l, progress=progress)
    return [ranking for part in distributed.all_gather_objects(mine) for ranking in part]


def finetune(
    model: EndToEndModel,
    train: Sequence[Any],
    dev: Sequence[Any] | None,
    config: FinetuneConfig | None = None,
    *,
    on_best: Callable[[EndToEndModel, int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    progress: bool = True,
    state_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    save_every: int | None = None,
    extra_state: dict[str, Any] | None = None,
) -> FinetuneResult:
    """Train ``model`` end to end on ``train`` problems; keep the best epoch by dev recall.

    The model trains on the device its parameters are on (``model.to("cuda")`` first
    trains on the GPU). Under ``torchrun`` (the process group joined,
    :func:`dgn.distributed.process_group`) every process runs this with the same model and
    problems: ``config.claims_per_step`` stays the global batch, each process embeds and
    scores its contiguous slice of it (:func:`dgn.distributed.local_slice`), each slice's
    mean loss is weighted by its share, the gradients are summed across processes in one
    all-reduce, and every process then clips and steps alike: the step one process takes
    on the whole batch, up to the order of float sums (and dropout, whose random masks
    differ per process: the runs then agree in distribution, not bit for bit). The dev
    set is ranked in slices and gathered; only rank 0 calls ``on_best`` and writes the
    training state.

    Args:
        model: An :class:`EndToEndModel`.
        train: :class:`dgn.data.Problem` objects (problems without gold are skipped).
        dev: Problems for epoch selection (None: keep the last epoch).
        config: Optimisation settings.
        on_best: Called with ``(model, epoch, dev_metrics)`` whenever the dev score
            improves, and once at the end without a dev set (e.g. to save a checkpoint).
        on_step: Called with ``(epoch, step)`` after every optimiser step (``step``
            counts from 1 within the epoch), after the state of ``save_every`` is written.
        progress: Progress bars and per-epoch lines (rank 0 only).
        state_path: Write the whole training state here (:func:`dgn.train.write_training_state`,
            atomically) after every epoch and every ``save_every`` steps: the model, AdamW,
            the learning-rate schedule, every process's RNG state, the shuffling
            generator, the epoch and the step within it, the partial epoch loss, the
            best-so-far (score, metrics, weights) and the history.
        resume: Continue from the state in ``state_path``: with the same model, problems
            and config the run ends with exactly the weights of an uninterrupted one (one
            process, CPU, same thread count; under torchrun up to the order of float
            sums). ``config`` must be the saved run's.
        save_every: Also write the state every this many optimiser steps within an epoch
            (None: at epoch ends only), so that a run whose epoch takes hours loses at
            most that many steps.
        extra_state: JSON-like values stored in the state (e.g. the run's files).

    Returns:
        A :class:`FinetuneResult`; ``model`` holds the best epoch's weights, in eval mode,
        at the diversity scale chosen on ``dev`` (``config.diversity_scales``; the choice
        is in the result's ``choices``). ``on_best`` saw the model before that choice.

    Raises:
        DgnUserError: No training problem with gold, a global batch smaller than the
            number of processes, ``resume`` from a state of another model or config,
            or ``config.freeze_layers`` more than the transformer has.
    """
    config = config or FinetuneConfig()
    task = EndToEndTask(model, train, dev, config)
    result = fit(task, on_best=on_best, on_step=on_step, progress=progress, state_path=state_path, resume=resume,
                 save_every=save_every, extra_state=extra_state)
    if config.diversity_scales is not None and dev and model.facility is not None:
        scale, scores = choose_diversity_scale(model, dev, config.diversity_scales, ks=config.eval_ks,
                                               top_l=config.top_l)
        model.diversity_scale = scale
        result.choices["diversity_scale"] = {"value": scale, "dev_scores": {f"{s:g}": v for s, v in scores.items()}}
    return result


def bottom_modules(model: EndToEndModel, layers: int) -> list[nn.Module]:
    """The transformer's token embeddings and its bottom ``layers`` layers (none when
    ``layers`` is 0): what ``FinetuneConfig.freeze_layers`` keeps fixed.

    Raises:
        DgnUserError: The encoder is not a BERT-style transformer with ``embeddings`` and
            ``encoder.layer``, or has fewer than ``layers`` layers.
    """
    if not layers:
        return []
    inner = getattr(model.encoder[0], "auto_model", None)
    blocks = getattr(getattr(inner, "encoder", None), "layer", None)
    embeddings = getattr(inner, "embeddings", None)
    if not isinstance(blocks, nn.ModuleList) or not isinstance(embeddings, nn.Module):
        raise DgnUserError(f"freeze_layers={layers}: the encoder's transformer ({type(inner).__name__}) has no "
                           "'embeddings' and 'encoder.layer' to freeze")
    if layers > len(blocks):
        raise DgnUserError(f"freeze_layers={layers}: the encoder's transformer has only {len(blocks)} layers")
    return [embeddings, *blocks[:layers]]


@contextlib.contextmanager
def frozen_bottom(model: EndToEndModel, layers: int) -> Iterator[list[nn.Parameter]]:
    """Within the block, :func:`bottom_modules` do not train (``requires_grad`` off;
    restored after). Yields the parameters frozen (none when ``layers`` is 0); raises as
    :func:`bottom_modules`."""
    params = [p for m in bottom_modules(model, layers) for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield params
    finally:
        for p in params:
            p.requires_grad_(True)


@contextlib.contextmanager
def transformer_dropout(model: EndToEndModel, p: float | None) -> Iterator[int]:
    """Within the block, every dropout of the transformer (``nn.Dropout``, whose ``p`` BERT's
    attention reads too) drops with probability ``p`` (None: left as it is); restored
    after. Yields how many dropout modules were set."""
    modules = [] if p is None else [m for m in model.encoder.modules() if isinstance(m, nn.Dropout)]
    before = [m.p for m in modules]
    for m in modules:
        m.p = float(p)
    try:
        yield len(modules)
    finally:
        for m, q in zip(modules, before, strict=True):
            m.p = q


class EndToEndTask(Task):
    """An :class:`EndToEndModel` and its problems, as :func:`dgn.training.fit` trains it.

    A step's loss is the head's on the problems (each cut to ``config.top_l``, gold
    kept); AdamW trains the transformer at ``encoder_lr`` and the head at ``head_lr``
    under a linear warm-up and decay; the dev metrics come from ranking the dev problems
    (in slices under torchrun, gathered); ``freeze_layers`` and ``encoder_dropout`` hold
    for the run.
    """

    kind = END_TO_END_KIND
    recorded_before = RECORDED_BEFORE
    batch_option = "--claims-per-step"

    def __init__(self, model: EndToEndModel, train: Sequence[Any], dev: Sequence[Any] | None,
                 config: FinetuneConfig) -> None:
        self.model, self.dev, self.config = model, dev, config
        self.problems = [train[i] for i in usable_problems([p.gold for p in train])]
        self.num_problems = len(self.problems)
        self.batch_size = config.claims_per_step

    def settings(self) -> dict[str, Any]:
        return _model_settings(self.model)

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        return _optimizer(self.model, self.config, total_steps)

    def loss(self, problems: Sequence[int]) -> Tensor:
        return _batch_loss(self.model, [self.problems[i] for i in problems], self.config)

    def dev_metrics(self, progress: bool) -> dict[str, float] | None:
        from dgn.metrics import evaluate_rankings

        if self.dev is None:
            return None
        rankings = _dev_rankings(self.model, self.dev, self.config, progress)
        return evaluate_rankings(rankings, [p.gold for p in self.dev], ks=self.config.eval_ks)

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        with frozen_bottom(self.model, self.config.freeze_layers), \
                transformer_dropout(self.model, self.config.encoder_dropout):
            yield

    @property
    def device(self) -> torch.device:
        return self.model.device


def train_end_to_end(
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    dev: str | os.PathLike[str] | None,
    output: str | os.PathLike[str],
    *,
    head: str | None = None,
    config: FinetuneConfig | None = None,
    encoder_model: str | os.PathLike[str] | None = None,
    lexical: bool | None = None,
    device: str | torch.device | None = None,
    save_every: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    resume_settings: dict[str, Any] | None = None,
    progress: bool = True,
    facility: float | None | str = "default",
    init: str | None = None,
) -> FinetuneResult:
    """Fine-tune a sentence encoder under ``head`` on a selection file; save the best epoch.

    What ``dgn train`` runs end to end (its default with the ``encoders`` extra, or
    ``--finetune-encoder``), alone or as each process under ``torchrun`` (see
    :func:`finetune`). ``output`` receives the model (:meth:`EndToEndModel.save_pretrained`:
    the encoder in the sentence-transformers layout with safetensors weights, the head,
    ``selector.json``), ``train_history.json`` and the training state
    (:data:`dgn.train.STATE_NAME`), all written by rank 0.
    ``head``: ``"dgn"`` (None: the default, or the resumed run's) or ``"listwise"``.
    ``lexical``: the head reads the lexical match features too (``--features sentence,lexical``).
    ``facility``: the DGN head's facility-location term's starting weight (``dgn train
    --facility``; see :class:`EndToEndModel`), None for none; ``"default"``:
    :data:`DEFAULT_FACILITY` (resuming: the run's own).
    ``init``: how the DGN head starts (``dgn train --init``; see :class:`EndToEndModel`);
    None: :data:`DEFAULT_INIT` for the DGN head, or the resumed run's.
    ``train`` may name several files: they are joined into ``output/train-combined.jsonl``
    (problem ids must not repeat across them), as :func:`dgn.train.train_from_files` does.
    ``device``: ``"cpu"`` (default) or ``"cuda"`` (under torchrun: each process's
    ``LOCAL_RANK`` GPU, and the nccl backend). ``save_every``, ``on_step``: as
    :func:`finetune` takes them. ``resume_settings``: continue the run saved in
    ``output``, what :func:`dgn.train.read_run_settings` returns for it; the run's head,
    encoder, features and config are kept (a given one must be the same), and its files
    are read unless others are given, which must have the same SHA-256.

    Raises:
        DgnUserError: A training or dev file that is not there, an output path that is not
            a directory, an unknown ``head``, an encoder model that is not installed, a
            dev file without gold evidence, a global batch smaller than the number of
            processes, a device torch does not see, or, when resuming, settings or files
            other than the run's.
        DataError: A malformed problem (file, line and field), or a problem id in two
            training files.

    Every check, the files read in full included, comes before anything is written.
    """

    from dgn import distributed
    from dgn._paths import resumed_run_files
    from dgn.data import join_problem_files, read_problems
    from dgn.features.cache import file_sha256
    from dgn.training import STATE_NAME, write_history

    world = distributed.world_size() if distributed.process_group(device) else 1
    where = distributed.resolve_device(device)
    main = distributed.is_main()
    progress = progress and main
    saved = None if resume_settings is None else dict(resume_settings)
    if saved is not None:
        if saved["model_type"] != END_TO_END_KIND:
            raise DgnUserError("resume_settings: the run trained on frozen features; resume it with "
                               "dgn.train.train_from_files (dgn train --resume does)")
        recorded = saved["model_config"]
        for name, given, before in (("head", head, recorded["head"]), ("lexical", lexical, recorded["lexical"])):
            if given is not None and given != before:
                raise DgnUserError(f"{name} {given!r}: the run being resumed used {before!r}")
        recorded_encoder = saved["encoder_model"]
        if recorded_encoder is not None and not Path(recorded_encoder).exists() and recorded_encoder != DEFAULT_MODEL:
            # the encoder directory the run started from has moved: its weights are in the
            # state, so the same model from another path will do (the shapes are checked)
            if encoder_model is None:
                raise DgnUserError(f"--encoder-model: the run's sentence encoder {recorded_encoder} is gone; pass "
                                   "--encoder-model PATH (the same model, moved)")
            resolve_model_path(encoder_model)
            saved["encoder_model"] = str(encoder_model)
        elif encoder_model is not None and resolve_model_path(encoder_model) != resolve_model_path(recorded_encoder):
            raise DgnUserError(f"--encoder-model {encoder_model}: the run being resumed fine-tuned "
                               f"{recorded_encoder or DEFAULT_MODEL}")
        had = bool(recorded.get("facility", False))
        if facility != "default" and (facility is not None) != had:
            raise DgnUserError(f"facility {facility!r}: the run being resumed had "
                               f"{'a' if had else 'no'} facility-location term")
        # The starting weight is overwritten by the saved state's; only its presence matters.
        facility = (1.0 if facility in ("default", None) else facility) if had else None
        was = recorded.get("init", "cosine")
        if init is not None and init != was:
            raise DgnUserError(f"init {init!r}: the run being resumed used {was!r}")
        init = was
        head, lexical, encoder_model = recorded["head"], recorded["lexical"], saved["encoder_model"]
        run_config = config_from_record(saved["train_config"])
        if config is not None and config != run_config:
            changed = [k for k, v in asdict(config).items() if asdict(run_config)[k] != v]
            raise DgnUserError(f"config {', '.join(changed)}: an end-to-end run resumes with its own settings")
        config = run_config
        train_files, dev = resumed_run_files(saved, train, dev)
    else:
        if train is None:
            raise DgnUserError("--train: required")
        train_files = train_file_list(train, dev)
    head = "dgn" if head is None else head
    if head not in HEADS:
        raise DgnUserError(f"head must be {' or '.join(map(repr, HEADS))}, got {head!r}")
    if facility == "default":
        facility = default_facility(head)
    _check_facility(facility, head)
    if init is not None and init not in INITS:
        raise DgnUserError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if init is not None and init != "cosine" and head != "dgn":
        raise DgnUserError(f"init {init!r}: how the DGN head starts; the listwise head has no such setting")
    init = init or default_init(head)
    resolve_model_path(encoder_model)
    cfg = config or FinetuneConfig()
    check_global_batch(cfg.claims_per_step, world, "--claims-per-step")
    check_save_every(save_every)
    train_problems = list(join_problem_files(train_files))
    dev_problems = None if dev is None else list(read_problems(dev))
    if dev_problems is not None and not any(any(p.gold) for p in dev_problems):
        raise DgnUserError(f"--dev {dev}: no problem has gold evidence; cannot select epochs")
    out = model_directory(output)
    train = one_train_file(train_files, out, progress, problems=train_problems, write=main)
    torch.manual_seed(cfg.seed)
    model = EndToEndModel(load_sentence_model(encoder_model), head, lexical=bool(lexical), init=init,
                             facility=None if facility is None else float(facility)).to(where)
    bottom_modules(model, cfg.freeze_layers)  # a count beyond the transformer's fails before training
    if progress:
        verb = "resuming" if saved is not None else "fine-tuning"
        print(f"{verb} the sentence encoder under the {head} head ({model.num_parameters():,} parameters) "
              f"on {len(train_problems)} problems"
              + (f", {world} processes" if world > 1 else "") + (f", on {where}" if where.type != "cpu" else ""),
              flush=True)
    inputs = {
        "train": str(Path(train).resolve()),
        "dev": None if dev is None else str(Path(dev).resolve()),
        "encoder_model": None if encoder_model is None else str(encoder_model),
        "features": ["sentence", "lexical"] if lexical else ["sentence"],
        "facility": facility,
        "init": init,
        "finetune_config": asdict(cfg),
        "world_size": world,
    }
    files = {"train_sha256": file_sha256(train), "dev_sha256": None if dev is None else file_sha256(dev)} if main else {}

    def save(m: EndToEndModel, epoch: int, metrics: dict[str, float]) -> None:
        m.save_pretrained(out, extra={**inputs, "epoch": epoch, "dev_metrics": metrics})

    result = finetune(
        model, train_problems, dev_problems, cfg, on_best=save, on_step=on_step, progress=progress,
        state_path=out / STATE_NAME, resume=saved is not None, save_every=save_every, extra_state={**inputs, **files},
    )
    if result.choices and main:
        # the best epoch was saved before the choice: save it again with the scale chosen
        save(model, result.best_epoch, result.best_metrics)
    write_history(out, result, train_config=cfg, **inputs, model_type=END_TO_END_KIND, device=str(where))
    return result
