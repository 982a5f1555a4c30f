"""Evidence selection from Python on raw text, with any model ``dgn train`` writes.

:func:`load` (:meth:`Selector.from_pretrained`) reads every kind of model directory and
returns a :class:`Selector`; :meth:`Selector.select` picks sentences for a claim from its
candidate texts and :meth:`Selector.select_batch` for many claims at once. The picks are
the ones ``dgn predict`` (:func:`dgn.predict.predict_file`) writes for the same problem,
as indices into the candidates given:

* :class:`EndToEndModelSelector`: a model trained end to end (``dgn train``'s default,
  :class:`dgn.sentence.EndToEndModel`), its fine-tuned sentence encoder under the DGN
  head (exact hard greedy on the learned objective) or the listwise head (top k by score),
  each problem first cut to the ``top_l`` BM25-best candidates it was trained with
  (:func:`dgn.sentence.cut_candidates`).
* :class:`FrozenFeatureSelector`: a DGN or an encoder scorer trained on frozen features
  (``dgn train --features ...``), the features built by the featurizer the checkpoint
  records (:func:`dgn.pipeline.featurizer_for_model`) after the candidate stage it was
  trained with, if any (:class:`dgn.fusion.candidates.CandidateStage`).

A selector only predicts: the model stays in ``eval()`` mode and runs without gradients.

Example:
    >>> import dgn                                                           # doctest: +SKIP
    >>> selector = dgn.load("runs/fm2-e2e")                                  # doctest: +SKIP
    >>> print(selector.select("claim", ["sentence 1", "sentence 2"], k=1))   # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgn.errors import DgnUserError

if TYPE_CHECKING:
    import torch

    from dgn.fusion.candidates import CandidateStage
    from dgn.pipeline import Featurizer
    from dgn.sentence.finetune import EndToEndModel

__all__ = ["load", "select", "Selector", "TextSelection", "EndToEndModelSelector", "FrozenFeatureSelector", "GAIN_TYPES"]

#: What :attr:`TextSelection.gains` hold: a DGN head's marginal gains, a ranker head's scores.
GAIN_TYPES = ("gain", "score")
#: Picks per claim of a model without greedy steps of its own (``dgn predict``'s default too).
DEFAULT_K = 7


@dataclass(frozen=True)
class TextSelection:
    """The sentences a :class:`Selector` picked for one claim, in pick order.

    Attributes:
        query: The claim.
        indices: The picks, as indices into the candidates given, in pick order.
        gains: One value per pick. With a DGN head (``gain_type == "gain"``), the pick's
            marginal gain ``f(S + v) - f(S)`` under the learned objective, given the picks
            before it (Powers et al., 2018): what exact hard greedy maximised at that step.
            With a ranker head (an encoder scorer, the listwise head; ``"score"``), the
            pick's score (a logit), in decreasing order.
        sentences: The picked candidate texts, ``candidates[i]`` for each ``i`` in ``indices``.
        gain_type: ``"gain"`` or ``"score"``, what ``gains`` hold.

    Example:
        >>> sel = TextSelection("Paris is in France.", [1, 0], [1.25, 0.5],
        ...                     ["Paris is the capital of France.", "Lyon is a French city."])
        >>> print(sel)
        pick  candidate    gain  sentence
           1          1  1.2500  Paris is the capital of France.
           2          0  0.5000  Lyon is a French city.
        >>> print(sel.table(width=44))
        pick  candidate    gain  sentence
           1          1  1.2500  Paris is the cap...
           2          0  0.5000  Lyon is a French...
    """

    query: str
    indices: list[int]
    gains: list[float]
    sentences: list[str]
    gain_type: str = "gain"

    def __len__(self) -> int:
        return len(self.indices)

    def table(self, width: int = 100) -> str:
        """The picks as a text table, one line each: pick number, candidate index, gain
        (or score), and the sentence shortened to fit ``width`` characters a line."""
        from dgn.explain import _shorten as shorten

        values = [f"{g:.4f}" for g in self.gains]
        value_w = max([len(self.gain_type), *map(len, values)])
        index_w = max([len("candidate"), *(len(str(i)) for i in self.indices)])
        lines = [f"pick  {'candidate':>{index_w}}  {self.gain_type:>{value_w}}  sentence"]
        room = max(10, width - (4 + 2 + index_w + 2 + value_w + 2))
        for n, (i, v, s) in enumerate(zip(self.indices, values, self.sentences, strict=True), 1):
            lines.append(f"{n:>4}  {i:>{index_w}}  {v:>{value_w}}  {shorten(s, room)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"query": self.query, "indices": list(self.indices), "gains": list(self.gains),
                "sentences": list(self.sentences), "gain_type": self.gain_type}


class Selector(ABC):
    """Picks evidence sentences for claims from raw text with a trained model.

    Load one with :func:`dgn.load` (or ``Selector.from_pretrained``), which reads every
    kind of model directory; the subclasses hold each kind's model and know how to feed it.

    Attributes:
        model: The loaded model (an ``nn.Module`` in ``eval()`` mode).
        k: The number of picks when :meth:`select` is not given ``k``: the DGN's ``K``,
            else 7 (``dgn predict``'s default).
        gain_type: What a :class:`TextSelection`'s ``gains`` hold: ``"gain"`` (a DGN head)
            or ``"score"`` (a ranker head).
        path: The model directory it was loaded from (None for a model given directly).
    """

    def __init__(self, model: Any, *, k: int, gain_type: str, path: str | os.PathLike[str] | None = None) -> None:
        if gain_type not in GAIN_TYPES:
            raise ValueError(f"gain_type must be one of {GAIN_TYPES}, got {gain_type!r}")
        self.model = model
        self.k = k
        self.gain_type = gain_type
        self.path = None if path is None else Path(path)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        map_location: str | torch.device = "cpu",
        *,
        vectors: str | os.PathLike[str] | None = None,
    ) -> Selector:
        """Load the model in ``path``, of any kind, as the selector for its kind.

        Args:
            path: A model directory written by ``dgn train`` (end to end, or on frozen
                features), :func:`dgn.sentence.train_end_to_end` or
                :func:`dgn.train.train_from_files`.
            map_location: Where the model runs (``"cpu"``, ``"cuda"``, a device).
            vectors: A frozen-feature model's word vectors, where they are no longer at
                the path its checkpoint records.

        Returns:
            An :class:`EndToEndModelSelector` or a :class:`FrozenFeatureSelector`.

        Raises:
            DgnUserError: ``path`` is not a model directory (one line naming it), a
                checkpoint that cannot be read, or a featurizer that cannot be rebuilt
                (see :func:`dgn.pipeline.featurizer_for_model`).
        """
        from dgn.checkpoint import is_end_to_end_model

        directory = _model_directory(path)
        if is_end_to_end_model(directory):
            return EndToEndModelSelector.from_pretrained(directory, map_location)
        return FrozenFeatureSelector.from_pretrained(directory, map_location, vectors=vectors)

    # ------------------------------------------------------------------ selection
    def select(self, query: str, candidates: Sequence[str], k: int | None = None) -> TextSelection:
        """Pick up to ``k`` of ``candidates`` for ``query``.

        Args:
            query: The claim.
            candidates: The candidate sentences.
            k: The number of picks (default :attr:`k`); a claim with fewer candidates
                gets them all, in the model's order.

        Returns:
            A :class:`TextSelection`, empty where ``candidates`` is.

        Raises:
            ValueError: ``k`` is not a positive integer, ``query`` is not a string or
                ``candidates`` not a list of strings.
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        return self._select([query], [_texts(candidates, "candidates")], _steps(k, self.k), 1)[0]

    def select_batch(
        self,
        queries: Sequence[str],
        candidate_lists: Sequence[Sequence[str]],
        k: int | None = None,
        batch_size: int = 64,
    ) -> list[TextSelection]:
        """:meth:`select` for many claims at once: the same picks, computed in padded batches.

        Args:
            queries: The claims.
            candidate_lists: Each claim's candidate sentences.
            k: The number of picks per claim (default :attr:`k`).
            batch_size: Claims per batch through the model.

        Returns:
            One :class:`TextSelection` per claim, in order.

        Raises:
            ValueError: As :meth:`select`, ``queries`` and ``candidate_lists`` of different
                lengths, or ``batch_size`` not a positive integer.
        """
        qs = _texts(queries, "queries")
        if isinstance(candidate_lists, (str, bytes)) or not isinstance(candidate_lists, Iterable):
            raise ValueError(f"candidate_lists must be a list of lists of strings, got {type(candidate_lists).__name__}")
        lists = [_texts(c, f"candidate_lists[{i}]") for i, c in enumerate(candidate_lists)]
        if len(qs) != len(lists):
            raise ValueError(f"got {len(qs)} queries but {len(lists)} candidate lists")
        steps = _steps(k, self.k)
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        return self._select(qs, lists, steps, int(batch_size))

    def _select(self, queries: list[str], candidate_lists: list[list[str]], k: int, batch_size: int) -> list[TextSelection]:
        todo = [i for i, cands in enumerate(candidate_lists) if cands]
        ranked = self._rank([queries[i] for i in todo], [candidate_lists[i] for i in todo], k, batch_size)
        picks: dict[int, tuple[list[int], list[float]]] = dict(zip(todo, ranked, strict=True))
        out = []
        for i, (query, cands) in enumerate(zip(queries, candidate_lists, strict=True)):
            indices, gains = picks.get(i, ([], []))
            out.append(TextSelection(query, list(indices), list(gains), [cands[j] for j in indices], self.gain_type))
        return out

    @abstractmethod
    def _rank(
        self, queries: list[str], candidate_lists: list[list[str]], k: int, batch_size: int
    ) -> list[tuple[list[int], list[float]]]:
        """The first ``k`` picks (indices into each candidate list as given) and their gains
        or scores, per claim; every candidate list holds at least one text."""

    @abstractmethod
    def describe(self) -> str:
        """One line: the kind of model and its settings."""

    def __repr__(self) -> str:
        where = "" if self.path is None else f"{str(self.path)!r}: "
        return f"<{type(self).__name__} {where}{self.describe()}>"


class EndToEndModelSelector(Selector):
    """A :class:`Selector` over a model trained end to end (:class:`dgn.sentence.EndToEndModel`).

    The claim and its candidates are embedded by the model's fine-tuned encoder and its head
    picks: exact hard greedy on the DGN head's learned objective (``gains``: marginal
    gains), or the listwise head's top ``k`` (``gains``: its scores). Each claim is first
    cut to its :attr:`top_l` BM25-best candidates, as in training and ``dgn predict``;
    the picks are indices into the candidates as given. What runs is
    :func:`dgn.sentence.ranked_problems`, which ``dgn predict`` runs too.

    Args:
        model: The model, e.g. ``EndToEndModel.from_pretrained(path)``.
        path: The directory it came from, if any.

    Attributes:
        top_l: The cut (None: every candidate): the model's own, ``model.top_l``.
    """

    def __init__(self, model: EndToEndModel, *, path: str | os.PathLike[str] | None = None) -> None:
        k = model.dgn.config.steps if model.dgn is not None else DEFAULT_K
        super().__init__(model.eval(), k=k, gain_type="gain" if model.dgn is not None else "score", path=path)
        self.top_l = model.top_l

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        map_location: str | torch.device = "cpu",
        *,
        vectors: str | os.PathLike[str] | None = None,
    ) -> EndToEndModelSelector:
        """Load a model trained end to end (:meth:`dgn.sentence.EndToEndModel.from_pretrained`).

        Raises:
            DgnUserError: As :meth:`Selector.from_pretrained`, a frozen-feature checkpoint,
                or ``vectors`` given (an end-to-end model reads no word vectors).
        """
        from dgn.checkpoint import is_end_to_end_model
        from dgn.sentence.finetune import EndToEndModel

        directory = _model_directory(path)
        if not is_end_to_end_model(directory):
            raise DgnUserError(f"{path}: not a model trained end to end (no selector.json); "
                               "dgn.load(path) reads every kind")
        if vectors is not None:
            raise DgnUserError(f"vectors: the end-to-end model in {path} reads no word vectors")
        return cls(EndToEndModel.from_pretrained(directory, map_location), path=directory)

    def _rank(
        self, queries: list[str], candidate_lists: list[list[str]], k: int, batch_size: int
    ) -> list[tuple[list[int], list[float]]]:
        from dgn.sentence.finetune import ranked_problems

        problems = _problems(queries, candidate_lists)
        return ranked_problems(self.model, problems, k, batch_size=batch_size, top_l=self.top_l, progress=False)

    def describe(self) -> str:
        cut = "every candidate" if self.top_l is None else f"candidates cut to the {self.top_l} BM25-best"
        scale = self.model.diversity_scale
        diversity = f", diversity scale {scale:g}" if scale != 1.0 else ""
        return f"a sentence encoder trained end to end under the {self.model.head} head, k = {self.k}, {cut}{diversity}"


