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

`--quick` uses each scenario's tiny parameters (seconds instead of minutes). GPU scenarios that
this machine cannot run are marked by `list`, refused by `run` (unless NUMBA_ENABLE_CUDASIM=1
runs them under the CUDA simulator) and predicted only by `compare` and `figures`, which say
so. This module is the command line only: what each profile is, and the work each command
does, are in `asyncsim.lab.jobs`.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path

from asyncsim.lab import scenarios
from asyncsim.lab.checks import check_outputs, check_param
from asyncsim.lab.compare import table
from asyncsim.lab.jobs import (
    book_rows,
    compare_one,
    gpu_here,
    load_profile,
    predict_one,
    run_one,
    simulator_on,
    summary_table,
)
from asyncsim.nd.ndarray import interrupts_outside_finalizers


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
    trace = predict_one(sc, profile, params, args.mode, args.max_inflight)
    print(trace.summary())
    book = book_rows(sc, trace)
    if book:
        print("\n" + book)
    if args.chrome:
        trace.to_chrome(args.chrome)
        print(f"Chrome trace: {args.chrome} (open in https://ui.perfetto.dev)")
    return 0


def cmd_run(args) -> int:
    sc = scenarios.get(args.name)
    if sc.num_gpus and not gpu_here() and not simulator_on():
        print(f"{sc.name} needs a GPU and this machine has none: use `asyncsim predict "
              f"{sc.name}`, or set NUMBA_ENABLE_CUDASIM=1 to run under the CUDA simulator "
              f"(with --quick sizes)", file=sys.stderr)
        return 2
    params = sc.kwargs(args.quick, measure=True, **_params(sc, args.param))
    trace = run_one(sc, params, args.workers, args.mode, args.max_inflight)
    print(trace.summary())
    if args.chrome:
        trace.to_chrome(args.chrome)
        print(f"Chrome trace: {args.chrome} (open in https://ui.perfetto.dev)")
    return 0


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
        with interrupts_outside_finalizers():  # a Ctrl-C is never lost in an array's free
            status = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe fails here, inside the handlers, not at exit
        return status
    except BrokenPipeError:  # `asyncsim list | head`: the reader left; stop quietly, as cat does
        # stdout to /dev/null first, or Python reports the pipe again when it flushes at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE: what a shell reports for a writer the pipe ended
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
