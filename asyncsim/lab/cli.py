"""The `asyncsim` command: list, predict, run, compare, calibrate and draw the chapters' scenarios.

    asyncsim list
    asyncsim predict NAME [--profile ideal|book|here|FILE] [--set k=v ...] [--param k=v ...]
    asyncsim run NAME [--workers N] [--mode async|sync] [--param k=v ...]
    asyncsim compare NAME|--all [--out DIR]      # predict + run + table + figure per scenario
    asyncsim calibrate [--out FILE] [--force]
    asyncsim figures [--out DIR] [--quick]        # the main job: compare --all, the report
    asyncsim book-figures [--out DIR]             # the textbook's figures from the book profile

User mistakes are one line on stderr and exit status 2, never a traceback: a `--param` of the
wrong type names the parameter, an `--out`/`--chrome` that cannot be written is refused before
any work starts, and an array too large for this machine names the op. Ctrl-C stops the command
within a second (the engine drops its queued ops) and exits with status 130.

`--quick` uses each scenario's tiny parameters (seconds instead of minutes). The profile "here" is
this machine's, measured by `realexec.calibrate` (cached after the first run); "book" and
"book-zh" come from the chapters' own tables; "ideal" has constant costs. GPU scenarios run for
real only where a GPU is present; elsewhere they are predicted only, and say so.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import sys
from pathlib import Path

from asyncsim.lab import scenarios
from asyncsim.lab.checks import check_outputs, check_param
from asyncsim.lab.compare import Row, compare, table
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _pairs(items: list[str], what: str) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"asyncsim: {what} takes key=value, got {item!r}")
        out[key.strip()] = _literal(value.strip())
    return out


def _params(sc, items: list[str]) -> dict:
    """The `--param` values, each checked against the type of the scenario's default for it
    (an unknown name is left to `Scenario.kwargs`, which lists the known ones)."""
    given = _pairs(items, "--param")
    for key, value in given.items():
        if key in sc.params:
            check_param(key, value, sc.params[key])
    return given


def gpu_here() -> bool:
    """A real GPU (not the simulator) can run the GPU scenarios on this machine."""
    from realexec.gpu import kernels as gpu

    return gpu.available() and not gpu.on_simulator()


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


def _predict(sc, profile, params, mode="async", max_inflight=None):
    gpus = max(profile.gpus, sc.num_gpus)
    if gpus != profile.gpus:  # the book/ideal GPU count may be smaller than the scenario's
        profile = profile.replace(gpus=gpus)
    return simulate(sc.record(**params), profile, mode=mode, max_inflight=max_inflight)


def _run(sc, params, workers=None, mode="async", max_inflight=None, warmup=False,
         warmup_params=None):
    """Run on the real engine. With `warmup`, a first run is thrown away (kernels compiled,
    buffers cached, pages faulted in: costs the model does not have), with `warmup_params` if
    given, and the measured one runs with Python's garbage collector paused, as `timeit` does."""
    import gc

    import realexec

    # the scenarios name nd.gpu(i) themselves; arrays made without a ctx stay on the CPU
    def once(kwargs=params):
        return realexec.run(sc.workload, workers=workers, mode=mode,
                            max_inflight=max_inflight, **kwargs)

    if not warmup:
        return once().from_first_event()
    once(warmup_params or params)
    gc.collect()
    gc.disable()
    try:
        return once().from_first_event()
    finally:
        gc.enable()


def _book_rows(sc, trace) -> str:
    if not sc.book:
        return ""
    rows = [Row(label, trace.regions.get(label, 0.0), secs, "s") for label, secs in sc.book.items()]
    return table(rows, f"against the book ({sc.book_source}); 'measured' is the book's number")


def cmd_list(args) -> int:
    real = gpu_here()
    print(f"{'name':<26s} {'devices':<9s} {'section':<14s} description")
    for name, sc in scenarios.SCENARIOS.items():
        note = "" if sc.num_gpus == 0 or real else "  [predicted only here: no GPU]"
        print(f"{name:<26s} {sc.devices:<9s} {sc.section.split()[0]:<14s} {sc.description}{note}")
    return 0


