"""Registry of the evaluation datasets: where their files live, their checksums, downloads.

A dataset is a plain :class:`DatasetSpec` in :data:`DATASETS`. Its files sit under a data
directory (``--data-dir``, else ``$DGN_DATA_DIR``, else ``./data``) at
``<data_dir>/<relative_path>``, e.g. ``data/fm2/dev.jsonl.gz``, byte-identical to the
registered SHA-256 (of the file as stored, i.e. of the ``.gz``).

dgn names no download server: :func:`download` fetches ``<base_url>/<relative path>``
from a mirror you give (``base_url=`` / ``--base-url`` or ``$DGN_DATA_URL``), for example
an internal HTTP server or a ``file://`` directory holding the same layout. Every file is
checked against its SHA-256 before it appears under its final name.

The full FEVER release is not redistributed: :func:`locate` and :func:`download` explain
where to get it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from dgn._progress import bars
from dgn.data.io import atomic_write
from dgn.errors import DgnUserError

__all__ = [
    "DataFile",
    "DatasetSpec",
    "DATASETS",
    "get_dataset",
    "data_dir",
    "locate",
    "download",
    "sha256_file",
    "recorded_sha256",
    "fever_store_path",
    "DATA_DIR_ENV",
    "DATA_URL_ENV",
]

DATA_DIR_ENV = "DGN_DATA_DIR"
DATA_URL_ENV = "DGN_DATA_URL"
_CHUNK = 1 << 16
_SCHEMES = ("http", "https", "file")
FEVER_URL = "https://fever.ai/dataset/fever.html"
#: Where the FEVER site serves the 1.0 release's files.
FEVER_DOWNLOAD_URL = "https://fever.ai/download/fever/"
#: The file, per dataset directory, that records the sha256 of files no checksum was
#: published for (``sha256sum`` format), written after their first complete download.
SUMS_FILE = "SHA256SUMS"


class DataFile(NamedTuple):
    """One file of a dataset split.

    Attributes:
        relative_path: Location under the data directory (``"fm2/dev.jsonl.gz"``).
        sha256: SHA-256 of the file as stored, or ``None`` when dgn does not ship it.
        url: Location relative to the download base URL, or ``None`` if not downloadable.
    """

    relative_path: str
    sha256: str | None
    url: str | None


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset.

    Attributes:
        name: Registry key, e.g. ``"fm2"``.
        files: Split name -> :class:`DataFile`.
        format: The adapter that reads it (a key of :data:`dgn.data.adapters.ADAPTERS`).
        description: Origin, license and use, in a few lines.
        instructions: For datasets dgn cannot fetch: how to obtain them.
        default_url: Where :func:`download` fetches from when no mirror is given (the
            publisher's own address), or ``None``: a mirror is needed.
    """

    name: str
    files: dict[str, DataFile]
    format: str
    description: str
    instructions: str = field(default="")
    default_url: str | None = None


