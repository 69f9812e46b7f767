"""The main job: every scenario predicted, run, compared and drawn, plus the book's own figures.

`make_all(out)` (the `asyncsim figures` command) writes into `out`:
- `<scenario>.png/.svg`: predicted and measured timelines on one time axis with memory curves, for
  every scenario this machine can run (GPU ones are predicted only where there is no GPU);
- `traces/`: Chrome trace JSON of every prediction and measurement (open in Perfetto);
- `closed_forms.png/.svg`: the chapter's t1/t2/t3 formulas against the simulator, both regimes;
- `dependencies.png/.svg`: the dependency graph of `z = x * y + 2` (Fig. 12.2.2), drawn from the
  recorded Program;
- `REPORT.md`: the comparison tables, the summary of errors, and the book's numbers against the
  "book" profile's predictions, with the machine and profile that produced them.

Predictions use the profile measured by `realexec.calibrate` on this machine (never the runs they
are compared with); the book tables use the "book" preset.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from asyncsim.lab import plot, scenarios
from asyncsim.lab.compare import Row, table
from asyncsim.model import analytic
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.record import record


def closed_forms_figure(t1: float = 10e-6, t3: float = 20e-6):
    """Total time of n ops, sync and async, in both regimes: formulas as lines, model as dots."""
    fig = plot.new_figure(10, 4)
    axes = fig.subplots(1, 2, sharey=False)
    ns = np.array([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])
    for ax, t2, regime in ((axes[0], 50e-6, "backend-bound: t2 > t1"),
                           (axes[1], 4e-6, "frontend-bound: t1 > t2")):
        # the loop's one `ones` is free, so the n `x + 1` ops are exactly the formula's n ops
        profile = Profile.ideal(t1=t1, t2=t2, t3=t3, workers=1).replace(
            **{"cpu:ones.latency": 0.0, "frontend:ones.latency": 0.0})
        ax.plot(ns, analytic.sync_time(ns, t1, t2, t3) * 1e3, "-", label="n (t1 + t2 + t3)")
        ax.plot(ns, analytic.book_async_time(ns, t1, t2, t3) * 1e3, "--",
                label="t1 + n t2 + t3 (book)")
        ax.plot(ns, analytic.async_time(ns, t1, t2, t3) * 1e3, ":",
                label="max(t1 + n t2, n t1 + t2) + t3")
        for sync, marker in ((True, "o"), (False, "s")):
            pts = [simulate(record(_loop, n=int(n), sync=sync), profile).duration * 1e3
                   for n in ns]
            ax.plot(ns, pts, marker, mfc="none",
                    label=f"simulated, {'wait_to_read each' if sync else 'one waitall'}")
        ax.set(xscale="log", yscale="log", xlabel="n ops", ylabel="total time (ms)")
        ax.set_title(f"{regime}\n(t1={t1 * 1e6:g} us, t2={t2 * 1e6:g} us, t3={t3 * 1e6:g} us)",
                     fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    return fig


def _loop(nd, n=10, sync=True):
    x = nd.ones((1, 2))
    for _ in range(n):
        y = x + 1
        if sync:
            y.wait_to_read()
    if not sync:
        nd.waitall()


def book_report(profile: Profile) -> str:
    """Every number the chapters printed, beside the book profile's prediction of it."""
    parts = []
    for name, sc in scenarios.SCENARIOS.items():
        if not sc.book:
            continue
        prof = profile if profile.gpus >= sc.num_gpus else profile.replace(gpus=sc.num_gpus)
        trace = simulate(sc.record(), prof)
        rows = [Row(label, trace.regions.get(label, 0.0), secs, "s")
                for label, secs in sc.book.items() if label not in sc.measured_only]
        if rows:
            parts.append(table(rows, f"{name} ({sc.book_source}), profile {prof.name}: "
                                     f"'measured' is the book's number"))
    return "\n\n".join(parts)


def make_all(out: Path, quick: bool = False, workers: int | None = None) -> None:
    from tqdm import tqdm

    from asyncsim.lab.cli import compare_one, gpu_here, summary_table
    from realexec.calibration.calibrate import calibrate

    out.mkdir(parents=True, exist_ok=True)
    here = calibrate(workers=workers, quick=quick)
    book = Profile.preset("book")
    report = [f"# asyncsim figures\n\nprofile: {here.name} ({here.meta.get('machine', '?')}); "
              f"sizes: {'quick' if quick else 'default'}; GPU here: {gpu_here()}\n"]
    summary = []
    for name in tqdm(scenarios.names(), desc="scenarios", file=sys.stderr):
        sc = scenarios.get(name)
        prof = here if (not sc.num_gpus or gpu_here()) else book.replace(gpus=sc.num_gpus)
        rows, pred, meas = compare_one(sc, prof, out, quick, workers)
        if meas is None:
            report.append(f"## {name}\n\npredicted only (no GPU here), profile {prof.name}: "
                          f"{pred.duration * 1e3:.3f} ms\n")
            continue
        summary.append((name, rows))
        report.append(f"## {name}\n\n{sc.description}\n\n```\n{table(rows)}\n```\n")
    plot.save(closed_forms_figure(), out / "closed_forms")
    dep = scenarios.get("dependency")
    plot.save(plot.dependency_graph(dep.record(quick=True)), out / "dependencies")
    text = summary_table(summary) if summary else "no scenario ran"
    report.insert(1, f"## Summary\n\n```\n{text}\n```\n")
    report.append(f"## The book's numbers\n\n```\n{book_report(book)}\n```\n")
    (out / "REPORT.md").write_text("\n".join(report))
    print(text)
    print(f"\nwrote {out}/REPORT.md, {len(list(out.glob('*.png')))} figures (PNG + SVG) "
          f"and traces/ for Perfetto")
