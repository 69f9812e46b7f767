"""The work behind the `asyncsim` commands and the main job (`asyncsim.lab.figures`): load a
profile, predict a scenario, run it on the real engine, compare the two, draw its figure, and
table the errors over many scenarios.

A scenario is one of `asyncsim.lab.scenarios`, with the parameters `Scenario.kwargs` gives. The
profile "here" is this machine's, measured by `realexec.calibrate` (cached after the first run);
"book" and "book-zh" come from the chapters' own tables; "ideal" has constant costs; anything
else must be a profile JSON file, or `load_profile` stops with a message naming `--profile`. A
prediction gets at least as many GPUs as its scenario uses, whatever the profile says. GPU
scenarios run for real only where a real GPU (not numba's CUDA simulator) is present
(`gpu_here`); elsewhere `compare_one` predicts them only, and its callers say so. A compared run
is measured after a thrown-away warm-up run, with Python's garbage collector paused, and (but
with `quick`) in the machine's usual state, out of its slow spells (`_gate`).

Units: traces hold seconds and bytes; the tables print milliseconds (MiB for memory) and each
error relative to the measured value, in percent.
"""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

from asyncsim.lab.compare import Row, compare, table
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate


def gpu_here() -> bool:
    """A real GPU (not the simulator) can run the GPU scenarios on this machine."""
    from realexec.gpu import kernels as gpu

    return gpu.available() and not gpu.on_simulator()


def simulator_on() -> bool:
    import os

    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def load_profile(spec: str, workers: int | None = None, sets: dict | None = None,
                 quick: bool = False) -> Profile:
    """A preset name, "here" (calibrated on this machine, cached) or a JSON file."""
    if spec == "here":
        from realexec.calibration.calibrate import calibrate

        profile = calibrate(workers=workers, quick=quick)
    elif spec in ("ideal", "book", "book-zh"):
        profile = Profile.preset(spec)
    elif Path(spec).is_file():
        profile = Profile.load(spec)
    else:
        raise SystemExit(f"asyncsim: --profile must be ideal, book, book-zh, here or a JSON "
                         f"file; {spec!r} is none of these")
    return profile.replace(**sets) if sets else profile


def predict_one(sc, profile, params, mode="async", max_inflight=None):
    gpus = max(profile.gpus, sc.num_gpus)
    if gpus != profile.gpus:  # the book/ideal GPU count may be smaller than the scenario's
        profile = profile.replace(gpus=gpus)
    return simulate(sc.record(**params), profile, mode=mode, max_inflight=max_inflight)


def run_one(sc, params, workers=None, mode="async", max_inflight=None, warmup=False,
            warmup_params=None, gate=None):
    """Run on the real engine. With `warmup`, a first run is thrown away (kernels compiled,
    buffers cached, pages faulted in: costs the model does not have), with `warmup_params` if
    given, and the measured one runs with Python's garbage collector paused, as `timeit` does;
    with a `gate` (`realexec.calibration.steady.Gate`), it starts in the machine's usual state
    and is taken again if a slow spell began during it."""
    import gc

    import realexec

    # the scenarios name nd.gpu(i) themselves; arrays made without a ctx stay on the CPU
    def once(kwargs=params):
        return realexec.run(sc.workload, workers=workers, mode=mode,
                            max_inflight=max_inflight, **kwargs)

    if not warmup:
        return once().from_first_event()
    once(warmup_params or params)

    def measured():
        gc.collect()
        gc.disable()
        try:
            return once().from_first_event()
        finally:
            gc.enable()

    return gate.run(measured) if gate is not None else measured()


def book_rows(sc, trace) -> str:
    """The book's numbers beside the prediction `trace`, and how the book's run differs from
    the workload (`sc.book_note`); "" for a scenario with neither."""
    parts = []
    if sc.book:
        rows = [Row(label, trace.regions.get(label, 0.0), secs, "s")
                for label, secs in sc.book.items()]
        parts.append(table(rows, f"against the book ({sc.book_source}); 'measured' is the "
                                 f"book's number"))
    if sc.book_note:
        parts.append(textwrap.fill(f"the book's run: {sc.book_note}", 100,
                                   subsequent_indent="  "))
    return "\n".join(parts)


