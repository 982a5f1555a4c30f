"""An SQLite index of the FEVER Wikipedia dump: page title -> its numbered sentences.

The FEVER dump (``wiki-pages/wiki-NNN.jsonl``, 5.4M pages) holds one page per line::

    {"id": "Page_Title", "text": "...", "lines": "0\\tFirst sentence .\\tlink\\tlink\\n1\\t..."}

Sentence ``i`` is the second tab-separated field of the line of ``lines`` that starts
with ``i``; the remaining fields are hyperlink anchors; some sentences are empty. Text is
tokenised with PTB-style escapes (``-LRB-`` for ``(``, ``-COLON-`` for ``:``, ...).

:meth:`WikiStore.build` streams every ``*.jsonl`` (or ``*.jsonl.gz``) file of the dump
into one table, once: the database is written under a temporary name and renamed when
complete, and a later ``build`` reuses it when it was made from the same files (names
and sizes). Titles are looked up in Unicode NFC form, so NFC and NFD spellings of a title
find the same page.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from dgn._progress import bars
from dgn.data.io import iter_jsonl, iter_stream_lines, parse_json_line
from dgn.errors import DataError

__all__ = ["WikiStore", "parse_lines", "unescape", "FORMAT_VERSION"]

FORMAT_VERSION = "2"
_BATCH = 5000
_ESCAPES = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "-COLON-": ":",
}
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in _ESCAPES))


def unescape(text: str) -> str:
    """Replace the dump's bracket and colon tokens by the characters they stand for.

    Args:
        text: Dump text or a page title.

    Returns:
        The text with ``-LRB- -RRB- -LSB- -RSB- -LCB- -RCB- -COLON-`` replaced by
        ``( ) [ ] { } :``; everything else (spacing included) unchanged.

    Example:
        >>> unescape("Savages -LRB- 2012 film -RRB- -COLON- cast")
        'Savages ( 2012 film ) : cast'
    """
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)


def parse_lines(lines: str) -> dict[int, str]:
    """Parse a page's ``lines`` field into ``{sentence_id: sentence}``.

    Lines whose first field is not a non-negative integer are ignored; a line with no
    sentence field maps to ``""``.

    Args:
        lines: The dump's ``lines`` string.

    Returns:
        Sentence ids to (still escaped) sentence text, empty sentences included.

    Example:
        >>> parse_lines("0\\tA cat .\\tcat\\n1\\t\\n2\\tIt purrs .")
        {0: 'A cat .', 1: '', 2: 'It purrs .'}
    """
    out: dict[int, str] = {}
    for row in lines.split("\n"):
        head, _, rest = row.partition("\t")
        if not head.isdigit():
            continue
        sentence, _, _ = rest.partition("\t")
        out.setdefault(int(head), sentence)
    return out


def _key(title: str) -> str:
    return unicodedata.normalize("NFC", title)


def _encodable(text: str) -> bool:
    """False for text SQLite cannot store: a lone surrogate (from a ``"\\ud800"`` escape)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _DumpFile(NamedTuple):
    """One ``*.jsonl`` file of the dump: on disk, or a member of the ``wiki-pages.zip`` archive."""

    name: str  # the file name, or the member's path inside the archive
    size: int  # bytes, uncompressed
    path: Path  # the file, or the archive
    member: str | None  # the archive member, or None for a file on disk

    @property
    def base_name(self) -> str:
        """The file's own name (``wiki-001.jsonl``), the same for the directory and the archive."""
        return Path(self.name).name

    @property
    def label(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}:{self.member}"


def _dump_files(source: Path) -> list[_DumpFile]:
    """The dump's page files, sorted by name: a ``wiki-pages`` directory or the zip archive."""
    if source.is_file() and zipfile.is_zipfile(source):
        try:
            with zipfile.ZipFile(source) as archive:
                members = [
                    info for info in archive.infolist()
                    if not info.is_dir() and info.filename.endswith(".jsonl")
                    and not Path(info.filename).name.startswith(".")
                ]
        except (zipfile.BadZipFile, OSError) as exc:
            raise DataError(f"cannot read the wiki archive: {exc}", path=str(source)) from exc
        files = sorted(
            (_DumpFile(m.filename, m.file_size, source, m.filename) for m in members),
            key=lambda f: f.name,
        )
        if not files:
            raise DataError("no *.jsonl files in the wiki archive", path=str(source))
        return files
    if not source.is_dir():
        what = "wiki dump directory or archive not found" if not source.exists() else (
            "not a wiki-pages directory or zip archive"
        )
        raise DataError(what, path=str(source))
    files = sorted(
        _DumpFile(p.name, p.stat().st_size, p, None)
        for p in source.iterdir()
        if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz"))
    )
    if not files:
        raise DataError("no *.jsonl files in the wiki dump directory", path=str(source))
    return files


def _fingerprint(files: list[_DumpFile]) -> str:
    return json.dumps([[f.base_name, f.size] for f in files])


