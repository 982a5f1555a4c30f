"""The Differentiable Greedy Network: encoder, learnable SCMM, K unfolded greedy layers.

Powers, Fakoor, Shakeri, Sethy, Kainth, Mohamed, Sarikaya (2018), "Differentiable Greedy Networks".
In ``train()`` mode the greedy layers use a relaxed argmax (softmax with temperature);
in ``eval()`` mode the model runs exact hard greedy on the learned objective, so the
test-time picks keep the submodular structure and its guarantees.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dgn._validation import as_features, as_mask
from dgn.checkpoint import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    load_weights,
    read_checkpoint,
    write_checkpoint,
)
from dgn.encoder import DeepEncoder, Encoder, _ReluEncoder
from dgn.errors import DgnUserError
from dgn.greedy import RELAXATIONS, Selection, greedy_select
from dgn.layer import GreedyLayer
from dgn.objectives import CONCAVE_FUNCTIONS, SCMM

__all__ = ["DGNConfig", "DGN", "DGNOutput", "CONFIG_NAME", "WEIGHTS_NAME", "MODULAR_ACTIVATIONS", "load_model"]

#: How the modular term's linear score becomes ``beta`` (softplus: nonnegative).
MODULAR_ACTIVATIONS = ("softplus", "identity")



@dataclass(frozen=True)
class DGNConfig:
    """Hyperparameters of a :class:`DGN` (defaults: the settings of the FM2 benchmark).

    Attributes:
        in_features: F, the size of each candidate's input features (300 for fastText).
        hidden_features: Width of the encoder's hidden layer(s).
        encoded_features: E (the paper's F'), the size of the nonnegative encoding.
        steps: K, the number of unfolded greedy layers (the paper: 7).
        tau: Softmax temperature of the relaxed argmax (the paper: (3, 6) best).
        concave: The concave function of the SCMM objective.
        concave_params: Its parameters (``scale``, ``cap`` or ``p``), if any.
        relaxation: ``"straight_through"`` or ``"soft"`` (see :func:`dgn.soft_greedy_select`).
        learn_weights: Learn the SCMM feature weights ``alpha >= 0`` (else all ones).
        deep: Use the three-layer :class:`~dgn.encoder.DeepEncoder`.
        dropout: Dropout inside the encoder during training.
        init_weight: Initial value of the learnable SCMM weights ``alpha``. Small values
            let training grow the coverage term from the data instead of starting from
            the random encoder's coverage, which swamps relevance (on FM2, 0.01 instead of
            1 raised the mean test recall at k = 1, 3, 5, 7 from 0.56 to 0.59).
        modular: Add a learned modular term ``beta_v = softplus(w . H[v] + b)`` to the
            objective (the optional ``sum_{v in A} beta_v`` of the SCMM): per-sentence
            relevance beside the diminishing-returns coverage. Off gives the paper's pure
            SCMM.
        modular_activation: ``"softplus"`` keeps ``beta >= 0``, so every gain is
            nonnegative, f grows with each pick and the learned objective stays monotone
            submodular (greedy's ``1 - 1/e`` guarantee holds for it). ``"identity"`` lets
            ``beta`` go negative (checkpoints written before this field existed): f can
            then fall with each pick and greedy degrades towards a ranking by ``beta``.
        coverage: Keep the SCMM coverage term. False zeroes its weights, leaving the
            modular term alone: greedy is then a ranking by ``beta`` (the "modular only"
            ablation).
        coverage_penalty: Take each item's singleton coverage off its modular term,
            ``beta_v - sum_e alpha_e phi(H[v, e])``, so that a gain is
            ``beta_v - sum_e alpha_e (phi(H[v, e]) - (phi(c_e + H[v, e]) - phi(c_e)))``:
            the first step ranks by ``beta`` alone, and the coverage term only takes away
            from an item what it repeats of the items already picked (never more than its
            own singleton coverage). The objective stays submodular (a modular term plus
            the SCMM); it is monotone only where ``beta_v`` exceeds the item's singleton
            coverage, which is not enforced (greedy picks K items either way).
        modular_skip: The modular term also reads the input features linearly,
            ``beta_v = softplus(w . H[v] + u . X[v] + b)``: a direct path for input
            features that are already relevance scores (cosines, BM25).
    """

    in_features: int = 300
    hidden_features: int = 300
    encoded_features: int = 256
    steps: int = 7
    tau: float = 4.0
    concave: str = "sqrt"
    concave_params: dict[str, float] = field(default_factory=dict)
    relaxation: str = "soft"
    learn_weights: bool = True
    deep: bool = False
    dropout: float = 0.0
    init_weight: float = 0.01
    modular: bool = True
    modular_activation: str = "softplus"
    modular_skip: bool = False
    coverage: bool = True
    coverage_penalty: bool = False

    def __post_init__(self) -> None:
        for name in ("in_features", "hidden_features", "encoded_features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DGNConfig.{name} must be a positive integer, got {value!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps <= 0:
            raise ValueError(f"DGNConfig.steps must be a positive integer, got {self.steps!r}")
        if not isinstance(self.tau, (int, float)) or not math.isfinite(self.tau) or self.tau <= 0:
            raise ValueError(f"DGNConfig.tau must be a finite number > 0, got {self.tau!r}")
        if not isinstance(self.concave, str) or self.concave not in CONCAVE_FUNCTIONS:
            raise ValueError(
                f"DGNConfig.concave must be one of {sorted(CONCAVE_FUNCTIONS)}, got {self.concave!r}"
            )
        if self.relaxation not in RELAXATIONS:
            raise ValueError(f"DGNConfig.relaxation must be one of {RELAXATIONS}, got {self.relaxation!r}")
        if not isinstance(self.init_weight, (int, float)) or not (
            math.isfinite(self.init_weight) and self.init_weight > 0
        ):
            raise ValueError(f"DGNConfig.init_weight must be a positive number, got {self.init_weight!r}")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"DGNConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not (self.coverage or self.modular):
            raise ValueError("DGNConfig: coverage=False needs modular=True (the objective would be zero)")
        if self.coverage_penalty and not self.coverage:
            raise ValueError("DGNConfig: coverage_penalty=True needs coverage=True (there is nothing to take off)")
        if self.modular_activation not in MODULAR_ACTIVATIONS:
            raise ValueError(
                f"DGNConfig.modular_activation must be one of {MODULAR_ACTIVATIONS}, "
                f"got {self.modular_activation!r}"
            )
        if not isinstance(self.concave_params, dict):
            raise ValueError(f"DGNConfig.concave_params must be a dict, got {self.concave_params!r}")
        SCMM(self.concave, **self.concave_params)  # validates the parameters

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> DGNConfig:
        """Build a config from a dict, rejecting unknown or ill-typed fields.

        Raises:
            DgnUserError: An unknown field or a bad value, naming ``source`` and the field.
        """
        if not isinstance(data, dict):
            raise DgnUserError(f"{source}: expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DgnUserError(f"{source}: unknown field(s) {unknown} (known: {sorted(known)})")
        if "modular_activation" not in data:
            # Written before the field existed: the modular term was unconstrained.
            data = {**data, "modular_activation": "identity"}
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise DgnUserError(f"{source}: {exc}") from None


@dataclass
class DGNOutput:
    """What :meth:`DGN.forward` returns.

    Attributes:
        logits: ``(B, K, N)`` layer scores ``gain / tau`` (``-inf`` where a candidate is
            padding or already picked); the loss takes these.
        distributions: ``(B, K, N)`` the softmax of ``logits`` (exactly 0 where ``-inf``).
        indices: ``(B, K)`` picks in order, ``-1`` where nothing was left.
        gains: ``(B, K)`` marginal gain of each pick under the learned objective.
        valid: ``(B, K)`` bool.
        encoded: ``(B, N, E)`` the nonnegative encoder output H.
    """

    logits: Tensor
    distributions: Tensor
    indices: Tensor
    gains: Tensor
    valid: Tensor
    encoded: Tensor

    def ranking(self) -> Tensor:
        """``(B, N)`` one full ranking per problem: the greedy picks in order, then the
        candidates left, by their gain at the last layer; padding last.

        The picks are the DGN's own order (in ``eval()`` mode, exact greedy); the rest is
        ordered by ``logits[:, -1]``, their marginal gains given the first ``K - 1``
        picks. Use ``indices`` when only the first ``K`` matter.
        """
        B, K, N = self.logits.shape
        last = self.logits[:, -1]
        finite = torch.isfinite(last)
        # below every pick's key (1..K): shift the finite gains under 0
        shifted = last - torch.where(finite, last, torch.zeros_like(last)).amax(-1, keepdim=True) - 1.0
        key = torch.cat([torch.where(finite, shifted, torch.full_like(last, float("-inf"))),
                         torch.zeros(B, 1, dtype=last.dtype, device=last.device)], dim=1)
        slot = torch.where(self.indices >= 0, self.indices, torch.full_like(self.indices, N))  # -1 -> a spare column
        order_key = torch.arange(K, 0, -1, device=last.device, dtype=last.dtype).expand(B, K)
        key = key.scatter(1, slot, order_key)[:, :N]
        return torch.sort(key, dim=-1, descending=True, stable=True).indices


class DGN(nn.Module):
    """Differentiable Greedy Network (Powers et al., 2018).

    ``H = encoder(X)`` (nonnegative), ``f = SCMM(concave, alpha)`` with learnable
    ``alpha >= 0``, then a :class:`~dgn.layer.GreedyLayer` (K greedy layers) maximises f
    over the candidates. Training uses the relaxed layers of :func:`dgn.soft_greedy_select`;
    ``eval()`` runs exact :func:`dgn.greedy_select` on the learned H and alpha.

    Args:
        config: The hyperparameters.

    Shape:
        - features: ``(B, N, F)`` (or ``(N, F)``)
        - mask: ``(B, N)`` bool, True for real candidates
        - output: :class:`DGNOutput` with ``(B, K, N)`` logits and ``(B, K)`` picks

    Example:
        >>> model = DGN(DGNConfig(in_features=8, hidden_features=16, encoded_features=4, steps=3))
        >>> out = model.eval()(torch.randn(2, 5, 8))
        >>> out.indices.shape, out.logits.shape
        (torch.Size([2, 3]), torch.Size([2, 3, 5]))
    """

    def __init__(self, config: DGNConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else DGNConfig()
        c = self.config
        encoder_cls = DeepEncoder if c.deep else Encoder
        self.encoder = encoder_cls(c.in_features, c.hidden_features, c.encoded_features, c.dropout)
        if not c.coverage:
            self.objective = SCMM(c.concave, weights=torch.zeros(c.encoded_features), **c.concave_params)
        elif c.learn_weights:
            self.objective = SCMM(
                c.concave,
                learnable=True,
                num_features=c.encoded_features,
                init_weight=c.init_weight,
                **c.concave_params,
            )
        else:
            self.objective = SCMM(c.concave, **c.concave_params)
        # The greedy layer shares self.objective; its parameters are saved under
        # "objective." only (see _drop_shared_keys), so checkpoint keys stay as they were.
        self.greedy = GreedyLayer(self.objective, c.steps, c.tau, c.relaxation)
        self._register_state_dict_hook(_drop_shared_keys)
        self._register_load_state_dict_pre_hook(_alias_shared_keys, with_module=True)
        self.modular = nn.Linear(c.encoded_features, 1) if c.modular else None
        self.modular_skip = nn.Linear(c.in_features, 1, bias=False) if c.modular and c.modular_skip else None
        if self.modular_skip is not None:
            nn.init.zeros_(self.modular_skip.weight)
        # Set by from_pretrained / save_pretrained: settings stored beside the weights
        # (e.g. how features were built), so inference can reproduce them.
        self.extra: dict[str, Any] = {}

    def encode(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """``(B, N, F) -> (B, N, E)`` nonnegative encoding; padding rows are zeroed."""
        if self._own_encoder():
            return self.encoder(features, mask)  # type: ignore[no-any-return]
        H = self.encoder(features)  # an encoder of the user's own
        if mask is not None:
            H = H * mask.unsqueeze(-1).to(H.dtype)
        return H  # type: ignore[no-any-return]

    def modular_scores(self, H: Tensor, features: Tensor | None = None) -> Tensor | None:
        """``(B, N)`` learned per-item bonus ``beta`` (None without a modular term).

        Args:
            H: ``(B, N, E)`` the encoding.
            features: ``(B, N, F)`` the input features (read only with ``modular_skip``).
        """
        if self.modular is None:
            return None
        return self._modular_from(self.modular(H).squeeze(-1), features)

    def _modular_from(self, z: Tensor, features: Tensor | None) -> Tensor:
        """``beta`` from the modular layer's output ``z (B, N)``: the skip term, the activation."""
        if self.modular_skip is not None:
            if features is None:
                raise ValueError("a model with modular_skip needs the input features")
            z = z + self.modular_skip(features).squeeze(-1)
        if self.config.modular_activation == "softplus":
            return torch.nn.functional.softplus(z)
        return z  # type: ignore[no-any-return]

    def select(
        self, features: Any, mask: Any = None, steps: int | None = None, return_step_gains: bool = False
    ) -> tuple[Tensor, Tensor | None, Selection]:
        """Exact hard greedy on the learned objective (what ``eval()`` mode runs).

        Returns:
            ``(H, beta, selection)``: the encoding ``(B, N, E)``, the modular bonus
            ``(B, N)`` or None, and the :class:`~dgn.greedy.Selection`.
        """
        H, beta, valid = self.encode_and_score(features, mask)
        K = self.config.steps if steps is None else steps
        sel = greedy_select(H, K, self.objective, valid, modular=beta, return_step_gains=return_step_gains)
        return H, beta, sel

    def encode_and_score(
        self, features: Any, mask: Any = None, penalty_weight: Tensor | float = 1.0
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        """What the greedy layers read: the encoding ``H`` ``(B, N, E)``, the modular bonus
        ``beta`` ``(B, N)`` (None without a modular term) and the valid mask ``(B, N)``.

        A model that puts the DGN under a larger objective (as the end-to-end model's
        facility-location term does) calls this and runs its own greedy. ``penalty_weight``
        is the weight the SCMM counts at in that objective, which ``coverage_penalty``
        takes each candidate's singleton coverage off at (1 for the DGN alone).
        """
        X, valid = self._inputs(features, mask)
        H, beta = self._encode_and_score(X, valid, penalty_weight)
        return H, beta, valid

    def _encode_and_score(
        self, X: Tensor, valid: Tensor, penalty_weight: Tensor | float = 1.0
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`encode` then :meth:`modular_scores`; a fused encoder computes the modular
        layer in its own passes. ``penalty_weight``: the weight the coverage counts at in
        the greedy's objective (1 here; the SCMM's weight in a sum of objectives), which
        ``coverage_penalty`` takes the singleton coverage off at."""
        if self.modular is not None and self._own_encoder() and self.encoder.fused:
            out = self.encoder._forward_with_head(X, valid, self.modular)
            if out is not None:
                return out[0], self._penalised(out[0], self._modular_from(out[1], X), penalty_weight)
        H = self.encode(X, valid)
        return H, self._penalised(H, self.modular_scores(H, X), penalty_weight)

    def _penalised(self, H: Tensor, beta: Tensor | None, weight: Tensor | float = 1.0) -> Tensor | None:
        """``beta`` less ``weight`` times each item's singleton coverage with
        ``coverage_penalty`` (see :class:`DGNConfig`), else ``beta`` as it is."""
        if not self.config.coverage_penalty:
            return beta
        single = weight * self.objective._reduce(self.objective.phi(H), self.objective.weights(H))  # (B, N)
        return -single if beta is None else beta - single

    def _own_encoder(self) -> bool:
        """Whether the encoder runs the package's forward pass (it takes the mask and may run
        fused), not one a user's subclass or replacement wrote."""
        return type(self.encoder).forward is _ReluEncoder.forward

    def _inputs(self, features: Any, mask: Any) -> tuple[Tensor, Tensor]:
        X, _ = as_features(features)
        B, N, F = X.shape
        if F != self.config.in_features:
            raise ValueError(
                f"features have F={F} but the model expects in_features={self.config.in_features}"
            )
        param = next(self.parameters())
        X = X.to(dtype=param.dtype, device=param.device)
        return X, as_mask(mask, B, N, X.device)

    def forward(self, features: Any, mask: Any = None, steps: int | None = None) -> DGNOutput:
        """Select ``steps`` (default K) candidates per problem.

        Args:
            features: ``(B, N, F)`` or ``(N, F)`` input features.
            mask: Optional ``(B, N)`` bool, True for real candidates.
            steps: Override the number of greedy steps (e.g. to rank beyond K at test time).

        Returns:
            A :class:`DGNOutput` (batched; unbatched input is given a batch of 1).
        """
        H, beta, valid = self.encode_and_score(features, mask)  # (B, N, E), (B, N) or None, (B, N)
        K = self.config.steps if steps is None else steps
        # tau from the config at call time: training anneals it by replacing the config
        out = self.greedy(H, valid, beta, K, tau=self.config.tau)
        return DGNOutput(out.logits, out.distributions, out.indices, out.gains, out.valid, H)

    def num_parameters(self) -> int:
        """The number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``.

        The weights file is the checkpoint's single commit point: it carries a copy of the
        config in its safetensors metadata and is written last, to a temporary name that
        is ``fsync``-ed and renamed over the old file. A save killed at any moment leaves
        either the previous checkpoint or the new one, never a mixture:
        :meth:`from_pretrained` loads the weights with the config stored inside them.
        ``config.json`` is the same config for people and tools to read.

        Args:
            directory: Created if missing.
            extra: JSON-serialisable settings stored with the config (default: ``self.extra``).

        Returns:
            The directory.
        """
        return write_checkpoint(self, directory, "dgn", self.config.to_dict(), self.extra if extra is None else extra)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> DGN:
        """Load a model written by :meth:`save_pretrained`.

        The config stored inside ``model.safetensors`` is the one used; when
        ``config.json`` disagrees with it (a save interrupted between its two files),
        the weights' own config wins and a warning says so.

        Raises:
            DgnUserError: Missing files, a config from another format version or with
                unknown fields, weights that do not fit the config, the checkpoint of
                another model type (:func:`load_model` reads any), or a model trained end
                to end (:func:`dgn.load` reads every kind).
        """
        return cls._from_checkpoint(*read_checkpoint(directory, map_location), map_location)

    @classmethod
    def _from_checkpoint(cls, meta: dict[str, Any], state: dict[str, Tensor], source: str, weights_path: Path,
                         map_location: str | torch.device) -> DGN:
        """:meth:`from_pretrained` on a checkpoint :func:`read_checkpoint` has read."""
        if meta.get("model_type", "dgn") != "dgn":
            raise DgnUserError(
                f"{source}: field 'model_type': a {meta.get('model_type')!r} checkpoint, not a DGN "
                "(dgn.load_model reads any dgn checkpoint)"
            )
        config = DGNConfig.from_dict(meta.get("config"), source=f"{source}: field 'config'")
        model = cls(config)
        load_weights(model, state, weights_path, map_location)
        model.extra = meta["extra"]
        model.eval()
        return model


def load_model(directory: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> nn.Module:
    """Load any dgn checkpoint: a :class:`DGN` or an :class:`~dgn.baselines.EncoderScorer`.

    Raises:
        DgnUserError: As :meth:`DGN.from_pretrained`, or an unknown ``model_type``.
    """
    checkpoint = read_checkpoint(directory, map_location)  # read once, built by the model's own class
    meta, source = checkpoint[0], checkpoint[2]
    kind = meta.get("model_type", "dgn")
    if kind == "dgn":
        return DGN._from_checkpoint(*checkpoint, map_location)
    if kind == "encoder":
        from dgn.baselines import EncoderScorer

        return EncoderScorer._from_checkpoint(*checkpoint, map_location)
    raise DgnUserError(f"{source}: field 'model_type': unknown model type {kind!r} (known: dgn, encoder)")


def _drop_shared_keys(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """State-dict hook: drop the greedy layer's copy of the shared objective's tensors."""
    for key in [k for k in state_dict if k.startswith(prefix + "greedy.")]:
        del state_dict[key]


def _alias_shared_keys(
    module: nn.Module,
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: Any,
    strict: bool,
    missing_keys: list[str],
    unexpected_keys: list[str],
    error_msgs: list[str],
) -> None:
    """Load pre-hook: the greedy layer's shared objective loads from ``objective.*``."""
    for key in [k for k in state_dict if k.startswith(prefix + "objective.")]:
        state_dict[prefix + "greedy." + key[len(prefix):]] = state_dict[key]