WARMUP_BATCHES = 10


def _warmup_params(sc, profile, params, pred):
    """The parameters of the thrown-away first run: a training loop's first WARMUP_BATCHES
    batches when they reach the whole loop's peak memory (a blocker per batch: the same buffers
    serve every batch, so the short run compiles and caches all that the long one uses);
    otherwise, e.g. a loop whose backlog grows, the measured parameters themselves."""
    if params.get("num_batches", 0) <= WARMUP_BATCHES:
        return params
    short = {**params, "num_batches": WARMUP_BATCHES}
    peak = predict_one(sc, profile, short).peak_bytes("cpu")
    return short if peak >= 0.95 * pred.peak_bytes("cpu") else params


def compare_one(sc, profile, out: Path | None, quick: bool, workers=None, progress=None,
                formats=("png", "svg"), draw: bool = True):
    """Predict and run one scenario; write its traces and (with `draw`) its figure in `formats`;
    return (rows, pred, meas)."""
    params = sc.kwargs(quick, measure=True)
    # what the workload prints (its `print(z)` blockers) would bury the tables
    with contextlib.redirect_stdout(io.StringIO()):
        pred = predict_one(sc, profile, params)
        if sc.num_gpus and not gpu_here():
            meas = None
        else:
            warm = _warmup_params(sc, profile, params, pred)
            meas = run_one(sc, params, workers=workers, warmup=True, warmup_params=warm,
                           gate=None if quick else _gate(profile))
    rows = [] if meas is None else [r for r in compare(pred, meas)
                                    if r.name not in sc.measured_only]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "traces").mkdir(exist_ok=True)
        pred.to_chrome(out / "traces" / f"{sc.name}.predicted.json")
        if meas is not None:
            meas.to_chrome(out / "traces" / f"{sc.name}.measured.json")
        if draw:
            draw_one(sc, profile, pred, meas, out, formats)
    return rows, pred, meas


def _gate(profile):
    """A measured run in the state of the machine that `profile` was calibrated on (`Gate.of`).
    Patient for about ten seconds, then it measures the machine as it is: a teacher's one
    command must end."""
    from realexec.calibration.steady import Gate

    return Gate.of(profile, patience=30)


def draw_one(sc, profile, pred, meas, out: Path, formats=("png", "svg")) -> list[Path]:
    """The scenario's figure: predicted and measured timelines side by side, or the prediction
    alone (`meas` None: no GPU here); the paths written."""
    from asyncsim.lab import plot

    if meas is not None:
        fig = plot.side_by_side(pred, meas, title=f"{sc.name} (d2l {sc.section.split()[0]})")
    else:
        fig = plot.timeline(pred, title=f"{sc.name} (predicted only: no GPU here, "
                                        f"profile {profile.name})")
    return plot.save(fig, out / sc.name, formats)


def summary_table(summary) -> str:
    """One line per scenario: total and peak-memory error; median and max of the total error."""
    import numpy as np

    lines = [f"{'scenario':<26s} {'total pred':>12s} {'total meas':>12s} {'error':>8s} "
             f"{'peak error':>10s}"]
    errs = []
    for name, rows in summary:
        total = next(r for r in rows if r.name == "total")
        peak = next((r for r in rows if r.name == "peak cpu"), None)
        errs.append(abs(total.error))
        peak_err = f"{peak.error:+10.1%}" if peak and peak.error == peak.error else "       n/a"
        lines.append(f"{name:<26s} {total.predicted * 1e3:10.2f}ms {total.measured * 1e3:10.2f}ms "
                     f"{total.error:+8.1%} {peak_err}")
    lines.append(f"total-time error over {len(errs)} scenarios: median {np.median(errs):.1%}, "
                 f"max {np.max(errs):.1%}")
    return "\n".join(lines)
