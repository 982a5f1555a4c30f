"""Command-line options and config fields: a config built from the options the user passed,
its errors naming the option (``--tau``), not the field (``DGNConfig.tau``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dgn.errors import DgnUserError

__all__ = ["build_config"]

T = TypeVar("T")

_FIELD_RE = re.compile(r"\b(DGNConfig|TrainConfig)\.(\w+)")


def build_config(factory: Callable[..., T], overrides: Mapping[str, Any], options: Mapping[str, str]) -> T:
    """``factory(**overrides)``, with a ``ValueError`` turned into a user error naming the option.

    Args:
        factory: Builds the config (e.g. ``lambda **kw: replace(DGNConfig(...), **kw)``).
        overrides: Only the fields the user passed.
        options: Field name -> command-line option (``"tau"`` -> ``"--tau"``).
    """
    try:
        return factory(**overrides)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, DgnUserError):
            raise
        message = str(exc)
        match = _FIELD_RE.search(message)
        if match and match.group(2) in options:
            option = options[match.group(2)]
            message = _FIELD_RE.sub(option, message, count=1)
            raise DgnUserError(message) from None
        raise DgnUserError(f"bad option value: {message}") from None
