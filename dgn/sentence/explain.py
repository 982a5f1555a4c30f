"""What :mod:`dgn.explain` needs of a model trained end to end with the DGN head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dgn.errors import DgnUserError
from dgn.sentence.model import EndToEndModel

__all__ = ["EndToEndFeatures"]


class EndToEndFeatures:
    """The DGN head's input features of one problem, as :func:`dgn.explain.explain_problem` asks them.

    Adapts an :class:`EndToEndModel` to the featurizer interface explain uses
    (``dim``, ``problem_features``, ``transform``). With the facility-location term the
    candidates' sentence embeddings follow the head's features (``dim`` grows by the
    embedding size), and :meth:`explained` is the model explain runs.
    """

    def __init__(self, model: EndToEndModel) -> None:
        if model.dgn is None:
            raise DgnUserError("only a model with the DGN head has greedy steps to explain")
        self.model = model
        self.dim = model.dgn.config.in_features + (model.dim if model.facility is not None else 0)

    def explained(self) -> Any:
        """What :func:`dgn.explain.explain_problem` runs: the DGN head itself, or with the
        facility-location term a :class:`_FacilityGreedy` over both."""
        assert self.model.dgn is not None
        return self.model.dgn if self.model.facility is None else _FacilityGreedy(self.model)

    @torch.no_grad()
    def problem_features(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        was_training = self.model.training
        self.model.eval()
        try:
            q, S, mask = self.model.embed_problems([query], [list(candidates)])
            lex = self.model.lexical_for([query], [list(candidates)], mask.shape[1])
            X = self.model.head_features(q, S, mask, lex)
            if self.model.facility is not None:
                X = torch.cat([X, S.to(X.dtype)], dim=-1)
            return X[0].cpu().numpy()
        finally:
            self.model.train(was_training)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)


class _FacilityGreedy:
    """The DGN head with its facility-location term, as :func:`dgn.explain.explain_problem`
    runs a :class:`~dgn.model.DGN`: ``config`` (``in_features`` counts the sentence
    embeddings :class:`EndToEndFeatures` appends), ``training``, ``train``/``eval`` and
    ``select`` (exact hard greedy on the SCMM plus facility location, the picks
    :meth:`EndToEndModel.score` makes in ``eval()`` mode)."""

    def __init__(self, model: EndToEndModel) -> None:
        from dataclasses import replace

        assert model.dgn is not None and model.facility is not None
        self.model = model
        self.config = replace(model.dgn.config, in_features=model.dgn.config.in_features + model.dim)

    @property
    def training(self) -> bool:
        return self.model.training

    def train(self, mode: bool = True) -> _FacilityGreedy:
        self.model.train(mode)
        return self

    def eval(self) -> _FacilityGreedy:
        return self.train(False)

    def select(
        self, features: Any, mask: Any = None, steps: int | None = None, return_step_gains: bool = False
    ) -> tuple[Tensor, Tensor | None, Any]:
        from dgn._validation import as_features
        from dgn.greedy import greedy_select

        assert self.model.dgn is not None and self.model.facility is not None
        X, _ = as_features(features)
        X = X.to(next(self.model.parameters()).dtype)
        n_head = self.model.dgn.config.in_features
        if mask is None:
            mask = torch.ones(X.shape[:2], dtype=torch.bool)
        HS, beta, valid = self.model._facility_inputs(X[..., :n_head], X[..., n_head:], torch.as_tensor(mask))
        K = self.config.steps if steps is None else steps
        sel = greedy_select(HS, K, self.model.facility, valid, modular=beta, return_step_gains=return_step_gains)
        return HS[..., : -self.model.dim], beta, sel