def cmd_predict(args) -> int:
    sc = scenarios.get(args.name)
    params = sc.kwargs(args.quick, **_params(sc, args.param))
    profile = load_profile(args.profile, args.workers, _pairs(args.set, "--set"), args.quick)
    trace = _predict(sc, profile, params, args.mode, args.max_inflight)
    print(trace.summary())
    book = _book_rows(sc, trace)
    if book:
        print("\n" + book)
    if args.chrome:
        trace.to_chrome(args.chrome)
        print(f"Chrome trace: {args.chrome} (open in https://ui.perfetto.dev)")
    return 0


def cmd_run(args) -> int:
    sc = scenarios.get(args.name)
    if sc.num_gpus and not gpu_here() and not _simulator_on():
        print(f"{sc.name} needs a GPU and this machine has none: use `asyncsim predict "
              f"{sc.name}`, or set NUMBA_ENABLE_CUDASIM=1 to run under the CUDA simulator "
              f"(with --quick sizes)", file=sys.stderr)
        return 2
    params = sc.kwargs(args.quick, measure=True, **_params(sc, args.param))
    trace = _run(sc, params, args.workers, args.mode, args.max_inflight)
    print(trace.summary())
    if args.chrome:
        trace.to_chrome(args.chrome)
        print(f"Chrome trace: {args.chrome} (open in https://ui.perfetto.dev)")
    return 0


def _simulator_on() -> bool:
    import os

    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


WARMUP_BATCHES = 10


def _warmup_params(sc, profile, params, pred):
    """The parameters of the thrown-away first run: a training loop's first WARMUP_BATCHES
    batches when they reach the whole loop's peak memory (a blocker per batch: the same buffers
    serve every batch, so the short run compiles and caches all that the long one uses);
    otherwise, e.g. a loop whose backlog grows, the measured parameters themselves."""
    if params.get("num_batches", 0) <= WARMUP_BATCHES:
        return params
    short = {**params, "num_batches": WARMUP_BATCHES}
    peak = _predict(sc, profile, short).peak_bytes("cpu")
    return short if peak >= 0.95 * pred.peak_bytes("cpu") else params


def compare_one(sc, profile, out: Path | None, quick: bool, workers=None, progress=None,
                formats=("png", "svg"), draw: bool = True):
    """Predict and run one scenario; write its traces and (with `draw`) its figure in `formats`;
    return (rows, pred, meas)."""
    params = sc.kwargs(quick, measure=True)
    # what the workload prints (its `print(z)` blockers) would bury the tables
    with contextlib.redirect_stdout(io.StringIO()):
        pred = _predict(sc, profile, params)
        if sc.num_gpus and not gpu_here():
            meas = None
        else:
            warm = _warmup_params(sc, profile, params, pred)
            meas = _run(sc, params, workers=workers, warmup=True, warmup_params=warm)
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


def _compare_names(args) -> list[str]:
    if args.all:
        return scenarios.names()
    if not args.name:
        raise SystemExit("asyncsim compare: name a scenario or pass --all (see `asyncsim list`)")
    return [scenarios.get(args.name).name]


def cmd_compare(args) -> int:
    from tqdm import tqdm

    names = _compare_names(args)
    profile = load_profile(args.profile, args.workers, _pairs(args.set, "--set"), args.quick)
    out = Path(args.out) if args.out else None
    summary = []
    for name in tqdm(names, desc="compare", disable=len(names) == 1 or not sys.stderr.isatty()):
        sc = scenarios.get(name)
        rows, pred, meas = compare_one(sc, profile, out, args.quick, args.workers)
        if meas is None:
            print(f"\n{name}: predicted only (no GPU here): {pred.duration * 1e3:.3f} ms "
                  f"on profile {profile.name}")
            continue
        print("\n" + table(rows, f"{name} ({sc.section}): profile {profile.name}, "
                                 f"measured on {meas.meta.get('machine', '?')}"))
        summary.append((name, rows))
    if len(summary) > 1:
        print("\n" + summary_table(summary))
    return 0


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


