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
    "DATA_DIR_ENV",
    "DATA_URL_ENV",
]

DATA_DIR_ENV = "DGN_DATA_DIR"
DATA_URL_ENV = "DGN_DATA_URL"
_CHUNK = 1 << 16
_SCHEMES = ("http", "https", "file")
FEVER_URL = "https://fever.ai/dataset/fever.html"


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
    """

    name: str
    files: dict[str, DataFile]
    format: str
    description: str
    instructions: str = field(default="")


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
    "fever": DatasetSpec(
        name="fever",
        files={
            "train": DataFile("fever/train.jsonl", None, None),
            "paper_dev": DataFile("fever/paper_dev.jsonl", None, None),
            "paper_test": DataFile("fever/paper_test.jsonl", None, None),
        },
        format="fever",
        description=(
            "FEVER 1.0 (Thorne et al., NAACL 2018): 185K claims over a 5.4M-page Wikipedia "
            "dump; not shipped with dgn."
        ),
        instructions=(
            f"FEVER is not redistributed by dgn: download train.jsonl, paper_dev.jsonl, "
            f"paper_test.jsonl and wiki-pages.zip from {FEVER_URL}"
        ),
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
        verify: Also check the file's SHA-256.

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
    if verify and file.sha256 is not None:
        actual = sha256_file(path)
        if actual != file.sha256:
            raise DgnUserError(
                f"{path} has sha256 {actual}, expected {file.sha256}: replace it, "
                f"or run `dgn data download {name} --data-dir {root}`"
            )
    return path


def _resolve_dir(explicit: str | os.PathLike[str] | None) -> Path:
    # locate() and download() take a parameter named data_dir, which hides the function.
    return data_dir(explicit)


def _base_url(base_url: str | None) -> str:
    base = base_url or os.environ.get(DATA_URL_ENV)
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
) -> list[Path]:
    """Fetch a dataset's files from a mirror into the data directory, checksum-verified.

    Each file downloads to a temporary file next to its target; only a file whose size
    and SHA-256 match is renamed into place, so an interrupted, truncated or corrupted
    download never leaves a file that looks complete. Files already present with the
    right checksum are not fetched again.

    Args:
        name: Dataset name.
        data_dir: Target data directory; ``None`` resolves it with :func:`data_dir`.
        base_url: Mirror URL (``http(s)://`` or ``file://``); ``None`` uses
            ``$DGN_DATA_URL``. File ``fm2/dev.jsonl.gz`` is fetched from
            ``<base_url>/fm2/dev.jsonl.gz``.
        progress: Show a tqdm progress bar per file (on stderr).
        splits: Only these splits (default: all).
        timeout: Socket timeout in seconds.

    Returns:
        The paths of the dataset's files, in split order.

    Raises:
        DgnUserError: Unknown dataset or split, a dataset dgn cannot download (FEVER),
            no base URL or one that is not an ``http(s)://`` or ``file://`` URL, an
            HTTP or connection error, a truncated download or a checksum mismatch
            (naming the file and both checksums).
    """
    spec = get_dataset(name)
    chosen = list(spec.files) if splits is None else splits
    files = [_get_file(spec, s) for s in chosen]
    if any(f.url is None or f.sha256 is None for f in files):
        raise DgnUserError(f"dataset {name!r} cannot be downloaded by dgn: {spec.instructions}")
    base = _base_url(base_url)
    root = _resolve_dir(data_dir)
    paths: list[Path] = []
    for file in files:
        assert file.url is not None and file.sha256 is not None, "checked above"
        target = root / file.relative_path
        if target.is_file() and sha256_file(target) == file.sha256:
            paths.append(target)
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DgnUserError(f"cannot create {target.parent}: {exc.strerror or exc}") from exc
        url = urllib.parse.urljoin(base, urllib.parse.quote(file.url))
        _fetch(
            url, target, file.sha256, label=file.relative_path, progress=progress, timeout=timeout
        )
        paths.append(target)
    return paths


def _fetch(
    url: str, target: Path, expected: str, *, label: str, progress: bool, timeout: float
) -> None:
    """Download ``url`` to ``target`` atomically, checking length and SHA-256."""
    from tqdm import tqdm

    digest = hashlib.sha256()
    received = 0
    try:
        with (
            atomic_write(target, "wb") as out,
            urllib.request.urlopen(url, timeout=timeout) as resp,
        ):
            length = resp.headers.get("Content-Length")
            total = int(length) if length is not None and length.strip().isdigit() else None
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=label,
                disable=not bars(progress),
                leave=False,
            ) as bar:
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            if total is not None and received != total:
                raise DgnUserError(
                    f"truncated download of {label} from {url}: got {received} of {total} "
                    f"bytes; nothing was written, try again"
                )
            actual = digest.hexdigest()
            if actual != expected:
                raise DgnUserError(
                    f"checksum mismatch for {label} from {url}: expected sha256 {expected}, "
                    f"got {actual}; nothing was written"
                )
    except urllib.error.HTTPError as exc:
        raise DgnUserError(
            f"cannot download {label} from {url}: HTTP {exc.code} {exc.reason}"
        ) from exc
    except http.client.IncompleteRead as exc:
        raise DgnUserError(
            f"truncated download of {label} from {url}: got {received + len(exc.partial)} bytes, "
            f"{exc.expected} more expected; nothing was written, try again"
        ) from exc
    except urllib.error.URLError as exc:
        raise DgnUserError(f"cannot download {label} from {url}: {exc.reason}") from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if isinstance(exc, DgnUserError):
            raise
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise DgnUserError(f"cannot download {label} from {url}: {reason}") from exc
