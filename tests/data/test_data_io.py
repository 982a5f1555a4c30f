"""Atomic writes and gzip-aware reading (dgn.data.io)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from dgn.data.io import atomic_write, iter_jsonl, iter_lines, open_text
from dgn.errors import DataError


class Boom(RuntimeError):
    pass


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_text_and_binary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    with atomic_write(target) as fh:
        fh.write("héllo\n")
    assert target.read_text(encoding="utf-8") == "héllo\n"
    with atomic_write(target, "wb") as fh:
        fh.write(b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _leftovers(tmp_path) == []


def test_atomic_write_keeps_old_file_when_writer_raises(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old content\n")
    with pytest.raises(Boom), atomic_write(target) as fh:
        fh.write("new partial content\n" * 1000)
        fh.flush()
        raise Boom("midway")
    assert target.read_text() == "old content\n"
    assert _leftovers(tmp_path) == []


def test_atomic_write_creates_nothing_when_writer_raises(tmp_path: Path) -> None:
    target = tmp_path / "new.bin"
    with pytest.raises(Boom), atomic_write(target, "wb") as fh:
        fh.write(b"x")
        raise Boom
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("a")
    os.chmod(target, 0o640)
    with atomic_write(target) as fh:
        fh.write("b")
    assert target.stat().st_mode & 0o777 == 0o640


def test_atomic_write_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"), atomic_write(tmp_path / "x", "a"):
        pass
    with pytest.raises(DataError, match="cannot write file") as info:
        with atomic_write(tmp_path / "missing-dir" / "x.txt"):
            pass
    assert info.value.path == str(tmp_path / "missing-dir" / "x.txt")


def test_atomic_write_onto_a_directory_is_a_data_error(tmp_path: Path) -> None:
    taken = tmp_path / "out.jsonl"
    taken.mkdir()
    with pytest.raises(DataError, match="cannot write file: it is a directory") as info:
        with atomic_write(taken) as fh:
            fh.write("never written")
    assert info.value.path == str(taken)
    # the target turns into a directory while the content is written: the rename fails
    later = tmp_path / "later.jsonl"
    with pytest.raises(DataError, match="cannot write file"):
        with atomic_write(later) as fh:
            fh.write("content")
            later.mkdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["later.jsonl", "out.jsonl"]  # no temp file
    assert taken.is_dir() and later.is_dir()


def test_open_text_plain_and_gzip(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_text("ü line\n", encoding="utf-8")
    packed = tmp_path / "b.data"  # gzip detected from content, not the name
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write("ü line\n")
    for p in (plain, packed):
        with open_text(p) as fh:
            assert fh.read() == "ü line\n"


def test_open_text_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match="cannot read file") as info:
        open_text(missing)
    assert info.value.path == str(missing)
    with pytest.raises(DataError, match="cannot read file"):
        open_text(tmp_path)  # a directory


def test_iter_lines_numbers_bom_and_bad_utf8(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_bytes(b"\xef\xbb\xbffirst\r\nsecond\n\xff\xfe bad\n")
    lines = iter_lines(p)
    assert next(lines) == (1, "first")
    assert next(lines) == (2, "second")
    with pytest.raises(DataError, match="UTF-8") as info:
        next(lines)
    assert info.value.line == 3


def test_truncated_gzip_is_a_data_error(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl.gz"
    blob = gzip.compress(b"".join(b'{"a": %d}\n' % i for i in range(5000)))
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="corrupt or truncated"):
        list(iter_jsonl(p))


def test_iter_jsonl_malformed_line(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n\n   \n{"a": 2,}\n')
    it = iter_jsonl(p)
    assert next(it) == (1, {"a": 1})
    with pytest.raises(DataError) as info:
        next(it)
    err = info.value
    assert err.line == 4 and err.path == str(p)
    assert "malformed JSON" in str(err) and "\n" not in str(err)