class FrozenFeatureSelector(Selector):
    """A :class:`Selector` over a DGN or an encoder scorer trained on frozen features.

    Each claim is cut by the candidate stage first (if there is one), its features built by
    the featurizer the checkpoint records (:meth:`dgn.pipeline.Featurizer.problem_features`,
    standardised with the training statistics) and the model run on padded batches by
    :func:`dgn.ranking.rank_batch`, which ``dgn predict`` runs too: a DGN's picks are exact
    hard greedy on its learned objective (``gains``: marginal gains), an encoder scorer's
    its top ``k`` by logit (``gains``: the logits). Picks are indices into the candidates
    as given.

    Args:
        model: A :class:`~dgn.model.DGN` or :class:`~dgn.baselines.EncoderScorer`.
        featurizer: The featurizer it was trained with.
        stage: A candidate stage to cut each claim's candidates first, or None.
        path: The directory it came from, if any.
    """

    def __init__(
        self,
        model: Any,
        featurizer: Featurizer,
        stage: CandidateStage | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        from dgn.model import DGN

        is_dgn = isinstance(model, DGN)
        super().__init__(model.eval(), k=model.config.steps if is_dgn else DEFAULT_K,
                         gain_type="gain" if is_dgn else "score", path=path)
        self.featurizer = featurizer
        self.stage = stage

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        map_location: str | torch.device = "cpu",
        *,
        vectors: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        top_l: int | None = None,
        rankers: str | Sequence[str] | None = None,
        fusion: str | None = None,
        progress: bool = False,
    ) -> FrozenFeatureSelector:
        """Load a frozen-feature checkpoint with its featurizer and candidate stage.

        Args:
            path: The model directory.
            map_location: Where the model runs.
            vectors: The word vectors, where they are no longer at the recorded path.
            cache_dir: The featurizer's feature cache (for whole files; see
                :func:`dgn.predict.predict_file`).
            top_l, rankers, fusion: A candidate stage to use instead of the one the
                model was trained with (:func:`dgn.fusion.candidates.stage_from_options`).
            progress: Let the featurizer show progress bars.

        Raises:
            DgnUserError: As :func:`dgn.model.load_model` and
                :func:`dgn.pipeline.featurizer_for_model`, a bad candidate-stage setting,
                or a model trained end to end.
        """
        from dgn.fusion.candidates import CandidateStage, stage_from_options
        from dgn.model import load_model
        from dgn.pipeline import featurizer_for_model

        directory = _model_directory(path)
        model = load_model(directory, map_location)  # in eval mode; a model trained end to end is an error
        extra = getattr(model, "extra", None) or {}
        stage = stage_from_options(top_l, rankers, fusion, (extra.get("featurizer") or {}).get("encoder_model"))
        if stage is None and extra.get("candidate_stage") is not None:
            stage = CandidateStage.from_settings(extra["candidate_stage"])
        featurizer = featurizer_for_model(model, directory, vectors=vectors, cache_dir=cache_dir, progress=progress)
        return cls(model, featurizer, stage, path=directory)

    def _rank(
        self, queries: list[str], candidate_lists: list[list[str]], k: int, batch_size: int
    ) -> list[tuple[list[int], list[float]]]:
        from dgn.pipeline import pad_features
        from dgn.ranking import rank_batch

        out: list[tuple[list[int], list[float]]] = []
        problems = _problems(queries, candidate_lists)
        for start in range(0, len(problems), batch_size):
            feats, kept = [], []
            for problem in problems[start : start + batch_size]:
                if self.stage is not None:
                    problem, keep = self.stage.cut(problem)
                else:
                    keep = list(range(len(problem.candidates)))
                raw = self.featurizer.problem_features(problem.query, problem.candidates)
                feats.append(self.featurizer.transform(raw))
                kept.append(keep)
            features, mask = pad_features(feats, self.featurizer.dim)
            for (picks, scores), keep in zip(rank_batch(self.model, features, mask, k), kept, strict=True):
                out.append(([keep[i] for i in picks], scores))
        return out

    def describe(self) -> str:
        from dgn.model import DGN

        what = "a DGN" if isinstance(self.model, DGN) else "an encoder scorer"
        stage = "" if self.stage is None else f", candidate stage {self.stage.describe()}"
        return f"{what} on frozen features ({self.featurizer.describe()}), k = {self.k}{stage}"


def load(
    path: str | os.PathLike[str],
    map_location: str | torch.device = "cpu",
    *,
    vectors: str | os.PathLike[str] | None = None,
) -> Selector:
    """Load any model ``dgn train`` writes as a :class:`Selector`: ``Selector.from_pretrained``.

    Args:
        path: The model directory (trained end to end, or on frozen features).
        map_location: Where the model runs (``"cpu"``, ``"cuda"``, a device).
        vectors: A frozen-feature model's word vectors, where they have moved.

    Returns:
        The selector; ``selector.select(claim, sentences, k=3)`` picks.

    Raises:
        DgnUserError: ``path`` is not a model directory, or a model that cannot be loaded
            (one line naming the file).
    """
    return Selector.from_pretrained(path, map_location, vectors=vectors)


#: Models :func:`select` loaded, by directory and its modification time (the last few).
_LOADED: dict[tuple[str, int], Selector] = {}
_LOADED_MAX = 4


def select(
    model: Selector | str | os.PathLike[str],
    query: str,
    candidates: Sequence[str],
    k: int | None = None,
) -> TextSelection:
    """Pick evidence in one call: ``load(model).select(query, candidates, k)``.

    Args:
        model: A :class:`Selector`, or a model directory ``dgn train`` wrote. A directory
            is loaded once (on the CPU) and kept while it is unchanged (its modification
            time is part of the key: a model written again to the same directory is
            loaded again); the last four are kept.
        query: The claim.
        candidates: The candidate sentences.
        k: The number of picks (default: the model's own, :attr:`Selector.k`).

    Returns:
        A :class:`TextSelection`, as :meth:`Selector.select` returns it.

    Raises:
        DgnUserError: ``model`` is not a model directory or cannot be loaded.
        ValueError: A bad ``k``.
    """
    if not isinstance(model, Selector):
        directory = _model_directory(model).resolve()
        key = (str(directory), directory.stat().st_mtime_ns)
        if key not in _LOADED:
            while len(_LOADED) >= _LOADED_MAX:
                _LOADED.pop(next(iter(_LOADED)))
            _LOADED[key] = load(directory)
        model = _LOADED[key]
    return model.select(query, candidates, k)


def _model_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory that exists, else a one-line user error naming it."""
    if not isinstance(path, (str, os.PathLike)):
        raise DgnUserError(f"a model path must be a string or a path, got {type(path).__name__}")
    directory = Path(path)
    if not directory.exists():
        raise DgnUserError(f"{path}: model directory not found")
    if not directory.is_dir():
        raise DgnUserError(f"{path}: not a model directory (dgn train writes a directory)")
    return directory


def _steps(k: Any, default: int) -> int:
    if k is None:
        return default
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
        raise ValueError(f"k must be a positive integer or None, got {k!r}")
    return int(k)


def _texts(texts: Any, name: str) -> list[str]:
    """``texts`` as a list of strings, else a ValueError naming ``name`` and what was given."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise ValueError(f"{name} must be a list of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(text).__name__}")
    return out


def _problems(queries: list[str], candidate_lists: list[list[str]]) -> list[Any]:
    """Problems (no gold) to give the ranking functions, which take :class:`dgn.data.Problem`."""
    from dgn.data import Problem

    return [Problem(str(i), q, cands, []) for i, (q, cands) in enumerate(zip(queries, candidate_lists, strict=True))]
