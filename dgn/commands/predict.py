"""``dgn predict``: rank each problem's candidates with a trained DGN (hard greedy)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgn.errors import DgnUserError

if TYPE_CHECKING:
    from dgn.data import Prediction
    from dgn.model import DGN
    from dgn.pipeline import SelectionDataset

__all__ = ["register", "predict_dataset", "COMPILE_MIN_PROBLEMS"]

#: ``--compile auto`` turns the compiled greedy kernel on from this many problems: below
#: it, compiling (several seconds) costs more than the kernel saves (about 43 ms per
#: 1,024 problems of 40 candidates; benchmarks/inference_speed.py).
COMPILE_MIN_PROBLEMS = 200_000


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    p = sub.add_parser(
        "predict",
        help="write a trained model's picks for every problem (predictions JSONL)",
        description=(
            "Run the trained DGN's exact hard greedy on every problem and write predictions "
            'JSONL {"id", "ranking", "scores"}; scores are the marginal gains of the picks. '
            "Features are built with the settings recorded in the checkpoint."
        ),
    )
    p.add_argument("--model", required=True, help="model directory written by `dgn train`")
    p.add_argument("--data", required=True, help="problems (selection JSONL)")
    p.add_argument("--k", type=types["positive_int"], default=None, help="picks per problem (default: the model's K)")
    p.add_argument("--output", required=True, help="predictions JSONL to write (.gz: gzip)")
    p.add_argument("--vectors", default=None, help="word vectors (default: the file recorded in the checkpoint)")
    p.add_argument("--cache-dir", default=None, help="feature cache (default: $DGN_CACHE_DIR, else ~/.cache/dgn)")
    p.add_argument("--batch-size", type=types["positive_int"], default=64, help="problems per batch")
    from dgn.commands._common import add_candidate_stage_options

    add_candidate_stage_options(
        p, types,
        "cut each problem to its L best candidates by the candidate stage first "
        "(default: the stage the model was trained with, if any)",
    )
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                   help="DGN only: hard greedy with the compiled SCMM kernel (same picks up to rounding ties, "
                   "about 6x faster per batch, but the first batch compiles it for seconds and it needs a "
                   f"C++ compiler); auto: on for at least {COMPILE_MIN_PROBLEMS:,} problems (default: auto)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_predict)


def predict_dataset(
    model: DGN, data: SelectionDataset, k: int, batch_size: int = 64
) -> Iterator[Prediction]:
    """Stream one :class:`~dgn.data.Prediction` per problem: the first ``k`` greedy picks
    of :func:`dgn.train.rank` with their marginal gains as scores (for an encoder scorer:
    its ``k`` best candidates with their logits)."""
    import torch

    from dgn.data import Prediction
    from dgn.model import DGN

    if not isinstance(model, DGN):
        yield from _scorer_predictions(model, data, k, batch_size)
        return

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in data.batches(batch_size):
                out = _forward(model, batch, k)
                for i, picks, gains, valid in zip(
                    batch.index.tolist(), out.indices.tolist(), out.gains.tolist(), out.valid.tolist(),
                    strict=True,
                ):
                    keep = [j for j, ok in enumerate(valid) if ok and picks[j] >= 0]
                    yield Prediction(
                        data.infos[i].id, [picks[j] for j in keep], [float(gains[j]) for j in keep]
                    )
    finally:
        model.train(was_training)


def _forward(model: DGN, batch: Any, k: int) -> Any:
    """The DGN's picks for one batch; a compiled kernel that cannot be built is a clear error."""
    try:
        return model(batch.features, batch.mask, steps=k)
    except DgnUserError:
        raise
    except Exception as error:
        if not model.greedy.compile:
            raise
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DgnUserError(
            f"--compile: the compiled greedy kernel could not be built ({type(error).__name__}: {first}); "
            "use --compile off"
        ) from None


def _scorer_predictions(model: Any, data: SelectionDataset, k: int, batch_size: int) -> Iterator[Prediction]:
    import torch

    from dgn.data import Prediction

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in data.batches(batch_size):
                logits = model(batch.features, batch.mask).logits
                order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :k]
                for i, row, scores in zip(batch.index.tolist(), order.tolist(), logits.tolist(), strict=True):
                    n = data.infos[i].num_candidates
                    picks = [j for j in row if j < n]
                    yield Prediction(data.infos[i].id, picks, [float(scores[j]) for j in picks])
    finally:
        model.train(was_training)


