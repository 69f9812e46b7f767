"""What the notebooks show for one of the chapters' experiments, in a line of code each.

- `listing(name)`: the experiment's code, the book's listing written against `nd`;
- `against_book(name)`: the numbers the chapter printed beside the book profile's prediction of
  the same code at the book's sizes (a GPU is no obstacle: nothing runs);
- `here(name, profile, **sizes)`: this machine, at sizes small enough for a class: the prediction
  on `profile` (calibrated here) beside the engine's measurement, as a table, with both traces;
- `picture(fig)`: a Figure as an image a notebook displays (nothing here imports pyplot).

The measured run is the second of two (the first compiles kernels and fills caches, costs the
model does not have), as `asyncsim compare` does. Units: seconds in traces, tables in ms and MiB.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io

from asyncsim.lab import scenarios
from asyncsim.lab.compare import Row, compare, table
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.record import record


def listing(name: str) -> str:
    """The source of the scenario's workload."""
    return inspect.getsource(scenarios.get(name).workload)


def _quiet(run):
    with contextlib.redirect_stdout(io.StringIO()):  # the workloads' print(z) blockers
        return run()


def against_book(name: str, profile: str | None = None) -> str:
    """The chapter's printed times against the prediction of `profile` (by default the preset
    of the book machine that printed them) at the book's sizes."""
    sc = scenarios.get(name)
    prof = _quiet(lambda: Profile.preset(profile or sc.book_profile))
    if prof.gpus < sc.num_gpus:
        prof = prof.replace(gpus=sc.num_gpus)
    trace = _quiet(lambda: simulate(sc.record(), prof))
    rows = [Row(label, trace.regions.get(label, 0.0), secs, "s")
            for label, secs in sc.book.items() if label not in sc.measured_only]
    if not rows:
        return f"{name}: the chapter printed no times; predicted on profile {prof.name}:\n" + \
            "\n".join(f"  {label:<40s} {secs * 1e3:10.3f} ms"
                      for label, secs in trace.regions.items())
    return table(rows, f"{name} ({sc.book_source}): 'predicted' on profile {prof.name}, "
                       f"'measured' is the book's number")


def here(name: str, profile: Profile, workers: int | None = None, **sizes):
    """(table, predicted Trace, measured Trace) of the scenario at `sizes` on this machine."""
    import realexec

    sc = scenarios.get(name)
    if sc.num_gpus:
        raise ValueError(f"{name} needs a GPU: use against_book({name!r}) to predict it")
    params = sc.kwargs(**sizes)

    def measure():
        realexec.run(sc.workload, workers=workers, **params)  # warm-up, thrown away
        gc.collect()
        return realexec.run(sc.workload, workers=workers, **params).from_first_event()

    pred = _quiet(lambda: simulate(record(sc.workload, **params), profile))
    meas = _quiet(measure)
    rows = [r for r in compare(pred, meas) if r.name not in sc.measured_only]
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "the book's sizes"
    return table(rows, f"{name} at {shown}: predicted on profile {profile.name}, measured "
                       f"here"), pred, meas


def picture(fig):
    """A matplotlib Figure as an IPython image (PNG), for a notebook cell to display."""
    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return Image(data=buffer.getvalue(), format="png")