def _objects(file: _DumpFile) -> Iterator[tuple[int, Any]]:
    if file.member is None:
        yield from iter_jsonl(file.path)
        return
    label = file.label
    line_no = 0
    try:
        with zipfile.ZipFile(file.path) as archive, archive.open(file.member) as fh:
            for line_no, text in iter_stream_lines(fh, label):
                if text.strip():
                    yield line_no, parse_json_line(text, path=label, line=line_no)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise DataError(
            f"cannot read the archive member (corrupt or truncated?): {exc}", path=label, line=line_no + 1
        ) from exc


def _pages(file: _DumpFile) -> Iterator[tuple[str, str]]:
    path = file.label
    for line, obj in _objects(file):
        if not isinstance(obj, dict):
            raise DataError("expected a JSON object", path=path, line=line)
        title = obj.get("id")
        lines = obj.get("lines")
        if not isinstance(title, str):
            raise DataError("expected a string page title", path=path, line=line, field="id")
        if not isinstance(lines, str):
            raise DataError("expected a string", path=path, line=line, field="lines")
        for name, text in (("id", title), ("lines", lines)):
            if not _encodable(text):
                raise DataError(
                    "text with a lone surrogate escape is not valid Unicode",
                    path=path,
                    line=line,
                    field=name,
                )
        if title:
            yield _key(title), lines


def _open_partial(partial: Path, fingerprint: str, *, fresh: bool, target: Path) -> sqlite3.Connection:
    """The partial store of an earlier interrupted build of the same dump, or a new one."""
    if partial.exists() and not fresh:
        earlier: sqlite3.Connection | None = None
        try:
            earlier = sqlite3.connect(partial)
            rows = dict(earlier.execute("SELECT key, value FROM meta").fetchall())
            earlier.execute("SELECT name FROM done LIMIT 1").fetchall()
            if rows.get("fingerprint") == fingerprint and rows.get("format_version") == FORMAT_VERSION:
                _tune(earlier)
                return earlier
        except sqlite3.Error:
            pass
        if earlier is not None:
            earlier.close()
    partial.unlink(missing_ok=True)
    try:
        conn = sqlite3.connect(partial)
        _tune(conn)
        with conn:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            # Titles are unique in the dump; should one repeat, the first row wins.
            conn.execute("CREATE TABLE pages (id TEXT NOT NULL, lines TEXT NOT NULL)")
            conn.execute("CREATE TABLE done (name TEXT PRIMARY KEY)")
            conn.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("format_version", FORMAT_VERSION), ("fingerprint", fingerprint)],
            )
    except sqlite3.Error as exc:
        raise DataError(f"cannot write wiki store: {exc}", path=str(target)) from exc
    return conn


def _tune(conn: sqlite3.Connection) -> None:
    # A rollback journal (not OFF): a build killed inside a file's transaction leaves a
    # consistent store without that file. synchronous=NORMAL: a sync per commit (one a dump
    # file, about 110), so a power loss cannot leave a corrupt partial store behind.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA cache_size=-262144")  # 256 MiB: 5.4M random-order keys


