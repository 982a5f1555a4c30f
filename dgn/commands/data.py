"""``dgn data``: convert source files to selection JSONL, download and list datasets."""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dgn.commands import add_common_data_dir

__all__ = ["register"]

# The adapter names, for --help only; dgn.data.convert validates the real list.
_FORMATS = "fever, fm2, wice, climate-fever, eraser (ERASER's FEVER and MultiRC), scifact, entailmentbank"


def register(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    parser = sub.add_parser(
        "data",
        help="convert, download and list datasets",
        description="Convert source files to selection JSONL, download and list datasets.",
    )
    data_sub = parser.add_subparsers(dest="data_command", metavar="ACTION", parser_class=type(parser))
    data_sub.required = True

    conv = data_sub.add_parser(
        "convert",
        help=(
            "convert a source file (FEVER, FM2, WiCE, CLIMATE-FEVER, ERASER, SciFact, "
            "EntailmentBank) to selection JSONL"
        ),
        description=(
            "Convert a source file to selection JSONL (candidates shuffled with --seed) and "
            "print what was written and skipped."
        ),
    )
    conv.add_argument("--format", required=True, help=f"source format: {_FORMATS}")
    conv.add_argument("--input", required=True, help="source file (plain or .gz)")
    conv.add_argument(
        "--wiki", default=None,
        help="FEVER only: the wiki-pages directory, the release's wiki-pages.zip or a built wiki.sqlite",
    )
    conv.add_argument(
        "--docs", default=None,
        help=(
            "eraser: the documents (a docs/ directory or docs.jsonl[.gz]); scifact: the corpus "
            "(corpus.jsonl[.gz]); default: found beside --input"
        ),
    )
    conv.add_argument(
        "--strict", action="store_true",
        help="eraser only: a line whose document is missing is an error (default: skipped and counted)",
    )
    conv.add_argument("--output", required=True, help="selection JSONL to write (.gz: gzip)")
    conv.add_argument(
        "--seed", type=types["nonnegative_int"], default=None,
        help="candidate shuffle seed (default: the library's, 0)",
    )
    conv.set_defaults(handler=_convert)

    down = data_sub.add_parser(
        "download",
        help="fetch a registered dataset (FEVER from its publisher, others from a mirror), checksum-verified",
        description=(
            "Fetch a registered dataset's files into the data directory: FEVER 1.0 (train, "
            "paper_dev, paper_test, wiki-pages.zip) from the FEVER site, the others from a mirror "
            "(--base-url or $DGN_DATA_URL: an http(s):// server or file:// directory with the "
            "registry's layout). Every file is checked against its SHA-256 (FEVER publishes none: "
            "the first complete download's is recorded in fever/SHA256SUMS and checked later); an "
            "interrupted download resumes when run again. FEVER's wiki-pages.zip is then ingested "
            "into the page store fever/wiki.sqlite (resumable too)."
        ),
    )
    down.add_argument("name", help="dataset name (see `dgn data list`)")
    add_common_data_dir(down)
    down.add_argument(
        "--base-url", default=None,
        help="mirror URL (default: the FEVER site for fever, $DGN_DATA_URL for the others)",
    )
    down.add_argument(
        "--split", action="append", default=None, dest="splits",
        help="only this split (repeatable; default: all)",
    )
    down.add_argument(
        "--no-ingest", action="store_true",
        help="FEVER: do not build the page store from wiki-pages.zip",
    )
    down.add_argument("--quiet", action="store_true", help="no progress bars")
    down.set_defaults(handler=_download)

    lst = data_sub.add_parser(
        "list",
        help="registered datasets, their files and whether they are present",
        description="List the registered datasets, their files and whether each is present.",
    )
    add_common_data_dir(lst)
    lst.add_argument("--verify", action="store_true", help="also check the SHA-256 of present files")
    lst.set_defaults(handler=_list)


def _convert(args: argparse.Namespace) -> int:
    from dgn.commands._common import require_file, require_output_file
    from dgn.data import ADAPTERS, convert
    from dgn.data.adapters import DOCS_KEYWORD
    from dgn.data.registry import FEVER_URL
    from dgn.errors import DgnUserError

    if args.format not in ADAPTERS:
        raise DgnUserError(
            f"--format {args.format}: unknown data format; known formats: {', '.join(sorted(ADAPTERS))}"
        )
    if args.format == "fever" and args.wiki is None:
        raise DgnUserError(
            "--format fever needs --wiki: the wiki-pages directory of the FEVER Wikipedia "
            f"dump or a wiki.sqlite built from it (get the dump from {FEVER_URL})"
        )
    if args.wiki is not None:
        if args.format != "fever":
            raise DgnUserError(f"--wiki is only used with --format fever, not {args.format!r}")
        if not Path(args.wiki).exists():
            raise DgnUserError(
                f"--wiki {args.wiki}: not found (expected the wiki-pages directory, wiki-pages.zip "
                f"or a built wiki.sqlite)"
            )
    if args.docs is not None:
        if args.format not in DOCS_KEYWORD:
            raise DgnUserError(
                f"--docs is only used with --format eraser or scifact, not {args.format!r}"
            )
        if not Path(args.docs).exists():
            what = "docs/ directory or docs.jsonl" if args.format == "eraser" else "corpus.jsonl"
            raise DgnUserError(f"--docs {args.docs}: not found (expected the {what})")
    if args.strict and args.format != "eraser":
        raise DgnUserError(f"--strict is only used with --format eraser, not {args.format!r}")
    require_file(args.input, "--input")
    require_output_file(args.output, "--output")
    kwargs: dict[str, Any] = {}
    if args.seed is not None:
        kwargs["seed"] = args.seed
    report = convert(
        args.format, args.input, args.output, wiki=args.wiki, docs=args.docs, strict=args.strict, **kwargs
    )
    print(f"{args.output}: {report.summary()}")
    return 0


def _placement_hint(name: str, root: os.PathLike[str] | str, splits: list[str] | None) -> str:
    """Where each missing file of ``name`` must go, in one sentence."""
    from dgn.data.registry import get_dataset

    spec = get_dataset(name)
    chosen = list(spec.files) if splits is None else splits
    parts = []
    for split in chosen:
        file = spec.files.get(split)
        if file is None:
            continue
        target = Path(root) / file.relative_path
        if not target.is_file():
            checksum = f" (sha256 {file.sha256})" if file.sha256 else ""
            parts.append(f"{Path(file.relative_path).name}{checksum} at {target}")
    return "; ".join(parts)


def _check_data_dir(root: Path, given: str | None) -> None:
    """The data directory may be missing (downloads create it) but not be a file."""
    from dgn.data.registry import DATA_DIR_ENV
    from dgn.errors import DgnUserError

    if root.exists() and not root.is_dir():
        if given:
            where = f"--data-dir {given}"
        elif os.environ.get(DATA_DIR_ENV):
            where = f"${DATA_DIR_ENV} {root}"
        else:
            where = f"data directory {root}"
        raise DgnUserError(f"{where}: not a directory")


def _download(args: argparse.Namespace) -> int:
    from dgn.data import DATASETS, data_dir, download
    from dgn.data.registry import DATA_URL_ENV, get_dataset
    from dgn.errors import DgnUserError

    spec = get_dataset(args.name)
    root = data_dir(args.data_dir)
    _check_data_dir(root, args.data_dir)
    if args.base_url is not None and urllib.parse.urlsplit(args.base_url).scheme.lower() not in (
        "http", "https", "file"
    ):
        raise DgnUserError(
            f"--base-url {args.base_url}: not a URL; it must start with http://, https:// or file://"
        )
    if args.splits is not None:
        unknown = [s for s in args.splits if s not in spec.files]
        if unknown:
            raise DgnUserError(
                f"--split {unknown[0]}: dataset {args.name!r} has no split {unknown[0]!r}; "
                f"splits: {', '.join(spec.files)}"
            )
    downloadable = all(f.url is not None for f in spec.files.values())
    if not downloadable:
        chosen = list(spec.files) if args.splits is None else args.splits
        where = ", ".join(str(root / spec.files[s].relative_path) for s in chosen)
        raise DgnUserError(
            f"dataset {args.name!r} cannot be downloaded by dgn: {spec.instructions}; put the "
            f"files at {where}"
        )
    if spec.default_url is None and not (args.base_url or os.environ.get(DATA_URL_ENV)):
        hint = _placement_hint(args.name, root, args.splits)
        if hint:
            raise DgnUserError(
                f"no download location for {args.name!r}: put {hint}; or pass --base-url URL "
                f"(or set ${DATA_URL_ENV}) naming a mirror that holds <dataset>/<file>"
            )
    try:
        paths = download(
            args.name, root, args.base_url, progress=not args.quiet, splits=args.splits,
            ingest=not args.no_ingest,
        )
    except DgnUserError as exc:
        hint = _placement_hint(args.name, root, args.splits) if args.name in DATASETS else ""
        if hint and downloadable:
            raise DgnUserError(f"{exc}; or put {hint} by hand") from None
        raise
    for path in paths:
        print(path)
    return 0


def _list(args: argparse.Namespace) -> int:
    from dgn.data import DATASETS, data_dir
    from dgn.data.registry import recorded_sha256, sha256_file

    root = data_dir(args.data_dir)
    _check_data_dir(root, args.data_dir)
    print(f"data directory: {root}")
    for name, spec in DATASETS.items():
        how = "downloadable" if all(f.url for f in spec.files.values()) else "not downloadable"
        print(f"{name} (format {spec.format}, {how})")
        for split, file in spec.files.items():
            path = root / file.relative_path
            if not path.is_file():
                state = "missing"
            elif args.verify and (expected := file.sha256 or recorded_sha256(root, file)) is not None:
                state = "present, ok" if sha256_file(path) == expected else "present, CHECKSUM MISMATCH"
            else:
                state = "present"
            print(f"  {split:<11} {file.relative_path:<40} {state}")
    return 0
