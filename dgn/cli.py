"""The ``dgn`` command line: data, training, prediction, evaluation, explanation, benchmark.

Every user mistake (a missing file, a malformed line, a bad option) ends in one line on
stderr and exit code 2; an internal error in a short message and exit code 1. With
``DGN_TRACEBACK=1`` in the environment both also print the Python traceback first (for
bug reports). Warnings are printed as one line each, and progress bars are shown only
when stderr is a terminal, so a failing command's stderr is its one error line. Handlers
only parse options and call library code.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from dgn._version import __version__
from dgn.errors import DgnUserError, one_line

__all__ = ["main", "build_parser", "TRACEBACK_ENV"]

#: Set to 1 to print the full traceback of an error as well (for a bug report).
TRACEBACK_ENV = "DGN_TRACEBACK"

_EPILOG = (
    "A user mistake (a missing or malformed file, a bad option) prints one line naming the "
    "file, line and field or the option, and exits with 2; an internal error prints a short "
    "message and exits with 1. Set DGN_TRACEBACK=1 to also print the Python traceback (for "
    "a bug report). Progress bars are shown only when stderr is a terminal."
)

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def _ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not ks or any(k <= 0 for k in ks):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return sorted(set(ks))


TYPES: dict[str, Callable[[str], Any]] = {
    "positive_int": _positive_int,
    "positive_float": _positive_float,
    "nonnegative_int": _nonnegative_int,
    "nonnegative_float": _nonnegative_float,
    "probability": _probability,
    "ks": _ks,
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (subcommands register themselves from dgn.commands)."""
    from dgn.commands import register_all

    parser = _Parser(
        prog="dgn", description="Differentiable greedy subset selection.", epilog=_EPILOG
    )
    parser.add_argument("--version", action="version", version=f"dgn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    register_all(sub, TYPES)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dgn`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    name = _command_name(args)
    if not _is_terminal(sys.stderr):
        # progress bars only on a terminal, so piped stderr stays clean; the progress lines
        # on stdout (epochs, models) stay for logs
        from dgn._progress import disable_bars

        disable_bars()
    with warnings.catch_warnings():
        warnings.showwarning = functools.partial(_show_warning, name)
        try:
            return handler(args)
        except DgnUserError as exc:
            _traceback_if_asked()
            print(f"{name}: error: {one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{name}: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            _traceback_if_asked()
            print(
                f"{name}: internal error: {type(exc).__name__}: {one_line(exc)} "
                "(please report this with the command you ran)",
                file=sys.stderr,
            )
            return 1


def _command_name(args: argparse.Namespace) -> str:
    """``dgn train``, ``dgn data convert``: how error lines name the command."""
    parts = ["dgn", args.command]
    action = getattr(args, "data_command", None)
    if action:
        parts.append(action)
    return " ".join(parts)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _traceback_if_asked() -> None:
    if os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0"):
        traceback.print_exc(file=sys.stderr)


def _show_warning(
    command: str,
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """One line per warning, like the error lines (the default form takes two)."""
    print(f"{command}: warning: {one_line(message)}", file=sys.stderr)




if __name__ == "__main__":
    raise SystemExit(main())