class WikiStore:
    """Read access to a wiki store built by :meth:`build`.

    Args:
        path: The SQLite file.

    Raises:
        DataError: The file is missing or is not a complete store.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "wiki-pages").mkdir()
        >>> _ = (d / "wiki-pages" / "wiki-001.jsonl").write_text(
        ...     '{"id": "Cat", "text": "A cat .", "lines": "0\\\\tA cat .\\\\n1\\\\t"}\\n')
        >>> with WikiStore.build(d / "wiki-pages") as store:
        ...     store.get_lines("Cat"), store.get_lines("Dog")
        ({0: 'A cat .', 1: ''}, None)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError("wiki store not found", path=str(self.path))
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            self._conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise DataError(f"cannot open wiki store: {exc}", path=str(self.path)) from exc
        try:
            rows = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise DataError(f"not a dgn wiki store: {exc}", path=str(self.path)) from exc
        if rows.get("complete") != "1" or rows.get("format_version") != FORMAT_VERSION:
            self._conn.close()
            raise DataError("incomplete or outdated wiki store; rebuild it", path=str(self.path))
        self.fingerprint: str = rows.get("fingerprint", "")
        self._num_pages = int(rows.get("pages", "0"))

    @staticmethod
    def default_db_path(wiki_dir: str | os.PathLike[str]) -> Path:
        """``<wiki_dir>/../wiki.sqlite``: the default store location for a dump."""
        return Path(wiki_dir).parent / "wiki.sqlite"

    @classmethod
    def build(
        cls,
        wiki_dir: str | os.PathLike[str],
        db_path: str | os.PathLike[str] | None = None,
        *,
        force: bool = False,
        progress: bool = False,
    ) -> WikiStore:
        """Index a FEVER wiki dump, or reuse the index made earlier from the same files.

        The dump is the ``wiki-pages`` directory or the release's ``wiki-pages.zip``
        (read in place, members ``wiki-pages/wiki-NNN.jsonl``). Pages are streamed file by
        file (sorted by name) into ``.<db name>.partial`` next to ``db_path``, one
        transaction per file; the finished store is renamed into place. An interrupted
        build resumes: the next call keeps the files already committed to the partial
        store (when it was made from the same dump) and reads only the others. An empty
        title (the dump has one) is skipped; of repeated titles, the first is kept. A store
        built from the directory is reused for the archive and back: both fingerprint as
        the same file names and (uncompressed) sizes.

        Args:
            wiki_dir: The ``wiki-pages`` directory or the ``wiki-pages.zip`` archive.
            db_path: Where the store goes; default :meth:`default_db_path`.
            force: Rebuild from scratch even if a matching store or partial build exists.
            progress: Show a progress bar (bytes of the dump read) on stderr.

        Returns:
            The opened store.

        Raises:
            DataError: Missing directory or archive, no dump files, a malformed page line
                (file or archive member and line named), or an unwritable ``db_path``.
        """
        from tqdm import tqdm

        source = Path(wiki_dir)
        db = Path(db_path) if db_path is not None else cls.default_db_path(source)
        files = _dump_files(source)
        fingerprint = _fingerprint(files)
        if db.exists() and not force:
            try:
                store = cls(db)
            except DataError:
                store = None
            if store is not None:
                if store.fingerprint == fingerprint:
                    return store
                store.close()
        partial = db.with_name(f".{db.name}.partial")
        conn = _open_partial(partial, fingerprint, fresh=force, target=db)
        try:
            done = {name for (name,) in conn.execute("SELECT name FROM done")}
            total = sum(f.size for f in files)
            with tqdm(
                total=total, unit="B", unit_scale=True, desc=f"wiki store {db.name}",
                disable=not bars(progress), leave=False,
            ) as bar:
                bar.update(sum(f.size for f in files if f.base_name in done))
                for file in files:
                    if file.base_name in done:  # the directory's and the archive's alike
                        continue
                    with conn:  # one transaction a file: a killed build loses at most this file
                        batch: list[tuple[str, str]] = []
                        for page in _pages(file):
                            batch.append(page)
                            if len(batch) >= _BATCH:
                                conn.executemany("INSERT INTO pages VALUES (?, ?)", batch)
                                batch.clear()
                        conn.executemany("INSERT INTO pages VALUES (?, ?)", batch)
                        conn.execute("INSERT INTO done VALUES (?)", (file.base_name,))
                    bar.update(file.size)
            # One explicit transaction for the last steps (Python's sqlite3 would commit the
            # DDL on its own): a build killed here resumes with every file still done.
            conn.isolation_level = None
            conn.execute("BEGIN")
            try:
                # Index after loading (a sorted build): much faster than a keyed insert.
                conn.execute("CREATE INDEX IF NOT EXISTS pages_id ON pages (id)")
                (count,) = conn.execute("SELECT COUNT(DISTINCT id) FROM pages").fetchone()
                conn.execute("DROP TABLE done")
                conn.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [("pages", str(count)), ("complete", "1")],
                )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.close()
            with open(partial, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(partial, db)
        except sqlite3.Error as exc:
            conn.close()
            raise DataError(f"cannot write wiki store: {exc}", path=str(db)) from exc
        except BaseException:
            conn.close()  # the partial store stays: the next build resumes from it
            raise
        return cls(db)

    def __len__(self) -> int:
        return self._num_pages

    def __contains__(self, page: object) -> bool:
        if not isinstance(page, str) or not _encodable(page):
            return False
        row = self._conn.execute(
            "SELECT 1 FROM pages WHERE id = ? LIMIT 1", (_key(page),)
        ).fetchone()
        return row is not None

    def get_raw(self, page: str) -> str | None:
        """The dump's ``lines`` string of a page, or ``None`` if the page is absent."""
        if not _encodable(page):  # no stored title has a lone surrogate
            return None
        row = self._conn.execute(
            "SELECT lines FROM pages WHERE id = ? ORDER BY rowid LIMIT 1", (_key(page),)
        ).fetchone()
        return None if row is None else str(row[0])

    def get_lines(self, page: str, *, unescaped: bool = False) -> dict[int, str] | None:
        """The sentences of a page by sentence id (see :func:`parse_lines`).

        Args:
            page: The page title as FEVER writes it (``"Savages_-LRB-2012_film-RRB-"``).
            unescaped: Apply :func:`unescape` to every sentence.

        Returns:
            ``{sentence_id: text}`` with empty sentences included, or ``None`` if the
            page is not in the dump.
        """
        raw = self.get_raw(page)
        if raw is None:
            return None
        lines = parse_lines(raw)
        if unescaped:
            lines = {i: unescape(s) for i, s in lines.items()}
        return lines

    def close(self) -> None:
        """Close the database connection."""
        self._conn.close()

    def __enter__(self) -> WikiStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
