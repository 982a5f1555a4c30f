"""Dataset registry: locate, data_dir and checksum-verified downloads over real HTTP."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dgn.data.adapters import ADAPTERS
from dgn.data.registry import DATASETS, data_dir, download, get_dataset, locate, sha256_file
from dgn.errors import DgnUserError

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FM2_DEV_SHA = DATASETS["fm2"].files["dev"].sha256


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        QuietHandler.requests.append(self.path)


class TruncatingHandler(http.server.BaseHTTPRequestHandler):
    """Announces more bytes than it sends, then closes the connection."""

    def do_GET(self) -> None:
        body = b"\x1f\x8b" + b"partial data" * 100
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) + 5000))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(
    handler: type[http.server.BaseHTTPRequestHandler], directory: Path | None = None
) -> Iterator[str]:
    factory = functools.partial(handler, directory=str(directory)) if directory else handler
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), factory)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_registry_contents() -> None:
    assert set(DATASETS) == {
        "fm2", "wice", "climate-fever", "fever", "eraser-fever", "eraser-multirc", "scifact",
        "entailmentbank",
    }
    assert list(DATASETS["fm2"].files) == ["dev", "test"]
    assert DATASETS["wice"].files["dev"].relative_path == "wice/claim_dev.jsonl.gz"
    assert all(spec.format in ADAPTERS for spec in DATASETS.values())
    assert {n: s.format for n, s in DATASETS.items() if n not in ("fm2", "wice", "climate-fever", "fever")} == {
        "eraser-fever": "eraser", "eraser-multirc": "eraser", "scifact": "scifact",
        "entailmentbank": "entailmentbank",
    }
    assert {n: list(s.files) for n, s in DATASETS.items() if s.format != n} == {
        "eraser-fever": ["val", "test", "docs"], "eraser-multirc": ["val", "docs"],
    }
    assert list(DATASETS["scifact"].files) == ["train", "corpus"]
    assert list(DATASETS["entailmentbank"].files) == ["train", "dev"]
    # the adapters find documents and corpus beside the annotation file, under these names
    assert DATASETS["eraser-fever"].files["docs"].relative_path == "eraser/fever/docs.jsonl.gz"
    assert DATASETS["eraser-multirc"].files["docs"].relative_path == "eraser/multirc/docs.jsonl.gz"
    assert DATASETS["scifact"].files["corpus"].relative_path == "scifact/corpus.jsonl.gz"
    for spec in DATASETS.values():
        for file in spec.files.values():
            assert file.url is None or file.url == file.relative_path or spec.name == "fever"
    with pytest.raises(
        DgnUserError,
        match="unknown dataset 'fm3'; known datasets: climate-fever, entailmentbank, eraser-fever, "
        "eraser-multirc, fever, fm2, scifact, wice",
    ):
        get_dataset("fm3")


@pytest.mark.parametrize(
    "name", ["fm2", "wice", "climate-fever", "eraser-fever", "eraser-multirc", "scifact", "entailmentbank"]
)
def test_checksums_match_the_shared_files(name: str) -> None:
    for file in DATASETS[name].files.values():
        path = SHARED_DATA / file.relative_path
        if not path.is_file():
            pytest.skip(f"real data not available: {path}")
        assert sha256_file(path) == file.sha256
        assert (
            locate(
                name,
                next(s for s, f in DATASETS[name].files.items() if f == file),
                SHARED_DATA,
                verify=True,
            )
            == path
        )


def test_data_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DGN_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert data_dir() == tmp_path / "data"
    monkeypatch.setenv("DGN_DATA_DIR", str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env"
    assert data_dir(tmp_path / "explicit") == tmp_path / "explicit"
    assert data_dir("rel") == tmp_path / "rel"


def test_locate_missing_says_what_to_put_where(tmp_path: Path) -> None:
    with pytest.raises(DgnUserError) as info:
        locate("fm2", "test", tmp_path)
    msg = str(info.value)
    sha = DATASETS["fm2"].files["test"].sha256
    assert msg == (
        f"dataset 'fm2' split 'test' not found: put test.jsonl.gz (sha256 {sha}) at "
        f"{tmp_path}/fm2/test.jsonl.gz, or run `dgn data download fm2 --data-dir {tmp_path}`"
    )
    assert "\n" not in msg
    with pytest.raises(DgnUserError, match="has no split 'train'; splits: dev, test"):
        locate("fm2", "train", tmp_path)
    with pytest.raises(DgnUserError, match="fever.ai.*dgn data download fever.*put train.jsonl at .*fever/train.jsonl"):
        locate("fever", "train", tmp_path)
    (tmp_path / "fever").mkdir()
    (tmp_path / "fever" / "train.jsonl").write_text("{}\n")
    assert locate("fever", "train", tmp_path, verify=True) == tmp_path / "fever" / "train.jsonl"


def test_locate_verify_detects_wrong_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "wice").mkdir()
    (tmp_path / "wice" / "claim_dev.jsonl.gz").write_bytes(b"not it")
    monkeypatch.setenv("DGN_DATA_DIR", str(tmp_path))
    assert locate("wice", "dev") == tmp_path / "wice" / "claim_dev.jsonl.gz"
    with pytest.raises(DgnUserError, match="expected e1733956"):
        locate("wice", "dev", verify=True)


def test_download_over_http(tmp_path: Path) -> None:
    if not (SHARED_DATA / "fm2" / "dev.jsonl.gz").is_file():
        pytest.skip("real data not available")
    QuietHandler.requests.clear()
    target = tmp_path / "data"
    with serve(QuietHandler, SHARED_DATA) as url:
        paths = download("fm2", target, url, progress=True)
        assert paths == [target / "fm2" / "dev.jsonl.gz", target / "fm2" / "test.jsonl.gz"]
        assert _files(target) == ["fm2/dev.jsonl.gz", "fm2/test.jsonl.gz"]
        assert sha256_file(paths[0]) == FM2_DEV_SHA
        assert locate("fm2", "dev", target, verify=True) == paths[0]
        n = len(QuietHandler.requests)
        assert download("fm2", target, url.rstrip("/"), progress=False) == paths
        assert len(QuietHandler.requests) == n  # present and verified: not fetched again


def test_download_from_file_url_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (SHARED_DATA / "wice" / "claim_dev.jsonl.gz").is_file():
        pytest.skip("real data not available")
    monkeypatch.setenv("DGN_DATA_URL", SHARED_DATA.as_uri())
    monkeypatch.setenv("DGN_DATA_DIR", str(tmp_path))
    assert download("wice", progress=False) == [tmp_path / "wice" / "claim_dev.jsonl.gz"]


def test_download_needs_a_base_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DGN_DATA_URL", raising=False)
    with pytest.raises(DgnUserError, match="--base-url.*DGN_DATA_URL"):
        download("fm2", tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_download_rejects_a_base_url_that_is_not_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DgnUserError, match="'mirror/data' is not a URL: it must start with http://"):
        download("fm2", tmp_path, "mirror/data", progress=False)
    monkeypatch.setenv("DGN_DATA_URL", "ftp://example.org/data")
    with pytest.raises(DgnUserError, match="'ftp://example.org/data' is not a URL.*DGN_DATA_URL"):
        download("fm2", tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_download_corrupted_file_leaves_nothing(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "fm2").mkdir(parents=True)
    (mirror / "fm2" / "dev.jsonl.gz").write_bytes(b"\x1f\x8b corrupted" * 1000)
    target = tmp_path / "data"
    with serve(QuietHandler, mirror) as url:
        with pytest.raises(DgnUserError) as info:
            download("fm2", target, url, splits=["dev"], progress=False)
    msg = str(info.value)
    actual = sha256_file(mirror / "fm2" / "dev.jsonl.gz")
    assert "checksum mismatch for fm2/dev.jsonl.gz" in msg
    assert f"expected sha256 {FM2_DEV_SHA}, got {actual}" in msg
    assert _files(target) == []


def test_download_truncated_response_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "data"
    with serve(TruncatingHandler) as url:
        with pytest.raises(DgnUserError, match="truncated download of fm2/dev.jsonl.gz"):
            download("fm2", target, url, splits=["dev"], progress=False)
    assert _files(target) == []


def test_download_http_and_connection_errors(tmp_path: Path) -> None:
    target = tmp_path / "data"
    empty = tmp_path / "empty"
    empty.mkdir()
    with serve(QuietHandler, empty) as url:
        with pytest.raises(DgnUserError, match="HTTP 404"):
            download("wice", target, url, progress=False)
    with pytest.raises(DgnUserError, match="cannot download fm2/dev.jsonl.gz"):
        download("fm2", target, url, progress=False, timeout=5)  # server is gone
    with pytest.raises(DgnUserError, match="has no split"):
        download("fm2", target, url, splits=["train"], progress=False)
    assert _files(target) == []