def cmd_calibrate(args) -> int:
    from realexec.calibration.calibrate import calibrate

    profile = calibrate(workers=args.workers, quick=args.quick, force=args.force)
    if args.out:
        profile.save(args.out)
        print(f"wrote {args.out}")
    print(f"profile {profile.name}: t1 {profile.t1 * 1e6:.2f} us, t3 {profile.t3 * 1e6:.2f} us, "
          f"{profile.workers} workers on {profile.cores} cores")
    if "gpu:elementwise" in profile.costs:
        dot, link = profile.costs["gpu:dot"], profile.links["cpu->gpu"]
        print(f"  {profile.gpus} GPU(s), {profile.meta['gpu']['device']}: an op's launch "
              f"{profile.costs['gpu:elementwise'].latency * 1e6:.1f} us, dot "
              f"{dot.peak / 1e12:.2f} TFLOP/s, cpu->gpu {link.bandwidth / 1e9:.1f} GB/s")
    return 0


def cmd_figures(args) -> int:
    from asyncsim.lab.figures import make_all

    make_all(Path(args.out), quick=args.quick, workers=args.workers)
    return 0


def cmd_book_figures(args) -> int:
    from asyncsim.lab import book_figures
    from asyncsim.lab.checks import check_writable

    check_writable(args.out, "dir", "--out")
    paths = book_figures.make(args.out)
    print(f"wrote {len(paths)} files ({len(paths) // 2} figures, PNG + SVG) and README.md "
          f"to {args.out}/")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="asyncsim", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the chapters' scenarios")

    def common(sp, profile="book"):
        sp.add_argument("--quick", action="store_true", help="tiny sizes (tests, CI)")
        sp.add_argument("--workers", type=int, default=None, help="CPU worker threads")
        if profile:
            sp.add_argument("--profile", default=profile,
                            help="ideal | book | book-zh | here (calibrated) | FILE.json")
            sp.add_argument("--set", action="append", metavar="KEY=VALUE",
                            help="override a profile value, e.g. t1=1e-5 or cpu:dot.peak=1e11")

    for name in ("predict", "run"):
        sp = sub.add_parser(name, help=f"{name} one scenario")
        sp.add_argument("name")
        common(sp, profile="book" if name == "predict" else None)
        sp.add_argument("--param", action="append", metavar="KEY=VALUE",
                        help="a workload parameter, e.g. n=100")
        sp.add_argument("--mode", default="async", choices=("async", "sync"))
        sp.add_argument("--max-inflight", type=int, default=None)
        sp.add_argument("--chrome", metavar="FILE", help="write a Chrome/Perfetto trace")
    sp = sub.add_parser("compare", help="predict and run, side by side")
    sp.add_argument("name", nargs="?")
    sp.add_argument("--all", action="store_true")
    sp.add_argument("--out", default=None, help="write traces and figures here")
    common(sp, profile="here")
    sp = sub.add_parser("calibrate", help="measure this machine's profile")
    sp.add_argument("--out", default=None)
    sp.add_argument("--force", action="store_true", help="measure again, ignoring the cache")
    common(sp, profile=None)
    sp = sub.add_parser("figures", help="the main job: every scenario measured and predicted, "
                                        "figures and REPORT.md")
    sp.add_argument("--out", default="out",
                    help="where the measured figures go (machine-specific; default: out)")
    common(sp, profile=None)
    sp = sub.add_parser("book-figures", help="the textbook's figures, drawn by the model from "
                                             "the book profile (deterministic)")
    sp.add_argument("--out", default="figures", help="default: figures (tracked)")
    return p


COMMANDS = {"list": cmd_list, "predict": cmd_predict, "run": cmd_run, "compare": cmd_compare,
            "calibrate": cmd_calibrate, "figures": cmd_figures,
            "book-figures": cmd_book_figures}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        check_outputs(args)
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"asyncsim {args.command}: interrupted", file=sys.stderr)
        return 130
    except (scenarios.UnknownScenarioError, ValueError, TypeError, MemoryError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        given = getattr(args, "param", None)
        if given and not message.startswith("--param"):
            message += f" (with --param {' '.join(given)})"
        print(f"asyncsim {args.command}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
