"""Generate selection JSONL of FEVER's size and shape for the memory and time measurement.

Claims of 9 words, 40 candidate sentences of 12 to 40 words, 1 or 2 gold sentences (in
one gold set) that share 4 words with the claim; words drawn from the word-vector file's
vocabulary so that the ``wordvec`` features see known words.

    python benchmarks/fever_size_data.py --claims 145000 --seed 1 --output work/fever-size-train.jsonl
    python benchmarks/fever_size_data.py --claims 10000 --seed 2 --output work/fever-size-dev.jsonl
    /usr/bin/time -v dgn train --train work/fever-size-train.jsonl --dev work/fever-size-dev.jsonl \\
        --output runs/fever-size --features wordvec --vectors VECTORS --epochs 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

DEFAULT_VECTORS = "../shared/data/word-vectors-spacy-md/en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz"


def vocabulary(path: str, size: int = 20_000) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    words: list[str] = []
    with opener(path, "rt", encoding="utf-8") as fh:
        next(fh)  # the "count dim" header
        for line in fh:
            word = line.split(" ", 1)[0]
            if word.isalpha():
                words.append(word)
            if len(words) >= size:
                break
    return words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=145_000)
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vectors", default=DEFAULT_VECTORS)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    words = vocabulary(args.vectors)
    rng = random.Random(args.seed)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for i in range(args.claims):
            topic = rng.sample(words, 9)
            candidates = [" ".join(rng.choices(words, k=rng.randint(12, 40))) for _ in range(args.candidates)]
            gold = rng.sample(range(args.candidates), rng.choice([1, 1, 1, 2]))
            for g in gold:
                tokens = candidates[g].split()
                tokens[:4] = rng.sample(topic, 4)
                candidates[g] = " ".join(tokens)
            record = {"id": f"s{args.seed}-{i}", "query": " ".join(topic), "candidates": candidates,
                      "gold": [sorted(gold)]}
            fh.write(json.dumps(record) + "\n")
    print(f"{out}: {args.claims:,} claims x {args.candidates} candidates")


if __name__ == "__main__":
    main()
