"""Ingestion rate of the SQLite wiki page store on generated pages in FEVER's ``wiki-pages``
format, and the time it implies for the full dump.

The FEVER 1.0 dump has 5,416,537 pages in 109 files of about 50,000 pages (Thorne et
al., 2018). This script writes ``--files`` files of ``--pages-per-file`` generated pages
in that layout (one JSON object a line: ``id`` with ``-LRB-`` style escapes and
underscores, ``text``, and ``lines``: tab-separated ``index<TAB>sentence<TAB>links...``
rows, with empty lines as in the dump; the sentence count, lengths and link counts drawn
to resemble the dump's), builds the store with :meth:`dgn.data.WikiStore.build`, and
reports pages per second, the store's size and the estimate for 5,416,537 pages; with
``--zip``, also from the same pages in a ``wiki-pages.zip`` archive read in place (as
``dgn data download fever`` ingests the release).

    python benchmarks/wiki_ingest.py --files 4 --pages-per-file 50000 --zip
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

FULL_DUMP_PAGES = 5_416_537
WORDS = ("the of and in a to was is for on as by with he at from his an were are which film "
         "album football player born american united states river city county team season").split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 30))]
    if rng.random() < 0.2:
        words.insert(rng.randint(0, len(words)), "-LRB- " + rng.choice(WORDS) + " -RRB-")
    return " ".join(words) + " ."


def write_dump(directory: Path, files: int, pages_per_file: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for f in range(files):
        with open(directory / f"wiki-{f + 1:03d}.jsonl", "w", encoding="utf-8") as fh:
            for _ in range(pages_per_file):
                title = "_".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(1, 3)))
                if rng.random() < 0.1:
                    title += "_-LRB-" + rng.choice(WORDS) + "-RRB-"
                title += f"_{written}"
                rows, sentences = [], []
                for i in range(rng.randint(1, 14)):
                    if rng.random() < 0.1:
                        rows.append(f"{i}\t")  # empty line, as in the dump
                        continue
                    s = _sentence(rng)
                    links = "\t".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(0, 3)))
                    rows.append(f"{i}\t{s}" + (f"\t{links}" if links else ""))
                    sentences.append(s)
                page = {"id": title, "text": " ".join(sentences), "lines": "\n".join(rows)}
                fh.write(json.dumps(page) + "\n")
                written += 1
    return written


def main() -> None:
    from dgn.data import WikiStore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--pages-per-file", type=int, default=50_000)
    parser.add_argument("--workdir", default=None, help="where to write the dump (default: a temporary directory)")
    parser.add_argument("--zip", action="store_true",
                        help="also ingest the same pages from a wiki-pages.zip archive, as the release ships them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        wiki = Path(tmp) / "wiki-pages"
        start = time.perf_counter()
        pages = write_dump(wiki, args.files, args.pages_per_file)
        dump_mb = sum(p.stat().st_size for p in wiki.iterdir()) / 1e6
        print(f"generated {pages:,} pages in {args.files} files ({dump_mb:,.0f} MB) in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        db = Path(tmp) / "wiki.sqlite"
        with WikiStore.build(wiki, db) as store:
            seconds = time.perf_counter() - start
            assert len(store) == pages, (len(store), pages)
        rate = pages / seconds
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"ingested {pages:,} pages in {seconds:.1f} s = {rate:,.0f} pages/s ({dump_mb / seconds:,.0f} MB/s of dump); "
              f"store {db.stat().st_size / 1e6:,.0f} MB; peak RSS {peak:,.0f} MiB")
        print(f"estimate for the full dump ({FULL_DUMP_PAGES:,} pages) at this rate: "
              f"{FULL_DUMP_PAGES / rate / 60:.1f} min, with the dump's files already in the page cache "
              "(reading them from a cold disk adds their size over the disk's read rate)")
        if args.zip:
            import zipfile

            archive = Path(tmp) / "wiki-pages.zip"
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
                for f in sorted(wiki.iterdir()):
                    z.write(f, f"wiki-pages/{f.name}")
            start = time.perf_counter()
            with WikiStore.build(archive, Path(tmp) / "wiki-zip.sqlite") as store:
                seconds = time.perf_counter() - start
                assert len(store) == pages, (len(store), pages)
            rate = pages / seconds
            print(f"from wiki-pages.zip ({archive.stat().st_size / 1e6:,.0f} MB, read in place): {rate:,.0f} pages/s; "
                  f"full dump estimate {FULL_DUMP_PAGES / rate / 60:.1f} min")


if __name__ == "__main__":
    main()
