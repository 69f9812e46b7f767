"""The main job: every scenario predicted, run, compared and drawn on this machine.

`make_all(out)` (the `asyncsim figures` command) writes into `out`, a folder the user names, since
what it holds is this machine's:
- `<scenario>.png/.svg` (PNG only with `quick`): predicted and measured timelines on one time
  axis with memory curves, for every scenario this machine can run (GPU ones are predicted only
  where there is no GPU);
- `traces/`: Chrome trace JSON of every prediction and measurement (open in Perfetto);
- `REPORT.md`: the comparison tables, the summary of errors, and the book's numbers against the
  book presets' predictions, with the machine and profile that produced them.

The textbook's own figures (the dependency graph, the closed forms, ...) are drawn from the book
profiles and are the same everywhere: `asyncsim.lab.book_figures`, tracked in figures/.
Predictions use the profile measured by `realexec.calibrate` on this machine (never the runs they
are compared with). Progress goes to stderr: calibration's steps, then one step per scenario,
named, then the figures, drawn once every run is over (on every core: `draw_all`) while the
book's numbers are predicted. Real runs use `asyncsim.lab.scenarios.MEASURE`'s sizes where the
book's would take too long or too much memory here.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from asyncsim.lab import booktable, scenarios
from asyncsim.lab.compare import table
from asyncsim.lab.jobs import compare_one, draw_one, gpu_here, summary_table
from asyncsim.model.profile import Profile


def _book_preset(sc) -> Profile:
    """The preset of the book machine that ran the scenario, with GPUs enough for it."""
    profile = Profile.preset(sc.book_profile or "book")
    return profile if profile.gpus >= sc.num_gpus else profile.replace(gpus=sc.num_gpus)


def make_all(out: Path, quick: bool = False, workers: int | None = None) -> None:
    from tqdm import tqdm

    from realexec.calibration.calibrate import calibrate

    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    here = calibrate(workers=workers, quick=quick)
    report = [f"# asyncsim figures\n\nprofile: {here.name} ({here.meta.get('machine', '?')}); "
              f"sizes: {'quick' if quick else 'default'}; GPU here: {gpu_here()}\n\n"
              f"The textbook's own figures, drawn from the book profiles, are the same on every "
              f"machine: `asyncsim book-figures` (tracked in the repository's figures/).\n"]
    summary, jobs = [], []
    # a quick run is a smoke test: PNG only (an SVG doubles the time spent drawing)
    formats = ("png",) if quick else ("png", "svg")
    progress = tqdm(scenarios.names(), desc="scenarios", file=sys.stderr)
    for name in progress:
        progress.set_postfix_str(name)
        sc = scenarios.get(name)
        prof = here if (not sc.num_gpus or gpu_here()) else _book_preset(sc)
        rows, pred, meas = compare_one(sc, prof, out, quick, workers, draw=False)
        jobs.append((sc, prof, pred, meas, out, formats))
        if meas is None:
            report.append(f"## {name}\n\npredicted only (no GPU here), profile {prof.name}: "
                          f"{pred.duration * 1e3:.3f} ms\n")
            continue
        summary.append((name, rows))
        report.append(f"## {name}\n\n{sc.description}\n\n```\n{table(rows)}\n```\n")
    text = summary_table(summary) if summary else "no scenario ran"
    report.insert(1, f"## Summary\n\n```\n{text}\n```\n")

    def book_numbers() -> str:
        if quick:  # a smoke run: the book's numbers do not depend on this machine
            return ("## The book's numbers\n\nLeft out with --quick: they are predicted from "
                    "the book presets, the same on every machine (`asyncsim figures` without "
                    "--quick includes them).\n")
        return booktable.section(out)  # every printed number, on its machine's preset

    report.append(draw_all(jobs, then=book_numbers))
    (out / "REPORT.md").write_text("\n".join(report))
    print(text)
    print(f"\nwrote {out}/REPORT.md, {len(list(out.glob('*.png')))} figures "
          f"({'PNG' if quick else 'PNG + SVG'}) "
          f"and traces/ for Perfetto in {time.perf_counter() - started:.0f} s")


_JOBS: list = []  # the figures forked drawing processes draw: inherited, never pickled


def _draw(index: int) -> None:
    draw_one(*_JOBS[index])


def draw_all(jobs: list, then=None):
    """Draw every job's figure (`asyncsim.lab.jobs.draw_one`'s arguments) once the runs are
    over, since a figure drawn beside a run would slow what it measures: in forked processes,
    one per core, on Linux (one by one elsewhere, or on one core), while `then()` runs here; its
    value. Drawing is matplotlib's Python, some 0.5 s a figure: two cores halve it."""
    from tqdm import tqdm

    global _JOBS
    cores = os.cpu_count() or 1
    if cores < 2 or sys.platform != "linux":
        for job in tqdm(jobs, desc="figures", file=sys.stderr):
            draw_one(*job)
        return then() if then is not None else None
    _JOBS = jobs
    pool = ProcessPoolExecutor(max_workers=cores, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = [pool.submit(_draw, i) for i in range(len(jobs))]
        value = then() if then is not None else None
        for future in tqdm(as_completed(futures), total=len(futures), desc="figures",
                           file=sys.stderr):
            future.result()
        return value
    finally:
        pool.shutdown(cancel_futures=True)
        _JOBS = []
