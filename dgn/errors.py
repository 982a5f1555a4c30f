"""Exception types shared by the whole package.

User mistakes (bad files, bad options) raise :class:`DgnUserError`, which the CLI turns
into one line on stderr and exit code 2. Its subclass :class:`DataError` carries the
file, line and field that were wrong, so the message can point at them.
"""

from __future__ import annotations

__all__ = ["DgnUserError", "DataError", "one_line"]


def one_line(text: object) -> str:
    """``str(text)`` with every run of whitespace, newlines included, made one space."""
    return " ".join(str(text).split())


class DgnUserError(ValueError):
    """An error caused by user input (a file, an option, a value): exit code 2 in the CLI."""


class DataError(DgnUserError):
    """Bad content in a data file, located by file, line and field.

    Args:
        message: What is wrong, e.g. ``"gold index 12 out of range for 10 candidates"``.
        path: The file that holds the bad record.
        line: 1-based line number in that file, if known.
        field: The JSON field (or option) that is wrong, if known.

    Example:
        >>> print(DataError("expected a list", path="dev.jsonl", line=3, field="candidates"))
        dev.jsonl:3: field 'candidates': expected a list
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "") + ": "
        elif line is not None:
            where = f"line {line}: "
        what = f"field {field!r}: " if field is not None else ""
        super().__init__(f"{where}{what}{message}")