#: Dataset name -> where its files come from and their recorded SHA-256 (:func:`locate`, :func:`download`).
DATASETS: dict[str, DatasetSpec] = {
    "fm2": DatasetSpec(
        name="fm2",
        files={
            "dev": DataFile(
                "fm2/dev.jsonl.gz",
                "9b057b9e93abbbcdef2f06e0281f33db2a32bb99dda9c63fffb2b3378e5fd96c",
                "fm2/dev.jsonl.gz",
            ),
            "test": DataFile(
                "fm2/test.jsonl.gz",
                "f2d3936ffe38945246e426d50d4a8e336aeb4364b61cf65bdcbe2750eac9d3c9",
                "fm2/test.jsonl.gz",
            ),
        },
        format="fm2",
        description=(
            "Fool Me Twice (Eisenschlos et al., NAACL 2021): Wikipedia claims with ~10 "
            "sentences of the claim's page and 1-2 gold sentences (dev 1,169, test 1,380). "
            "google-research/fool-me-twice, Apache-2.0; text from Wikipedia (CC BY-SA)."
        ),
    ),
    "wice": DatasetSpec(
        name="wice",
        files={
            "dev": DataFile(
                "wice/claim_dev.jsonl.gz",
                "e17339567498840f90cdb7d344d08c128443aefe7474542812f6daedb43ed349",
                "wice/claim_dev.jsonl.gz",
            ),
        },
        format="wice",
        description=(
            "WiCE (Kamoi et al., EMNLP 2023), claim level: a Wikipedia sentence and all "
            "sentences of its cited article (~120), alternative supporting-sentence sets "
            "(dev 349). ryokamoi/wice, annotations ODC-BY 1.0."
        ),
    ),
    "climate-fever": DatasetSpec(
        name="climate-fever",
        files={
            "test": DataFile(
                "climate-fever/climate-fever.jsonl.gz",
                "f892498526b7284ccc65a8d66bc37a688baa541f2ace26e74a5fe6ffac3844e7",
                "climate-fever/climate-fever.jsonl.gz",
            ),
        },
        format="climate-fever",
        description=(
            "CLIMATE-FEVER (Diggelmann et al. 2020): 1,535 climate claims, 5 Wikipedia "
            "sentences each with annotator votes (graded relevance). "
            "tdiggelm/climate-fever-dataset; license not stated (research use, cite)."
        ),
    ),
    "eraser-fever": DatasetSpec(
        name="eraser-fever",
        files={
            "val": DataFile(
                "eraser/fever/val.jsonl.gz",
                "ec49979dd878213631014278c0899ba7afb0d41dd01657d211d743be905923ec",
                "eraser/fever/val.jsonl.gz",
            ),
            "test": DataFile(
                "eraser/fever/test.jsonl.gz",
                "131664e6b02195b781de9b4b2294bbaf1691aed64a29e50c7382d35d02745e00",
                "eraser/fever/test.jsonl.gz",
            ),
            "docs": DataFile(
                "eraser/fever/docs.jsonl.gz",
                "06a1e4f796bbc88418264a1c450cc8f85628b2d2229b47aa67e3a8400e878eec",
                "eraser/fever/docs.jsonl.gz",
            ),
        },
        format="eraser",
        description=(
            "FEVER in ERASER's release (DeYoung et al., ACL 2020): claims with the sentences of "
            "their gold Wikipedia page (val 6,122 lines, test 6,111; 4,072 documents, 77 val and "
            "59 test lines lack theirs). A copy from GitHub shubham991999/expredAI3; FEVER "
            "CC BY-SA 3.0."
        ),
    ),
    "eraser-multirc": DatasetSpec(
        name="eraser-multirc",
        files={
            "val": DataFile(
                "eraser/multirc/val.jsonl.gz",
                "e493b2bfcd03a67599e6205699ea46d444fda7a24609066b4b0ecc85c0ed42a6",
                "eraser/multirc/val.jsonl.gz",
            ),
            "docs": DataFile(
                "eraser/multirc/docs.jsonl.gz",
                "91765d1c5a0e9db4c6788b2980a60afd9cbfa16b37422834c8ab9c791f7e7ca0",
                "eraser/multirc/docs.jsonl.gz",
            ),
        },
        format="eraser",
        description=(
            "MultiRC in ERASER's release: 631 val questions (3,214 answer-option lines) over "
            "705 passages, every question needing several sentences. A copy from GitHub "
            "shubham991999/expredAI3; CogComp MultiRC, research use."
        ),
    ),
    "scifact": DatasetSpec(
        name="scifact",
        files={
            "train": DataFile(
                "scifact/claims_train.jsonl.gz",
                "3bfe3b6c70ad9087df9b4994ce53ddb9dfbdc0323382cee18e86bab26d5dbe73",
                "scifact/claims_train.jsonl.gz",
            ),
            "corpus": DataFile(
                "scifact/corpus.jsonl.gz",
                "a97033275534dd706419ea6e803deae36eb1e9114340a830db4cd1b35ea7d5e4",
                "scifact/corpus.jsonl.gz",
            ),
        },
        format="scifact",
        description=(
            "SciFact (Wadden et al., EMNLP 2020): 809 train claims (505 with evidence, 564 "
            "claim-abstract pairs) and a 5,183-abstract corpus; rationale sentences as gold. "
            "Rebuilt in the release's layout from a Hugging Face CSV export (GitHub "
            "sumithra-p-v/claimverifier); CC BY-NC 2.0."
        ),
    ),
    "entailmentbank": DatasetSpec(
        name="entailmentbank",
        files={
            "train": DataFile(
                "entailmentbank/task2_train.jsonl.gz",
                "33e650186eda77dfb81da44db0af8124400351e9a0cb1dddebf61b04ce04805f",
                "entailmentbank/task2_train.jsonl.gz",
            ),
            "dev": DataFile(
                "entailmentbank/task2_dev.jsonl.gz",
                "161b741286e56726c654d9adefad2bdee171273db75038f9f7fd5d95c5e4f56d",
                "entailmentbank/task2_dev.jsonl.gz",
            ),
        },
        format="entailmentbank",
        description=(
            "EntailmentBank task 2 (Dalvi et al., EMNLP 2021): a hypothesis, 25 facts and the "
            "proof's leaves (2 to 17) as gold (train 1,313, dev 187). allenai/entailment_bank, "
            "Apache-2.0."
        ),
    ),
    "fever": DatasetSpec(
        name="fever",
        files={
            "train": DataFile("fever/train.jsonl", None, "train.jsonl"),
            "paper_dev": DataFile("fever/paper_dev.jsonl", None, "paper_dev.jsonl"),
            "paper_test": DataFile("fever/paper_test.jsonl", None, "paper_test.jsonl"),
            "wiki": DataFile("fever/wiki-pages.zip", None, "wiki-pages.zip"),
        },
        format="fever",
        description=(
            "FEVER 1.0 (Thorne et al., NAACL 2018): 185K claims over a 5.4M-page Wikipedia "
            "dump, from the publisher (no checksum published: the first complete download's "
            "sha256 is recorded in fever/SHA256SUMS). Claims CC BY-SA 3.0, Wikipedia text "
            "CC BY-SA 3.0."
        ),
        instructions=(
            f"get train.jsonl, paper_dev.jsonl, paper_test.jsonl and wiki-pages.zip from "
            f"{FEVER_URL} (`dgn data download fever` fetches them)"
        ),
        default_url=FEVER_DOWNLOAD_URL,
    ),
}


