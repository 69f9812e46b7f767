"""The table of every number the book printed, beside the model's prediction of it.

`rows()` walks `asyncsim.model.printed.PRINTED` (the 61 numbers of the seeds) and, for each one
whose scenario is registered and declares its region, predicts it with the scenario's book preset
(`Scenario.book_profile`, one per book machine): a time is the region's simulated seconds; an
"increased memory" line is the predicted change of resident memory across the region
(`asyncsim.model.rss`, with the preset's `rss_keep`), shown beside the peak the book's `ps` never
saw. A row is "fitted" when the preset declares it (`Profile.fitted`): it is reproduced by
construction and tests nothing; every other covered row is a prediction, except an "increased
memory" line smaller than the preset's `rss_keep`: the model holds resident memory anywhere from
the live bytes to the live bytes plus that many freed bytes that the allocator keeps (16 MiB,
glibc's trim threshold once an 8 MiB buffer has been freed), so a change under it is the
allocator's state (which freed buffers glibc keeps, trims or maps anew), which the model leaves
open. Such a row is "explained": its prediction and its error in MB are shown, not judged in
percent (a relative error of a number near zero says nothing). Rows whose scenario does not exist
yet say what they wait for (training, data parallelism); plain-NumPy lines cannot be predicted by
a model of the engine at all.

`summary(rows)` counts them, `format_table(rows)` is the text `benchmarks/book.py` prints and the
report includes. Error = (predicted - printed) / |printed|. Units: the printed ones (s, MB).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from asyncsim.lab import scenarios
from asyncsim.model import rss
from asyncsim.model.book import MACHINES
from asyncsim.model.printed import PRINTED, RSS, Printed
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate

MB = 1024e3  # the book's: `ps`'s KiB / 1e3 (asyncsim.model.printed)
WITHIN = 0.10  # the target for predicted rows
WORST = 0.25  # none predicted worse than this
_WAITS = (("8.1", "training"), ("8.2.4", "training"), ("8.4", "data parallelism"),
          ("8.5", "data parallelism"))


@dataclass(frozen=True)
class BookRow:
    """One printed number and what the model makes of it."""

    printed: Printed
    preset: str  # the preset of the machine that printed it
    status: str  # "fitted", "predicted", "explained", "not yet covered (needs ...)",
    # "not predictable (...)"
    predicted: float | None = None  # in the printed unit
    peak: float | None = None  # for a memory row: the predicted peak RSS increase during the loop
    keep: float | None = None  # for a memory row: the preset's rss_keep, in the printed unit

    @property
    def covered(self) -> bool:
        return self.predicted is not None

    @property
    def part(self) -> str:
        """"training" (8.1, 8.2.4), "data parallelism" (8.4, 8.5) or "" (the chapters before)."""
        return _waiting(self.printed)

    @property
    def error(self) -> float | None:
        if self.predicted is None:
            return None
        return (self.predicted - self.printed.value) / abs(self.printed.value)


def _waiting(row: Printed) -> str:
    for prefix, what in _WAITS:
        if row.section.startswith(prefix):
            return what
    return ""


def _covers(row: Printed) -> bool:
    sc = scenarios.SCENARIOS.get(row.scenario)
    if sc is None:
        return False
    return (row.over if row.label == RSS else row.label) in sc.regions


def rows(only: set[str] | None = None) -> list[BookRow]:
    """Every printed number with its preset, status and prediction (scenarios in `only`, if
    given; the others are listed without a prediction)."""
    traces: dict[str, tuple] = {}
    out = []
    for row in PRINTED:
        sc = scenarios.SCENARIOS.get(row.scenario)
        preset = sc.book_profile if sc is not None else MACHINES[row.machine]
        if row.needs == "numpy":
            out.append(BookRow(row, preset, "not predictable (plain NumPy on the frontend)"))
            continue
        if not _covers(row):
            needs = _waiting(row) or f"scenario {row.scenario}"
            out.append(BookRow(row, preset, f"not yet covered (needs {needs})"))
            continue
        if only is not None and row.scenario not in only:
            out.append(BookRow(row, preset, "not computed here"))
            continue
        if row.scenario not in traces:
            with contextlib.redirect_stdout(io.StringIO()):  # the book's own prints
                profile = Profile.preset(preset)
                if profile.gpus < sc.num_gpus:
                    profile = profile.replace(gpus=sc.num_gpus)
                # a run too long to simulate whole has its estimate: regions, no trace
                trace = (sc.predict_regions(profile) if sc.estimate is not None
                         else simulate(sc.record(), profile))
            traces[row.scenario] = (trace, profile)
        trace, profile = traces[row.scenario]
        status = "fitted" if row.key in profile.fitted else "predicted"
        if isinstance(trace, dict):
            out.append(BookRow(row, preset, status, trace[row.label]))
        elif row.label == RSS:
            memory = rss.across(trace, row.over, profile.rss_keep)
            if status == "predicted" and abs(row.value) * MB < profile.rss_keep:
                status = "explained"  # the allocator's state (module docstring)
            out.append(BookRow(row, preset, status, memory.increase / MB,
                               (memory.peak - memory.before) / MB, profile.rss_keep / MB))
        else:
            out.append(BookRow(row, preset, status, trace.regions[row.label]))
    return out


def summary(table: list[BookRow], unit: str | None = None, part: str | None = None) -> dict:
    """Counts over `table` (rows of one `unit`, "s" or "MB", and of one `part` of the chapters,
    if given): printed, covered, fitted, explained, predicted, predicted within 10% and within
    25%, and the worst predicted error."""
    picked = [r for r in table if (unit is None or r.printed.unit == unit)
              and (part is None or r.part == part)]
    predicted = [r for r in picked if r.status == "predicted"]
    errors = [abs(r.error) for r in predicted]
    return {"printed": len(picked), "covered": sum(r.covered for r in picked),
            "fitted": sum(r.status == "fitted" for r in picked),
            "explained": sum(r.status == "explained" for r in picked),
            "predicted": len(predicted),
            "within_10": sum(e <= WITHIN for e in errors),
            "within_25": sum(e <= WORST for e in errors),
            "worst": max(errors, default=0.0)}


def _value(x: float, unit: str) -> str:
    return f"{x:+.3f} MB" if unit == "MB" else f"{x:.4f} s"


def format_table(table: list[BookRow]) -> str:
    """The rows as text, one per printed number, then the counts."""
    cells = [("seed", "section", "printed", "scenario / region", "preset", "predicted", "error",
              "status")]
    for r in table:
        p = r.printed
        where = f"{p.scenario} / " + (f"RSS across '{p.over}'" if p.label == RSS else p.label)
        status = r.status
        if r.peak is not None:  # a change of a few MB: its error in MB says more than in %
            status += (f" ({r.predicted - p.value:+.3f} MB off, the allocator keeping up to "
                       f"{r.keep:.1f} MB; peak during the loop {r.peak:+.1f} MB)")
        cells.append((p.seed, p.section, p.text, where, r.preset,
                       _value(r.predicted, p.unit) if r.covered else "-",
                       f"{r.error * 100:+.1f}%" if r.covered else "-", status))
    widths = [max(len(row[k]) for row in cells) for k in range(7)]
    lines = []
    for row in cells:
        left = [row[k].ljust(widths[k]) for k in range(5)]
        right = [row[k].rjust(widths[k]) for k in (5, 6)]
        lines.append(" ".join(left + right) + "  " + row[7])
    lines.append("")
    groups = ((None, None, "every printed number"), ("s", None, "  times"),
              ("MB", None, "  memory"), (None, "", "12.2, 8.2.1-8.2.3, 8.3, PyTorch page"),
              ("s", "", "  times"), ("MB", "", "  memory"), (None, "training", "8.1 and 8.2.4"),
              (None, "data parallelism", "8.4 and 8.5"))
    for unit, part, name in groups:
        c = summary(table, unit, part)
        lines.append(f"{name:38s} {c['printed']:3d} printed, {c['covered']:3d} covered, "
                     f"{c['fitted']:3d} fitted, {c['explained']:2d} explained, "
                     f"{c['predicted']:3d} predicted: "
                     f"{c['within_10']:3d} within 10%, {c['within_25']:3d} within 25%, "
                     f"worst {c['worst'] * 100:.1f}%")
    return "\n".join(lines)


def report() -> str:
    """The table for REPORT.md: every printed number, its preset and the model's prediction."""
    return format_table(rows())


