"""File helpers shared by the data modules: atomic writes and (gzip-aware) reading.

Every file that ``dgn`` writes goes through :func:`atomic_write`: the content lands in a
temporary file next to the target and only replaces it, in one ``os.replace``, once it is
complete and on disk. A writer that fails midway leaves the old file (or no file) behind,
never a half-written one.

Reading accepts plain or gzip-compressed files alike (detected from the gzip magic bytes,
not the name) and reports unreadable input as :class:`~dgn.errors.DataError`.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from dgn.errors import DataError

__all__ = [
    "atomic_write",
    "open_text",
    "open_binary",
    "iter_lines",
    "iter_jsonl",
    "parse_json_line",
]

_GZIP_MAGIC = b"\x1f\x8b"
_TEXT_MODES = {"w": "w", "wt": "w"}
_BINARY_MODES = {"wb": "wb"}


def _reason(exc: OSError) -> str:
    """The human part of an ``OSError`` (``strerror`` without the repeated file name)."""
    return exc.strerror or str(exc) or type(exc).__name__


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a plain or gzip file for reading bytes (decompressed when gzip).

    Args:
        path: The file. Gzip is detected from its first two bytes, whatever its name.

    Returns:
        A binary file object; the caller closes it.

    Raises:
        DataError: The file is missing or cannot be read.
    """
    p = Path(path)
    try:
        if _is_gzip(p):
            return cast(IO[bytes], gzip.open(p, "rb"))
        return open(p, "rb")
    except OSError as exc:
        raise DataError(f"cannot read file: {_reason(exc)}", path=str(p)) from exc


def open_text(path: str | os.PathLike[str]) -> IO[str]:
    """Open a plain or gzip text file for reading as UTF-8.

    Args:
        path: The file. Gzip is detected from its first two bytes, whatever its name.

    Returns:
        A text file object; the caller closes it.

    Raises:
        DataError: ``"cannot read file: <reason>"`` when the file is missing or unreadable.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = p.write_text("hello\\n")
        >>> with open_text(p) as fh:
        ...     fh.read()
        'hello\\n'
    """
    return io.TextIOWrapper(open_binary(path), encoding="utf-8")


def iter_stream_lines(fh: IO[bytes], label: str) -> Iterator[tuple[int, str]]:
    """Decode the lines of an open binary stream, as :func:`iter_lines` does for a file.

    Args:
        fh: The stream (a file, a gzip or an archive member).
        label: How errors name the source (a path, ``archive.zip:member``).

    Yields:
        ``(line_number, text)`` pairs, 1-based, line endings and a leading UTF-8 byte
        order mark stripped.

    Raises:
        DataError: A line that is not valid UTF-8 (the stream's own read errors pass
            through for the caller to name).
    """
    for line_no, raw in enumerate(fh, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"not valid UTF-8 at byte {exc.start}", path=label, line=line_no) from exc
        if line_no == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield line_no, text.rstrip("\r\n")


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Stream the lines of a plain or gzip UTF-8 text file with 1-based line numbers.

    Each line is decoded on its own, so a decoding error names the exact line. A UTF-8
    byte order mark at the start of the file is dropped. Line endings are stripped.

    Args:
        path: The file.

    Yields:
        ``(line_number, text)`` pairs, blank lines included.

    Raises:
        DataError: The file is missing or unreadable, is a corrupt or truncated gzip
            stream, or a line is not valid UTF-8.
    """
    p = str(path)
    line_no = 0
    with open_binary(path) as fh:
        try:
            for line_no, text in iter_stream_lines(fh, p):
                yield line_no, text
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            reason = _reason(exc) if isinstance(exc, OSError) else str(exc)
            raise DataError(
                f"cannot read file (corrupt or truncated?): {reason}", path=p, line=line_no + 1
            ) from exc


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Stream the JSON values of a JSON Lines file, skipping blank lines.

    Args:
        path: A plain or gzip JSONL file.

    Yields:
        ``(line_number, value)`` pairs, line numbers 1-based.

    Raises:
        DataError: Unreadable file, or a line that is not valid JSON (with its line number
            and the parser's message).
    """
    for line_no, text in iter_lines(path):
        if text.strip():
            yield line_no, parse_json_line(text, path=str(path), line=line_no)


def parse_json_line(text: str, *, path: str | None = None, line: int | None = None) -> Any:
    """Parse one JSON Lines record.

    Args:
        text: The line.
        path: Its file, for the error message.
        line: Its 1-based line number, for the error message.

    Returns:
        The parsed value.

    Raises:
        DataError: ``"malformed JSON: <parser message> (column c)"``, located.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=line
        ) from exc
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise DataError(f"malformed JSON: {exc}", path=path, line=line) from exc
    except RecursionError:
        raise DataError("malformed JSON: nested too deeply", path=path, line=line) from None


def _create_temp(target: Path) -> tuple[int, Path]:
    """Create a fresh temporary file next to ``target`` (umask applies, like a plain open)."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(f"could not create a temporary file next to {target}")


def _fsync_dir(directory: Path) -> None:
    """Persist a rename on POSIX; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """Write a file atomically: all of it or, on error, nothing (the old file stays).

    The body writes to a temporary file in the target's directory; on normal exit the file
    is flushed, ``fsync``-ed and moved over the target with ``os.replace``. If the body
    raises, the temporary file is deleted and the exception propagates. An existing
    target keeps its permission bits.

    Args:
        path: The file to create or replace. Its directory must exist.
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        encoding: Text encoding for ``"w"``; ignored in binary mode.

    Yields:
        The open temporary file.

    Raises:
        ValueError: ``mode`` is not ``"w"``, ``"wt"`` or ``"wb"``.
        DataError: ``"cannot write file: <reason>"`` when the target is a directory or
            the temporary file cannot be created or renamed (missing directory, no
            permission).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
        >>> with atomic_write(p) as fh:
        ...     _ = fh.write("done\\n")
        >>> p.read_text()
        'done\\n'
    """
    if mode not in _TEXT_MODES and mode not in _BINARY_MODES:
        raise ValueError(f"atomic_write mode must be 'w', 'wt' or 'wb', got {mode!r}")
    target = Path(path)
    if target.is_dir():
        raise DataError("cannot write file: it is a directory", path=str(target))
    try:
        fd, tmp = _create_temp(target)
    except OSError as exc:
        raise DataError(f"cannot write file: {_reason(exc)}", path=str(target)) from exc
    try:
        if mode in _BINARY_MODES:
            fh: IO[Any] = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding=encoding, newline="")
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    try:
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        try:
            os.replace(tmp, target)
        except OSError as exc:  # e.g. the target became a directory meanwhile
            raise DataError(f"cannot write file: {_reason(exc)}", path=str(target)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def json_ready(value: Any) -> Any:
    """A copy that ``json.dump(..., allow_nan=False)`` accepts: tuples as lists, NaN and infinities as None."""
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
