"""Explain a trained DGN's picks for one problem, step by step.

At test time the DGN runs exact hard greedy on its learned objective (Powers et al.,
2018): at step ``k`` it picks the candidate with the largest marginal gain
``f(S + v) - f(S)``. :func:`explain_problem` records, for every step, the pick, its gain,
``f(S)`` so far and the best runners-up with their gains, plus the gains of every
candidate at every step; :func:`format_explanation` prints it and
:func:`plot_explanation` draws the gains as a heatmap (steps x candidates).

Example:
    >>> from dgn.explain import explain_problem, format_explanation  # doctest: +SKIP
    >>> expl = explain_problem(model, featurizer, problem)           # doctest: +SKIP
    >>> print(format_explanation(expl))                              # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgn.errors import DgnUserError

if TYPE_CHECKING:
    from dgn.data import Problem
    from dgn.model import DGN
    from dgn.pipeline import Featurizer

__all__ = [
    "Candidate", "Step", "Explanation", "explain_problem", "load_explainable", "format_explanation",
    "plot_explanation",
]


@dataclass(frozen=True)
class Candidate:
    """A candidate at one greedy step.

    Attributes:
        index: Its index in the problem's ``candidates``.
        gain: Its marginal gain at that step under the learned objective.
        gold: Whether it belongs to any gold set.
        modular: The part of ``gain`` that is the model's learned modular bonus
            ``beta_v`` (None for a model without one); the rest is SCMM coverage gain.
    """

    index: int
    gain: float
    gold: bool
    modular: float | None = None


@dataclass(frozen=True)
class Step:
    """One greedy step.

    Attributes:
        step: 1-based step number.
        pick: The candidate picked (largest gain; ties go to the lowest index).
        value: ``f(S)`` after adding the pick (the sum of the gains so far; with a
            learned modular term it can decrease, as ``beta_v`` may be negative).
        runners_up: The next best candidates at this step, best first.
    """

    step: int
    pick: Candidate
    value: float
    runners_up: list[Candidate] = field(default_factory=list)


@dataclass
class Explanation:
    """The greedy trace of a DGN on one problem.

    Attributes:
        id: The problem id.
        query: The claim text.
        candidates: The candidate texts.
        gold: The problem's alternative gold sets.
        steps: One :class:`Step` per pick (fewer than asked if candidates ran out).
        step_gains: ``K x N`` gains of every candidate at every step; ``None`` where the
            candidate was already picked (greedy's ``-inf``).
    """

    id: str
    query: str
    candidates: list[str]
    gold: list[list[int]]
    steps: list[Step]
    step_gains: list[list[float | None]]

    @property
    def gold_union(self) -> set[int]:
        """Indices in any gold set."""
        return {i for g in self.gold for i in g}

    @property
    def ranking(self) -> list[int]:
        """The picks in order."""
        return [s.pick.index for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``None`` in ``step_gains`` for candidates already picked)."""
        return asdict(self)


def explain_problem(
    model: DGN,
    featurizer: Featurizer,
    problem: Problem,
    steps: int | None = None,
    runners_up: int = 3,
) -> Explanation:
    """Run the DGN's test-time greedy on one problem and record every step.

    The features are built exactly as :class:`~dgn.pipeline.Featurizer` builds them for
    training and prediction (its feature blocks, standardised with the featurizer's statistics),
    so the picks are the ones ``dgn predict`` writes.

    Args:
        model: A trained :class:`~dgn.model.DGN` (run in ``eval()`` mode; restored after).
        featurizer: The featurizer the model was trained with
            (:meth:`~dgn.pipeline.Featurizer.from_settings` of ``model.extra["featurizer"]``).
        problem: The problem.
        steps: Number of greedy steps (default: the model's ``K``).
        runners_up: How many runners-up to keep per step (``>= 0``).

    Returns:
        The :class:`Explanation`.

    Raises:
        DgnUserError: ``steps`` is not a positive integer, ``runners_up`` is negative, or
            the featurizer's dimension does not match the model.
    """
    import torch

    k = model.config.steps if steps is None else steps
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise DgnUserError(f"steps must be a positive integer, got {steps!r}")
    if isinstance(runners_up, bool) or not isinstance(runners_up, int) or runners_up < 0:
        raise DgnUserError(f"runners_up must be an integer >= 0, got {runners_up!r}")
    if featurizer.dim != model.config.in_features:
        raise DgnUserError(
            f"the featurizer gives {featurizer.dim}-d features but the model expects "
            f"in_features={model.config.in_features}"
        )
    raw = featurizer.problem_features(problem.query, problem.candidates)
    X = torch.from_numpy(featurizer.transform(raw)).unsqueeze(0)
    mask = torch.ones(X.shape[:2], dtype=torch.bool)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, beta, sel = model.select(X, mask, steps=k, return_step_gains=True)
    finally:
        model.train(was_training)
    assert sel.step_gains is not None, "greedy_select returns step gains when asked"
    indices = sel.indices[0].tolist()
    gains = sel.gains[0].tolist()
    valid = sel.valid[0].tolist()
    table = sel.step_gains[0].double().cpu()
    bonus = None if beta is None else [float(b) for b in beta[0].tolist()]
    union = problem.gold_union
    out_steps: list[Step] = []
    value = 0.0
    step_gains: list[list[float | None]] = []
    for s in range(k):
        if not valid[s]:
            break
        row = table[s]
        step_gains.append([float(g) if math.isfinite(g) else None for g in row.tolist()])
        pick = int(indices[s])
        value += float(gains[s])
        others = [
            (float(g), i) for i, g in enumerate(row.tolist()) if i != pick and math.isfinite(g)
        ]
        others.sort(key=lambda t: (-t[0], t[1]))  # best first; ties: lowest index
        out_steps.append(
            Step(
                step=s + 1,
                pick=Candidate(pick, float(gains[s]), pick in union, _at(bonus, pick)),
                value=value,
                runners_up=[
                    Candidate(i, g, i in union, _at(bonus, i)) for g, i in others[:runners_up]
                ],
            )
        )
    return Explanation(
        id=problem.id,
        query=problem.query,
        candidates=list(problem.candidates),
        gold=[list(g) for g in problem.gold],
        steps=out_steps,
        step_gains=step_gains,
    )


def load_explainable(
    model_dir: str | os.PathLike[str], vectors: str | os.PathLike[str] | None = None
) -> tuple[DGN, Any]:
    """The DGN saved in ``model_dir`` and the featurizer to give :func:`explain_problem`, for
    either kind of checkpoint: one trained on frozen features (its recorded featurizer,
    :func:`dgn.pipeline.featurizer_for_model`) or one trained end to end (the DGN head
    with its fine-tuned encoder's features, :class:`dgn.sentence.EndToEndFeatures`).

    Raises:
        DgnUserError: As :func:`dgn.model.load_model` and
            :func:`dgn.pipeline.featurizer_for_model`, or an encoder scorer's checkpoint
            (only a DGN has a greedy objective to explain).
    """
    from dgn.checkpoint import is_end_to_end_model
    from dgn.model import DGN, load_model

    if is_end_to_end_model(model_dir):
        from dgn.sentence import EndToEndFeatures, EndToEndModel

        selector = EndToEndModel.from_pretrained(model_dir)
        if selector.dgn is None:
            raise DgnUserError(f"--model {model_dir}: trained end to end under a listwise head, not a DGN; "
                               "explain shows a DGN's greedy objective")
        features = EndToEndFeatures(selector)
        return features.explained(), features
    from dgn.pipeline import featurizer_for_model

    model = load_model(model_dir)
    if not isinstance(model, DGN):
        raise DgnUserError(f"--model {model_dir}: an encoder scorer's checkpoint; "
                           "explain shows a DGN's greedy objective")
    return model, featurizer_for_model(model, model_dir, vectors=vectors)


def _at(values: list[float] | None, i: int) -> float | None:
    return None if values is None else values[i]


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def format_explanation(expl: Explanation, width: int = 80) -> str:
    """The explanation as text: one block per greedy step, gold candidates marked ``*``.

    Args:
        expl: From :func:`explain_problem`.
        width: Candidate and query texts are shortened to this many characters.

    Returns:
        Several lines (no trailing newline).
    """
    union = expl.gold_union
    n = len(expl.candidates)
    gold_text = "; ".join("{" + ", ".join(map(str, g)) + "}" for g in expl.gold) or "none"
    lines = [
        f"problem {expl.id}: {n} candidates, gold sets: {gold_text}",
        f"query: {_shorten(expl.query, width)}",
    ]

    def cand(c: Candidate) -> str:
        mark = "*" if c.gold else " "
        parts = ""
        if c.modular is not None:
            parts = f" (coverage {c.gain - c.modular:.4f}, modular {c.modular:+.4f})"
        text = _shorten(expl.candidates[c.index], width)
        return f"{mark}[{c.index}] gain {c.gain:.4f}{parts}  {text}"

    for step in expl.steps:
        lines.append(f"step {step.step}: pick {cand(step.pick)}")
        lines.append(f"        f(S) = {step.value:.4f}")
        for r in step.runners_up:
            lines.append(f"        runner-up {cand(r)}")
    picked = set(expl.ranking)
    found = sorted(picked & union)
    covered = [g for g in expl.gold if set(g) <= picked]
    lines.append(
        f"selected {len(expl.steps)}: {expl.ranking}; gold found {found} of {sorted(union)}; "
        f"complete gold set covered: {'yes' if covered else 'no'}  (* = gold)"
    )
    return "\n".join(lines)


def plot_explanation(expl: Explanation, path: str | os.PathLike[str]) -> Path:
    """Draw every candidate's marginal gain at every step as a heatmap, written atomically.

    Rows are greedy steps, columns candidates; each step's pick is circled, cells of
    candidates already picked are blank, gold candidates' column labels are marked ``*``
    and drawn in red. The format follows the file suffix (``.png``, ``.pdf``, ``.svg``).

    Args:
        expl: From :func:`explain_problem`.
        path: The image file; its directory must exist.

    Returns:
        ``Path(path)``.

    Raises:
        DgnUserError: matplotlib is not installed, or the file cannot be written.
    """
    try:
        import matplotlib
    except ImportError:
        raise DgnUserError("plotting needs matplotlib: pip install 'dgn[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    target = Path(path)
    if not target.parent.is_dir():
        raise DgnUserError(f"cannot write {target}: directory {target.parent} does not exist")
    n = len(expl.candidates)
    k = len(expl.steps)
    grid = np.full((max(k, 1), n), np.nan)
    for s, row in enumerate(expl.step_gains):
        grid[s] = [np.nan if g is None else g for g in row]
    union = expl.gold_union
    fig_w = min(max(6.0, 0.35 * n + 2.0), 40.0)
    fig_h = max(2.5, 0.45 * max(k, 1) + 1.8)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h), constrained_layout=True)
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("white")
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, interpolation="nearest")
    fig.colorbar(image, ax=ax, label="marginal gain")
    for step in expl.steps:
        ax.scatter(
            [step.pick.index], [step.step - 1], s=80, facecolors="none",
            edgecolors="red" if step.pick.gold else "white", linewidths=2,
        )
    ax.set_xticks(range(n))
    labels = [f"{i}*" if i in union else str(i) for i in range(n)]
    ax.set_xticklabels(labels, rotation=90 if n > 30 else 0, fontsize=7 if n > 30 else 9)
    for i, tick in enumerate(ax.get_xticklabels()):
        if i in union:
            tick.set_color("red")
            tick.set_fontweight("bold")
    ax.set_yticks(range(max(k, 1)))
    ax.set_yticklabels([str(s + 1) for s in range(max(k, 1))])
    ax.set_xlabel("candidate (* = gold; circle = pick, red if gold)")
    ax.set_ylabel("greedy step")
    ax.set_title(_shorten(f"{expl.id}: {expl.query}", int(fig_w * 9)), fontsize=9)
    fmt = target.suffix.lstrip(".").lower() or "png"
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        fig.savefig(tmp, dpi=120, format=fmt)
        os.replace(tmp, target)
    except (OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise DgnUserError(f"cannot write {target}: {exc}") from None
    finally:
        plt.close(fig)
    return target