def _predict(args: argparse.Namespace) -> int:
    from dgn.commands._common import (
        load_featurizer,
        load_model,
        require_dir,
        require_file,
        require_output_dir,
        require_output_file,
        validate_problems,
    )
    from dgn.data import write_predictions

    # Everything that can be checked without torch, the model or the vectors, first.
    require_dir(args.model, "--model", "model directory")
    require_output_file(args.output, "--output")
    require_output_dir(args.cache_dir, "--cache-dir")
    if args.vectors is not None:
        require_file(args.vectors, "--vectors")
    validate_problems(args.data, "--data")

    from dgn.sentence.finetune import is_end_to_end_model

    if is_end_to_end_model(args.model):
        for option, value in (("--top-l", args.top_l), ("--rankers", args.rankers), ("--fusion", args.fusion)):
            if value is not None:
                raise DgnUserError(f"{option}: an end-to-end model applies the cut it was trained with")
        return _predict_end_to_end(args)

    import tempfile

    from dgn.pipeline import SelectionDataset

    model = load_model(args.model)
    stage = _predict_stage(args, model)
    featurizer = load_featurizer(
        model, args.model, vectors=args.vectors, cache_dir=args.cache_dir, progress=not args.quiet
    )
    k = args.k if args.k is not None else getattr(getattr(model, "config", None), "steps", 7)
    with tempfile.TemporaryDirectory(prefix="dgn-candidates-") as tmp:
        data_path, kept = args.data, None
        if stage is not None:
            if not args.quiet:
                print(f"candidate stage: {stage.describe()}", flush=True)
            data_path = str(Path(tmp) / "candidates.jsonl")
            kept = stage.cut_file(args.data, data_path, progress=not args.quiet)
        data = SelectionDataset(data_path, featurizer)
        if hasattr(model, "greedy"):
            model.greedy.compile = args.compile == "on" or (
                args.compile == "auto" and len(data) >= COMPILE_MIN_PROBLEMS)
        predictions = predict_dataset(model, data, k, args.batch_size)
        if kept is not None:
            predictions = _restore_indices(predictions, [info.id for info in data.infos], kept)
        n = write_predictions(args.output, predictions)
    print(f"{args.output}: {n} predictions (k = {k})")
    return 0


def _predict_stage(args: argparse.Namespace, model: Any) -> Any:
    """The candidate stage from the options, else the one recorded in the model, else None."""
    from dgn.commands._common import candidate_stage_from_options
    from dgn.fusion.candidates import CandidateStage

    extra = getattr(model, "extra", None) or {}
    stage = candidate_stage_from_options(args, (extra.get("featurizer") or {}).get("encoder_model"))
    if stage is None and extra.get("candidate_stage") is not None:
        stage = CandidateStage.from_settings(extra["candidate_stage"])
    return stage


def _restore_indices(predictions: Iterator[Prediction], ids: list[str], kept: list[list[int]]) -> Iterator[Prediction]:
    """Map picks on cut problems back to the original candidate indices."""
    from dgn.data import Prediction

    by_id = dict(zip(ids, kept, strict=True))
    for pred in predictions:
        index = by_id[pred.id]
        yield Prediction(pred.id, [index[i] for i in pred.ranking], pred.scores)


def _predict_end_to_end(args: argparse.Namespace) -> int:
    """Predictions of a model written by ``dgn train --finetune-encoder`` (no feature cache: the encoder runs)."""
    from dgn.data import Prediction, read_problems, write_predictions
    from dgn.sentence import EndToEndSelector, rank_problems

    model = EndToEndSelector.from_pretrained(args.model)
    k = args.k if args.k is not None else (model.dgn.config.steps if model.dgn is not None else 7)
    top_l = (model.extra.get("finetune_config") or {}).get("top_l")
    problems = list(read_problems(args.data))
    rankings = rank_problems(model, problems, k, batch_size=args.batch_size, top_l=top_l, progress=not args.quiet)
    n = write_predictions(args.output, (Prediction(p.id, r) for p, r in zip(problems, rankings, strict=True)))
    print(f"{args.output}: {n} predictions (k = {k})")
    return 0
