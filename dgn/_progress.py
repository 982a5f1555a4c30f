"""One switch for progress bars: the command line turns them off when stderr is no terminal.

Library functions take ``progress=`` and draw tqdm bars only where :func:`bars` says so; the
``dgn`` command calls :func:`disable_bars` when stderr is redirected, so logs and the
one-line errors of failing commands carry no bar fragments (text progress lines on stdout
are unaffected).
"""

from __future__ import annotations

_ENABLED = True


def bars(progress: bool) -> bool:
    """Whether to draw a progress bar for a call made with ``progress``."""
    return bool(progress) and _ENABLED


def disable_bars() -> None:
    """Turn progress bars off for the rest of the process."""
    global _ENABLED
    _ENABLED = False