def memory_figure(names=("memory_barrier", "memory_no_barrier")):
    """12.2.4's loops on the book's machine: live bytes and predicted resident memory over time,
    the RSS the book's `ps` read before and after the loop (its "increased memory") and the peak
    during the loop that `ps` never saw."""
    from asyncsim.lab import plot

    fig = plot.new_figure(11, 4)
    axes = fig.subplots(1, len(names))
    for ax, name in zip(axes, names, strict=True):
        sc = scenarios.get(name)
        profile = Profile.preset(sc.book_profile)
        trace = simulate(sc.record(), profile)
        times, resident = rss.rss_curve(trace, profile.rss_keep)
        live_t, live = trace.memory_curve("cpu")
        memory = rss.across(trace, "time per epoch", profile.rss_keep)
        ax.step(live_t, live / MB, where="post", label="live bytes", lw=1)
        ax.step(times, [r / MB for r in resident], where="post", ls="--", lw=1,
                label=f"resident (live + up to {profile.rss_keep / 2**20:.0f} MiB cached)")
        (_, start, end), = [m for m in trace.marks if m[0] == "time per epoch"]
        ax.axvspan(start, end, color="#DDDDDD", alpha=0.5, lw=0)
        ax.plot([start, end], [memory.before / MB, memory.after / MB], "ko")
        printed = [r.value for r in PRINTED if r.key == (name, RSS)]
        book_says = f" (book {printed[0]:+.1f} MB)" if printed else ""
        ax.set_title(f"{name}: peak {(memory.peak - memory.before) / MB:+.0f} MB during the "
                     f"loop,\n{memory.increase / MB:+.1f} MB after it{book_says}", fontsize=9)
        ax.set(xlabel="seconds (predicted, preset " + profile.name + ")",
               ylabel="MB above the process's base")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


def section(out) -> str:
    """The report's section on the book's numbers; draws `memory_figure` into `out`."""
    from asyncsim.lab import plot

    names = ("memory_barrier", "memory_no_barrier")
    plot.save(memory_figure(names), out / "book_memory")
    notes = "\n".join(f"- `{name}`: {scenarios.get(name).book_note}" for name in names)
    return (f"## The book's numbers\n\nEvery number the seeds printed, each predicted with its "
            f"book machine's preset; 'fitted' rows are the ones the preset was derived from, "
            f"'explained' ones changes of resident memory smaller than the freed memory the "
            f"allocator may keep (the preset's rss_keep), which the model leaves open.\n\n"
            f"```\n{report()}\n```\n\n12.2.4's loops: the memory the book's `ps` read after "
            f"the loop beside the peak during it: ![memory](book_memory.png)\n\n{notes}\n")


__all__ = ["BookRow", "format_table", "memory_figure", "report", "rows", "section", "summary"]
