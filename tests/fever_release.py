"""A generated FEVER 1.0 release of realistic shape, and a local server for it.

:func:`write_release` writes what the FEVER site serves: ``train.jsonl``,
``paper_dev.jsonl``, ``paper_test.jsonl`` and ``wiki-pages.zip`` (members
``wiki-pages/wiki-NNN.jsonl``: one page a line, ``lines`` as tab-separated
``index<TAB>sentence<TAB>anchors...`` rows, PTB escapes such as ``-LRB-`` and ``-COLON-``
in titles and text, empty sentences, the dump's empty-title page). Claims are SUPPORTS,
REFUTES and NOT ENOUGH INFO; evidence groups hold one or two sentences from one or two
pages; pages are shared between claims; some groups name pages absent from the dump (some
claims only such pages). Claim text reuses words of one gold sentence, so lexical
rankers have signal.

:class:`RangeHandler` serves a directory over HTTP with byte ranges (``Accept-Ranges``,
206 answers), and can cut the first response for a file after some bytes, to exercise
resuming.
"""

from __future__ import annotations

import http.server
import json
import random
import zipfile
from pathlib import Path
from typing import Any

ESCAPES = ("-LRB-", "-RRB-", "-COLON-", "-LSB-", "-RSB-")


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 4)))


def write_release(directory: Path, seed: int = 0, pages: int = 48, claims: tuple[int, int, int] = (160, 60, 20)) -> dict[str, Any]:
    """Write the release's four files into ``directory``; return what was generated.

    Returns:
        ``{"pages": {title: {line: sentence (escaped)}}, "missing": [titles], "files":
        {name: path}}``.
    """
    rng = random.Random(seed)
    vocab = sorted({_word(rng) for _ in range(900)})
    directory.mkdir(parents=True, exist_ok=True)
    wiki: dict[str, dict[int, str]] = {}
    rows_of: dict[str, str] = {}
    for p in range(pages):
        title = "_".join(rng.choice(vocab).capitalize() for _ in range(rng.randint(1, 2)))
        if p % 5 == 0:
            title += f"_-LRB-{rng.choice(vocab)}-RRB-"
        title += f"_{p}"
        lines: dict[int, str] = {}
        rows = []
        for i in range(rng.randint(6, 14)):
            if rng.random() < 0.12:
                rows.append(f"{i}\t")  # an empty sentence, as in the dump
                continue
            words = [rng.choice(vocab) for _ in range(rng.randint(6, 16))]
            if rng.random() < 0.3:
                words.insert(rng.randint(0, len(words)), f"-LRB- {rng.choice(vocab)} -RRB-")
            if rng.random() < 0.1:
                words.insert(1, "-COLON-")
            sentence = " ".join(words) + " ."
            anchors = "\t".join(rng.choice(vocab).capitalize() for _ in range(rng.randint(0, 2)))
            rows.append(f"{i}\t{sentence}" + (f"\t{anchors}" if anchors else ""))
            lines[i] = sentence
        wiki[title] = lines
        rows_of[title] = "\n".join(rows)
    titles = list(wiki)
    missing = [f"Missing_Page_{i}_-LRB-gone-RRB-" for i in range(4)]

    wiki_dir = directory / "wiki-pages-src"
    wiki_dir.mkdir(exist_ok=True)
    per_file = (len(titles) + 2) // 3
    for f in range(3):
        with open(wiki_dir / f"wiki-{f + 1:03d}.jsonl", "w", encoding="utf-8") as fh:
            if f == 0:
                fh.write(json.dumps({"id": "", "text": "", "lines": ""}) + "\n")
            for title in titles[f * per_file:(f + 1) * per_file]:
                text = " ".join(wiki[title][i] for i in sorted(wiki[title]))
                fh.write(json.dumps({"id": title, "text": text, "lines": rows_of[title]}) + "\n")
                if rng.random() < 0.1:
                    fh.write("\n")  # a blank line between pages
    with zipfile.ZipFile(directory / "wiki-pages.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("wiki-pages/", "")
        for f in sorted(wiki_dir.iterdir()):
            archive.write(f, f"wiki-pages/{f.name}")

    next_id = [100000]
    annotation = [90000]

    def sentence_of(page: str) -> tuple[str, int]:
        return page, rng.choice(sorted(wiki[page]))

    def claim(kind: str) -> dict[str, Any]:
        next_id[0] += rng.randint(1, 40)
        annotation[0] += 1
        if kind == "NOT ENOUGH INFO":
            text = " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 10))).capitalize() + "."
            return {"id": next_id[0], "verifiable": "NOT VERIFIABLE", "label": kind, "claim": text,
                    "evidence": [[[annotation[0], None, None, None]]]}
        groups = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            pages_in = rng.sample(titles, rng.choice((1, 1, 2)))
            group = [sentence_of(pages_in[0])]
            if len(pages_in) == 2 or rng.random() < 0.3:
                group.append(sentence_of(pages_in[-1]))
            groups.append(list(dict.fromkeys(group)))
        roll = rng.random()
        if roll < 0.08:  # only pages absent from the dump: not converted, scored empty
            groups = [[(rng.choice(missing), rng.randint(0, 5))]]
        elif roll < 0.2:  # one group names an absent page, the others are usable
            groups.append([(rng.choice(missing), rng.randint(0, 5))])
        page, line = groups[0][0]
        source = wiki.get(page, {}).get(line) or " ".join(rng.choice(vocab) for _ in range(8))
        words = [w for w in source.split() if w.isalpha()]
        kept = rng.sample(words, max(1, min(len(words), rng.randint(3, 6))))
        text = " ".join(kept + [rng.choice(vocab) for _ in range(rng.randint(1, 4))]).capitalize() + "."
        evidence = []
        for group in groups:
            evidence.append([[annotation[0], rng.randint(1, 10**6), pg, ln] for pg, ln in group])
        return {"id": next_id[0], "verifiable": "VERIFIABLE", "label": kind, "claim": text,
                "evidence": evidence}

    files = {}
    for name, count in zip(("train", "paper_dev", "paper_test"), claims, strict=True):
        kinds = [rng.choice(("SUPPORTS", "SUPPORTS", "REFUTES", "NOT ENOUGH INFO")) for _ in range(count)]
        path = directory / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for kind in kinds:
                fh.write(json.dumps(claim(kind)) + "\n")
        files[name] = path
    files["wiki"] = directory / "wiki-pages.zip"
    return {"pages": wiki, "missing": missing, "files": files}


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory with byte ranges; ``cut`` ends the first answer for a path early.

    Set ``RangeHandler.cut = {"/wiki-pages.zip": 3000}`` to send only the first 3,000 bytes
    of that file's first full answer and drop the connection (later requests are whole).
    ``RangeHandler.log`` collects ``(path, Range header)`` of every request.
    """

    cut: dict[str, int] = {}
    log: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        RangeHandler.log.append((self.path, self.headers.get("Range")))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        start = 0
        spec = self.headers.get("Range")
        if spec and spec.startswith("bytes=") and spec.endswith("-"):
            start = int(spec[len("bytes="):-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        limit = RangeHandler.cut.pop(self.path, None)
        if limit is not None:
            self.wfile.write(body[:limit])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass

