"""The ``dgn`` command line: data, training, prediction, evaluation, explanation, benchmark.

Every user mistake (a missing file, a malformed line, a bad option) ends in one line on
stderr and exit code 2; an internal error in a short message and exit code 1. Handlers
only parse options and call library code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dgn._version import __version__
from dgn.errors import DgnUserError

__all__ = ["main", "build_parser"]

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
    "ks": _ks,
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (subcommands register themselves from dgn.commands)."""
    from dgn.commands import register_all

    parser = _Parser(prog="dgn", description="Differentiable greedy subset selection.")
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
    try:
        return handler(args)
    except DgnUserError as exc:
        print(f"dgn {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dgn {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        print(
            f"dgn {args.command}: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
            "(please report this with the command you ran)",
            file=sys.stderr,
        )
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
