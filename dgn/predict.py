"""Predictions from a trained model: each problem's picks (hard greedy for a DGN, the best
candidates for an encoder scorer) written as predictions JSONL, as ``dgn predict`` runs it.

* :func:`predict_file`: a saved model directory and a selection file in, predictions out;
  the features built as the checkpoint records, the candidate stage applied (the one given,
  else the one the model was trained with) and the picks mapped back to the original
  candidate indices. Models trained end to end (:mod:`dgn.sentence`) run their encoder.
* :func:`predict_dataset`: a loaded model over a :class:`~dgn.pipeline.SelectionDataset`,
  streamed one :class:`~dgn.data.Prediction` per problem.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgn._choices import COMPILE_MODES, one_of
from dgn.errors import DgnUserError

if TYPE_CHECKING:
    from dgn.data import Prediction
    from dgn.model import DGN
    from dgn.pipeline import SelectionDataset

__all__ = ["predict_file", "predict_dataset", "COMPILE_MIN_PROBLEMS"]

#: ``compile="auto"`` turns the compiled greedy kernel on from this many problems: below
#: it, compiling (several seconds) costs more than the kernel saves (about 43 ms per
#: 1,024 problems of 40 candidates; benchmarks/inference_speed.py).
COMPILE_MIN_PROBLEMS = 200_000


def predict_file(
    model_dir: str | os.PathLike[str],
    data: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    k: int | None = None,
    batch_size: int = 64,
    compile: str = "auto",
    top_l: int | None = None,
    rankers: str | Sequence[str] | None = None,
    fusion: str | None = None,
    vectors: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    progress: bool = True,
) -> tuple[int, int]:
    """Write a saved model's predictions for every problem of ``data``; what ``dgn predict`` runs.

    Args:
        model_dir: A directory written by ``dgn train`` (or :func:`dgn.train.train_from_files`,
            or :func:`dgn.sentence.train_end_to_end`).
        data: Problems (selection JSONL).
        output: Predictions JSONL to write (``.gz``: gzip), written whole or not at all.
        k: Picks per problem (default: the DGN's K, else 7).
        batch_size: Problems per batch.
        compile: ``"on"``, ``"off"`` or ``"auto"`` (on from :data:`COMPILE_MIN_PROBLEMS`
            problems): hard greedy through the compiled SCMM kernel, the same picks up to
            rounding ties. DGN only.
        top_l, rankers, fusion: A candidate stage (:class:`~dgn.fusion.candidates.CandidateStage`)
            that cuts each problem to its ``top_l`` best candidates first; None: the stage
            the model was trained with, if any. An end-to-end model always applies its own.
        vectors: The word vectors, where they are no longer at the recorded path.
        cache_dir: The feature cache (default :func:`dgn.pipeline.default_cache_dir`).
        device: Where the model runs: ``"cpu"`` (default) or ``"cuda"`` (``"cuda:N"``);
            features are built on the CPU and each batch moved there (an end-to-end
            model's encoder runs there too).
        progress: Print what is done and show progress bars.

    Returns:
        The number of predictions written and the ``k`` used.

    Raises:
        DgnUserError: A bad argument or an output directory that does not exist (checked
            first), as :func:`dgn.model.load_model` and
            :func:`dgn.pipeline.featurizer_for_model`, a bad candidate-stage setting, or a
            compiled kernel that cannot be built.
        DataError: A malformed problem in ``data`` (file, line and field).
    """
    from dgn._paths import require_output_file
    from dgn.checkpoint import is_end_to_end_model
    from dgn.data import write_predictions

    for name, value in (("k", k), ("batch_size", batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DgnUserError(f"{name} must be a positive integer, got {value!r}")
    if compile not in COMPILE_MODES:
        raise DgnUserError(f"compile must be {one_of(COMPILE_MODES)}, got {compile!r}")
    require_output_file(output, "--output")
    from dgn.distributed import resolve_device

    where = resolve_device(device)
    if is_end_to_end_model(model_dir):
        for option, value in (("--top-l", top_l), ("--rankers", rankers), ("--fusion", fusion)):
            if value is not None:
                raise DgnUserError(f"{option}: an end-to-end model applies the cut it was trained with")
        return _predict_end_to_end(model_dir, data, output, k=k, batch_size=batch_size, device=where,
                                   progress=progress)
    import tempfile

    from dgn.pipeline import SelectionDataset
    from dgn.selector import FrozenFeatureSelector

    # The model, its featurizer and candidate stage, loaded as dgn.load loads them.
    selector = FrozenFeatureSelector.from_pretrained(
        model_dir, where, top_l=top_l, rankers=rankers, fusion=fusion, vectors=vectors, cache_dir=cache_dir,
        progress=progress,
    )
    model, featurizer, stage = selector.model, selector.featurizer, selector.stage
    if k is None:
        k = selector.k
    with tempfile.TemporaryDirectory(prefix="dgn-candidates-") as tmp:
        data_path, kept = str(data), None
        if stage is not None:
            if progress:
                print(f"candidate stage: {stage.describe()}", flush=True)
            data_path = str(Path(tmp) / "candidates.jsonl")
            kept = stage.cut_file(data, data_path, progress=progress)
        dataset = SelectionDataset(data_path, featurizer)
        if hasattr(model, "greedy"):
            model.greedy.compile = compile == "on" or (compile == "auto" and len(dataset) >= COMPILE_MIN_PROBLEMS)
        predictions = predict_dataset(model, dataset, k, batch_size)
        if kept is not None:
            predictions = _restore_indices(predictions, [info.id for info in dataset.infos], kept)
        n = write_predictions(output, predictions)
    return n, k


def predict_dataset(
    model: DGN, data: SelectionDataset, k: int, batch_size: int = 64
) -> Iterator[Prediction]:
    """Stream one :class:`~dgn.data.Prediction` per problem: the first ``k`` greedy picks
    of :func:`dgn.ranking.rank` with their marginal gains as scores (for an encoder scorer:
    its ``k`` best candidates with their logits), from :func:`dgn.ranking.ranked`."""
    from dgn.data import Prediction
    from dgn.ranking import ranked

    for i, picks, scores in ranked(model, data, k, batch_size, forward=_forward):
        yield Prediction(data.infos[i].id, picks, scores)


def _forward(model: DGN, features: Any, mask: Any, k: int) -> Any:
    """The DGN's picks for one batch; a compiled kernel that cannot be built is a clear error."""
    try:
        return model(features, mask, steps=k)
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


def _restore_indices(predictions: Iterator[Prediction], ids: list[str], kept: list[list[int]]) -> Iterator[Prediction]:
    """Map picks on cut problems back to the original candidate indices."""
    from dgn.data import Prediction

    by_id = dict(zip(ids, kept, strict=True))
    for pred in predictions:
        index = by_id[pred.id]
        yield Prediction(pred.id, [index[i] for i in pred.ranking], pred.scores)


def _predict_end_to_end(
    model_dir: str | os.PathLike[str], data: str | os.PathLike[str], output: str | os.PathLike[str], *,
    k: int | None, batch_size: int, device: Any, progress: bool,
) -> tuple[int, int]:
    """Predictions of a model trained end to end (no feature cache: the encoder runs, on ``device``)."""
    from dgn.data import Prediction, read_problems, write_predictions
    from dgn.selector import EndToEndModelSelector
    from dgn.sentence import ranked_problems

    selector = EndToEndModelSelector.from_pretrained(model_dir, device)  # as dgn.load loads it
    if k is None:
        k = selector.k
    problems = list(read_problems(data))
    ranked = ranked_problems(selector.model, problems, k, batch_size=batch_size, top_l=selector.top_l,
                             progress=progress)
    predictions = (Prediction(p.id, picks, scores) for p, (picks, scores) in zip(problems, ranked, strict=True))
    return write_predictions(output, predictions), k