def get_dataset(name: str) -> DatasetSpec:
    """Look up a dataset by name.

    Raises:
        DgnUserError: Unknown name (the message lists the known ones).
    """
    try:
        return DATASETS[name]
    except KeyError:
        known = ", ".join(sorted(DATASETS))
        raise DgnUserError(f"unknown dataset {name!r}; known datasets: {known}") from None


def _get_file(spec: DatasetSpec, split: str) -> DataFile:
    try:
        return spec.files[split]
    except KeyError:
        splits = ", ".join(spec.files)
        raise DgnUserError(
            f"dataset {spec.name!r} has no split {split!r}; splits: {splits}"
        ) from None


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the data directory: ``explicit``, else ``$DGN_DATA_DIR``, else ``./data``.

    Args:
        explicit: A ``--data-dir`` value, if given.

    Returns:
        The directory as an absolute path (it need not exist).
    """
    if explicit is not None and str(explicit) != "":
        chosen = Path(explicit)
    elif os.environ.get(DATA_DIR_ENV):
        chosen = Path(os.environ[DATA_DIR_ENV])
    else:
        chosen = Path("data")
    return chosen.expanduser().absolute()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def locate(
    name: str,
    split: str,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    verify: bool = False,
) -> Path:
    """Path of a dataset split's file, or a one-line instruction to put it there.

    Args:
        name: Dataset name (a key of :data:`DATASETS`).
        split: Split name (``"dev"``, ``"test"``, ...).
        data_dir: The data directory; ``None`` resolves it with :func:`data_dir`.
        verify: Also check the file's SHA-256: the registered one, or for files
            without a published checksum (FEVER) the one recorded in the dataset
            directory's ``SHA256SUMS`` at their first download.

    Returns:
        The existing file.

    Raises:
        DgnUserError: Unknown dataset or split, the file is missing (the message says
            which file to put where, or how to download it), or ``verify`` fails.

    Example:
        >>> import tempfile
        >>> try:
        ...     locate("wice", "dev", tempfile.mkdtemp())
        ... except Exception as e:
        ...     print(str(e).split(":")[0])
        dataset 'wice' split 'dev' not found
    """
    spec = get_dataset(name)
    file = _get_file(spec, split)
    root = _resolve_dir(data_dir)
    path = root / file.relative_path
    if not path.is_file():
        head = f"dataset {name!r} split {split!r} not found"
        if file.sha256 is None:
            raise DgnUserError(f"{head}: {spec.instructions} and put {path.name} at {path}")
        raise DgnUserError(
            f"{head}: put {path.name} (sha256 {file.sha256}) at {path}, "
            f"or run `dgn data download {name} --data-dir {root}`"
        )
    expected = file.sha256 or recorded_sha256(root, file)
    if verify and expected is not None:
        actual = sha256_file(path)
        if actual != expected:
            where = "" if file.sha256 else f" (recorded in {_sums_path(root, file)} at its first download)"
            raise DgnUserError(
                f"{path} has sha256 {actual}, expected {expected}{where}: replace it, "
                f"or run `dgn data download {name} --data-dir {root}`"
            )
    return path


def _sums_path(root: Path, file: DataFile) -> Path:
    return (root / file.relative_path).parent / SUMS_FILE


def recorded_sha256(root: str | os.PathLike[str], file: DataFile) -> str | None:
    """The sha256 recorded for ``file`` at its first complete download, if any.

    Args:
        root: The data directory.
        file: A registered file (its ``relative_path`` names the record's directory).

    Returns:
        The hex digest from ``<dataset dir>/SHA256SUMS``, or ``None``.

    Raises:
        DgnUserError: The record exists but a line of it is malformed (file and line named).
    """
    sums = _sums_path(Path(root), file)
    if not sums.is_file():
        return None
    name = Path(file.relative_path).name
    for n, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, listed = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise DgnUserError(f"{sums}:{n}: expected '<sha256>  <file name>', got {line!r}")
        if listed == name:
            return digest
    return None


def _record_sha256(root: Path, file: DataFile, digest: str) -> None:
    """Add or replace ``file``'s line in its dataset directory's ``SHA256SUMS`` (atomically)."""
    sums = _sums_path(root, file)
    name = Path(file.relative_path).name
    lines = []
    if sums.is_file():
        lines = [ln for ln in sums.read_text(encoding="utf-8").splitlines()
                 if ln.strip() and ln.partition("  ")[2] != name]
    lines.append(f"{digest}  {name}")
    with atomic_write(sums, "w") as fh:
        fh.write("\n".join(sorted(lines, key=lambda ln: ln.partition("  ")[2])) + "\n")


def _resolve_dir(explicit: str | os.PathLike[str] | None) -> Path:
    # locate() and download() take a parameter named data_dir, which hides the function.
    return data_dir(explicit)


def _base_url(base_url: str | None, spec: DatasetSpec) -> str:
    # $DGN_DATA_URL names a mirror of the datasets dgn registers checksums for; a dataset
    # with a publisher's address (FEVER) comes from there unless --base-url says otherwise.
    base = base_url or (spec.default_url if spec.default_url is not None else os.environ.get(DATA_URL_ENV))
    if not base:
        raise DgnUserError(
            f"no download location: pass --base-url URL (base_url=) or set ${DATA_URL_ENV} "
            f"to a server or file:// directory that holds <dataset>/<file> as in the registry"
        )
    scheme = urllib.parse.urlsplit(base).scheme.lower()
    if scheme not in _SCHEMES:
        raise DgnUserError(
            f"download location {base!r} is not a URL: it must start with "
            f"{', '.join(s + '://' for s in _SCHEMES)} (base_url= or ${DATA_URL_ENV})"
        )
    return base.rstrip("/") + "/"


def download(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    *,
    progress: bool = True,
    splits: list[str] | None = None,
    timeout: float = 60.0,
    ingest: bool = True,
) -> list[Path]:
    """Fetch a dataset's files into the data directory, checksum-verified and resumable.

    Each file downloads to ``.<name>.part`` next to its target; only a complete file whose
    SHA-256 matches is renamed into place, so an interrupted, truncated or corrupted
    download never leaves a file that looks complete. When the server accepts byte
    ranges, an interrupted download's part file is kept and the next call resumes it
    where it stopped (a server that answers a range request with the whole file starts
    it over). Files already present with the right checksum are not fetched again.

    Checksums: the registered SHA-256, or for files whose publisher gives none (FEVER)
    the SHA-256 of the first complete download, recorded in ``<dataset dir>/SHA256SUMS``;
    later downloads and ``locate(..., verify=True)`` are checked against that record.

    Args:
        name: Dataset name.
        data_dir: Target data directory; ``None`` resolves it with :func:`data_dir`.
        base_url: Mirror URL (``http(s)://`` or ``file://``); ``None`` uses
            ``$DGN_DATA_URL`` for the datasets dgn registers checksums for, and the
            publisher's address (:attr:`DatasetSpec.default_url`) for FEVER. File
            ``fm2/dev.jsonl.gz`` is fetched from ``<base_url>/fm2/dev.jsonl.gz``, FEVER's
            ``train.jsonl`` from ``<base_url>/train.jsonl``.
        progress: Show a tqdm progress bar per file (on stderr).
        splits: Only these splits (default: all).
        timeout: Socket timeout in seconds.
        ingest: FEVER: index ``wiki-pages.zip``, once fetched, into the page store
            ``fever/wiki.sqlite`` (:meth:`dgn.data.WikiStore.build`: once, resumable).

    Returns:
        The paths of the dataset's files, in split order, then the page store's if built.

    Raises:
        DgnUserError: Unknown dataset or split, no base URL or one that is not an
            ``http(s)://`` or ``file://`` URL, an HTTP or connection error, a truncated
            download or a checksum mismatch (naming the file and both checksums).
    """
    spec = get_dataset(name)
    chosen = list(spec.files) if splits is None else splits
    files = [_get_file(spec, s) for s in chosen]
    if any(f.url is None for f in files):
        raise DgnUserError(f"dataset {name!r} cannot be downloaded by dgn: {spec.instructions}")
    base = _base_url(base_url, spec)
    root = _resolve_dir(data_dir)
    paths: list[Path] = []
    for file in files:
        assert file.url is not None, "checked above"
        target = root / file.relative_path
        expected = file.sha256 or recorded_sha256(root, file)
        if target.is_file():
            if expected is None:  # complete (downloads are atomic) but never recorded
                _record_sha256(root, file, sha256_file(target))
                paths.append(target)
                continue
            if sha256_file(target) == expected:
                paths.append(target)
                continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DgnUserError(f"cannot create {target.parent}: {exc.strerror or exc}") from exc
        url = urllib.parse.urljoin(base, urllib.parse.quote(file.url))
        recorded_in = _sums_path(root, file) if file.sha256 is None and expected is not None else None
        digest = _fetch(
            url, target, expected, label=file.relative_path, progress=progress, timeout=timeout,
            recorded_in=recorded_in,
        )
        if expected is None:
            _record_sha256(root, file, digest)
        paths.append(target)
    if ingest and spec.format == "fever" and "wiki" in chosen:
        from dgn.data.wikistore import WikiStore

        archive = root / spec.files["wiki"].relative_path
        with WikiStore.build(archive, fever_store_path(root), progress=progress) as store:
            paths.append(store.path)
    return paths


def fever_store_path(root: str | os.PathLike[str] | None = None) -> Path:
    """Where :func:`download` builds FEVER's page store: ``<data dir>/fever/wiki.sqlite``."""
    return _resolve_dir(root) / "fever" / "wiki.sqlite"


def _part_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.part")


def _validator_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def _read_validator(part: Path) -> dict[str, str]:
    try:
        data = json.loads(_validator_path(part).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes a-b/N`` -> ``(a, N)``; ``bytes */N`` -> ``(None, N)``; unknown parts None."""
    if not value or not value.strip().lower().startswith("bytes"):
        return None, None
    spec = value.strip()[5:].strip()
    span, _, size = spec.partition("/")
    first = span.partition("-")[0].strip()
    return (int(first) if first.isdigit() else None), (int(size) if size.strip().isdigit() else None)


def _fetch(
    url: str, target: Path, expected: str | None, *, label: str, progress: bool, timeout: float,
    recorded_in: Path | None = None, _restarted: bool = False,
) -> str:
    """Download ``url`` to ``target`` (via its part file), check it; return its SHA-256.

    A part file left by an interrupted transfer is resumed with ``Range`` (and ``If-Range``
    with the validator the server gave first, so a changed file is sent whole): a 206 whose
    ``Content-Range`` starts at the part's end is appended, any other answer starts over; a
    416 accepts the part only if the server's size equals it. Errors before or during a
    resumable transfer keep the part for the next run; only a restart, a checksum mismatch
    or a server without byte ranges discards it. ``recorded_in``: the record ``expected``
    was read from (FEVER's ``SHA256SUMS``), named in a mismatch.
    """
    from tqdm import tqdm

    if target.is_dir():
        raise DgnUserError(f"cannot write {target}: it is a directory")
    part = _part_path(target)
    start = part.stat().st_size if part.is_file() else 0
    validator = _read_validator(part) if start else {}
    if start and validator.get("url") not in (None, url):
        start, validator = 0, {}  # a part from another address: start over
    request = urllib.request.Request(url)
    if start:
        request.add_header("Range", f"bytes={start}-")
        if validator.get("etag") or validator.get("last_modified"):
            request.add_header("If-Range", validator.get("etag") or validator["last_modified"])
    received = 0
    resumable = bool(start)  # a kept part stays unless the server proves it useless

    def restart(why: str) -> str:
        _discard(part)
        if _restarted:
            raise DgnUserError(f"cannot download {label} from {url}: {why}")
        return _fetch(url, target, expected, label=label, progress=progress, timeout=timeout,
                      recorded_in=recorded_in, _restarted=True)

    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status = getattr(resp, "status", 200)
            resumed = False
            if start and status == 206:
                first, _ = _content_range(resp.headers.get("Content-Range"))
                if first != start:
                    return restart(f"the server resumed at byte {first}, not {start}")
                resumed = True
            if not resumed:
                start = 0
            resumable = resumed or resp.headers.get("Accept-Ranges", "").strip().lower() == "bytes"
            if not resumed:
                tag = {"url": url, "etag": resp.headers.get("ETag") or "",
                       "last_modified": resp.headers.get("Last-Modified") or ""}
                with atomic_write(_validator_path(part), "w") as fh:
                    json.dump({k: v for k, v in tag.items() if v}, fh)
            length = resp.headers.get("Content-Length")
            remaining = int(length) if length is not None and length.strip().isdigit() else None
            total = None if remaining is None else start + remaining
            with (
                open(part, "ab" if resumed else "wb") as out,
                tqdm(
                    total=total, initial=start, unit="B", unit_scale=True, desc=label,
                    disable=not bars(progress), leave=False,
                ) as bar,
            ):
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            if remaining is not None and received != remaining:
                raise http.client.IncompleteRead(b"", remaining - received)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and start:
            _, size = _content_range(exc.headers.get("Content-Range") if exc.headers else None)
            if size != start:  # the part is not the server's whole file
                return restart(f"HTTP 416 for a {start}-byte part of a {size}-byte file")
        else:
            _discard(part, keep=resumable)
            raise DgnUserError(f"cannot download {label} from {url}: HTTP {exc.code} {exc.reason}") from exc
    except http.client.IncompleteRead as exc:
        got = start + received + len(exc.partial)
        if resumable:
            raise DgnUserError(
                f"interrupted download of {label} from {url} after {got} bytes; the part is kept "
                f"in {part}: run the command again to resume"
            ) from exc
        _discard(part)
        raise DgnUserError(
            f"truncated download of {label} from {url}: got {got} bytes, {exc.expected} more "
            f"expected; nothing was written, try again"
        ) from exc
    except urllib.error.URLError as exc:
        _discard(part, keep=resumable)
        kept = f"; the part is kept in {part}: run the command again to resume" if resumable else ""
        raise DgnUserError(f"cannot download {label} from {url}: {exc.reason}{kept}") from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        _discard(part, keep=resumable)
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise DgnUserError(f"cannot download {label} from {url}: {reason}") from exc
    except BaseException:
        _discard(part, keep=resumable)
        raise
    actual = sha256_file(part)
    if expected is not None and actual != expected:
        _discard(part)
        record = "" if recorded_in is None else (
            f" (the sha256 recorded in {recorded_in} at the first download; if the publisher "
            f"changed the file, delete its line there to accept the new one)"
        )
        raise DgnUserError(
            f"checksum mismatch for {label} from {url}: expected sha256 {expected}, "
            f"got {actual}; nothing was written{record}"
        )
    with open(part, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(part, target)
    _validator_path(part).unlink(missing_ok=True)
    return actual


def _discard(part: Path, keep: bool = False) -> None:
    if not keep:
        part.unlink(missing_ok=True)
        _validator_path(part).unlink(missing_ok=True)
