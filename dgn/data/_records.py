"""Field access for the adapters' source records, with located errors, and side files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dgn.errors import DataError, DgnUserError

__all__ = ["get_field", "type_name", "find_beside"]


def type_name(value: Any) -> str:
    """JSON-ish name of a value's type, for error messages."""
    return "null" if value is None else type(value).__name__


def get_field(
    obj: Any,
    key: str,
    expected: type | tuple[type, ...],
    *,
    path: str,
    line: int,
    what: str | None = None,
    field_prefix: str = "",
) -> Any:
    """Return ``obj[key]`` after checking that it exists and has the expected type.

    Args:
        obj: A parsed JSON record (must be a dict).
        key: The field.
        expected: Accepted Python type(s); ``bool`` never passes for ``int``.
        path: Source file, for the error.
        line: 1-based line, for the error.
        what: Human description of the expected value (defaults to the type names).
        field_prefix: Prepended to ``key`` in the error's field name (``"evidences[2]."``).

    Returns:
        The value.

    Raises:
        DataError: ``obj`` is not an object, or the field is missing or of the wrong type.
    """
    if not isinstance(obj, dict):
        raise DataError(f"expected a JSON object, got {type_name(obj)}", path=path, line=line)
    name = field_prefix + key
    if key not in obj:
        raise DataError("missing required field", path=path, line=line, field=name)
    value = obj[key]
    types = expected if isinstance(expected, tuple) else (expected,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        want = what or " or ".join(t.__name__ for t in types)
        raise DataError(
            f"expected {want}, got {type_name(value)}", path=path, line=line, field=name
        )
    return value


def find_beside(
    input_path: str | os.PathLike[str],
    given: str | os.PathLike[str] | None,
    names: tuple[str, ...],
    *,
    what: str,
    option: str,
) -> Path:
    """The side file (documents, corpus) an annotation file needs: given, or found beside it.

    Args:
        input_path: The annotation file.
        given: The caller's path, or ``None`` to look beside ``input_path``.
        names: What to look for beside it, in order (``"docs/"`` for a directory).
        what: What the file holds, for the error (``"ERASER documents"``).
        option: The keyword that passes it, for the error (``"docs"``).

    Returns:
        The path (``given`` when it exists, else the first of ``names`` that does).

    Raises:
        DgnUserError: ``given`` does not exist, or none of ``names`` is beside the file
            (one line naming every place looked at).
    """
    if given is not None:
        path = Path(given)
        if not path.exists():
            raise DgnUserError(f"{what}: {option}={str(given)!r} not found")
        return path
    folder = Path(input_path).parent
    for name in names:
        candidate = folder / name.rstrip("/")
        if candidate.is_dir() if name.endswith("/") else candidate.is_file():
            return candidate
    looked = ", ".join(str(folder / n.rstrip("/")) + ("/" if n.endswith("/") else "") for n in names)
    raise DgnUserError(
        f"no {what} for {input_path}: looked for {looked}; pass {option}=PATH (--docs PATH)"
    )
