"""Every number the book printed, beside the model's prediction on that book machine's preset.

    python benchmarks/book.py [--figure DIR]

One row per printed line of the seeds (61): seed file and section, the line as printed, the
scenario and region that model it, the preset of the machine that printed it, the predicted
value, the error ((predicted - printed) / |printed|) and whether the preset was fitted to that
number (then it tests nothing) or predicts it. "increased memory" rows are the predicted change
of resident memory across the loop, shown beside the peak during it. Then the counts: how many
are covered, fitted, and predicted within 10% and 25%, for all rows and per part of the chapters.
Deterministic (the model only, on the book presets); `--figure DIR` also draws 12.2.4's memory.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from asyncsim.lab import booktable, plot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", type=Path, help="also draw book_memory.png/.svg here")
    args = parser.parse_args()
    start = time.perf_counter()
    table = booktable.rows()
    print(booktable.format_table(table))
    print(f"\n(predicted in {time.perf_counter() - start:.1f} s)")
    if args.figure is not None:
        args.figure.mkdir(parents=True, exist_ok=True)
        plot.save(booktable.memory_figure(), args.figure / "book_memory")
        print(f"wrote {args.figure / 'book_memory'}.png and .svg")


if __name__ == "__main__":
    main()
