"""Where a scenario's prediction and measurement part: exec time per op name, side by side.

    python benchmarks/breakdown.py SCENARIO [--top N] [--profile PROFILE.json]

Predicts the scenario with this machine's calibrated profile (`realexec.calibrate`, cached) at
`benchmarks/accuracy.py`'s sizes, measures it as that script does (a warm-up, then the run
nearest the central total of three), and prints per op name the count and summed exec seconds of
each, the frontend's issue and wait spans beside them, how many streaming ops ran on the worker of
the product before them, then per op name and size (bytes read plus written) the median exec
time, predicted and measured, and measured apart for the ops whose first input was written on
the same worker and on another one, then for `dot` the speed (GFLOP/s) of each distinct product
(by its flops and transposes), predicted and measured, and last per benchmark region how
often the frontend issued (the time from its first issue to its last over the issues between),
its median issue span, the median exec span and the peak of cpu memory, predicted and measured.
Reading aid for the accuracy table, not a target: one run, on a machine whose speed moves.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import statistics

import accuracy

import asyncsim
from asyncsim import Profile
from asyncsim.lab import scenarios
from asyncsim.model.places import AFTER, GEMM, STREAMING
from asyncsim.nd.ops import OPS
from realexec.calibration.calibrate import calibrate


def per_name(trace) -> dict:
    """(kind, op name or lane) -> [count, seconds]."""
    out = collections.defaultdict(lambda: [0, 0.0])
    for s in trace.spans:
        key = (s.kind, s.name) if s.kind == "exec" else (s.kind, s.lane.split("/")[0])
        out[key][0] += 1
        out[key][1] += s.duration
    return out


def products(program, pred, meas) -> dict:
    """(flops, transposes) -> [(predicted s, measured s)] for every `dot`, matched by op id."""
    ops = {op.id: op for op in program.ops}
    spans = [{s.op_id: s for s in t.spans if s.kind == "exec" and s.name == "dot"}
             for t in (pred, meas)]
    out = collections.defaultdict(list)
    for op_id, p in spans[0].items():
        m, op = spans[1].get(op_id), ops.get(op_id)
        if m is not None and op is not None:
            flags = tuple(k for k, v in sorted(op.attrs.items()) if k.startswith("trans") and v)
            out[(op.flops, flags)].append((p.duration, m.duration))
    return out


def by_size(program, pred, meas) -> dict:
    """(name, nbytes) -> [(predicted s, measured s, measured on the worker that wrote its first
    input: True, False, or None when no op of the run wrote it)] for every exec span, by op id."""
    spans = [{s.op_id: s for s in t.spans if s.kind == "exec"} for t in (pred, meas)]
    writer: dict[int, int] = {}  # var -> the op that wrote it last
    out = collections.defaultdict(list)
    for op in sorted(program.ops, key=lambda o: o.id):
        p, m = spans[0].get(op.id), spans[1].get(op.id)
        if p is not None and m is not None:
            source = spans[1].get(writer.get(op.reads[0], -1)) if op.reads else None
            same = None if source is None else source.lane == m.lane
            out[(op.name, op.nbytes)].append((p.duration, m.duration, same))
        writer[op.out] = op.id
    return out


def regions(trace) -> dict:
    """Benchmark region -> (seconds between issues, median issue span, median exec span, peak cpu
    bytes) over the spans that start inside it."""
    out = {}
    for label, start, end in trace.marks:
        issues = [s for s in trace.spans if s.kind == "issue" and start <= s.start <= end]
        execs = [s.duration for s in trace.spans if s.kind == "exec" and start <= s.start <= end]
        peak = max((b for t, dev, b in trace.memory if dev == "cpu" and start <= t <= end),
                   default=0)
        every = ((issues[-1].start - issues[0].start) / (len(issues) - 1)
                 if len(issues) > 1 else float("nan"))
        out[label] = (every, statistics.median(s.duration for s in issues) if issues else 0.0,
                      statistics.median(execs) if execs else 0.0, peak)
    return out


def _median_us(values) -> str:
    values = list(values)
    return f"{statistics.median(values) * 1e6:9.1f}" if values else f"{'-':>9s}"


def same_worker(trace) -> tuple[int, int]:
    """(on the worker of the product or convolution that ended last before them, all): the
    streaming ops (`asyncsim.model.host`'s groups) that start after some product ended; the
    engine's worker takes what its completion releases, and `Profile.after_gemm` counts per
    worker."""
    last = None  # (end, lane) of the latest product to end so far, in start order
    same = total = 0
    for s in sorted(trace.spans_of(kind="exec"), key=lambda s: s.start):
        part = AFTER.get(OPS[s.name].group, 0) if s.name in OPS else 0
        if part == STREAMING and last is not None and last[0] <= s.start:
            total += 1
            same += s.lane == last[1]
        if part == GEMM and (last is None or s.end > last[0]):
            last = (s.end, s.lane)
    return same, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=scenarios.names("cpu"))
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--profile", help="a profile's JSON file (an accuracy collection's kept "
                        "profile) instead of this machine's cached calibration")
    args = parser.parse_args()
    scenario = scenarios.get(args.scenario)
    params = scenario.kwargs(**accuracy.SIZES.get(args.scenario, {}))
    profile = Profile.load(args.profile) if args.profile else calibrate()
    with contextlib.redirect_stdout(io.StringIO()):
        program = asyncsim.record(scenario.workload, **params)
    pred = asyncsim.simulate(program, profile)
    meas, spread, _ = accuracy.measure(scenario, profile.workers, params)
    print(f"{args.scenario}: predicted {pred.duration * 1e3:.1f} ms, measured "
          f"{meas.duration * 1e3:.1f} ms (spread of the runs {spread:.0%}); profile of "
          f"{profile.meta.get('date')}")
    p, m = per_name(pred), per_name(meas)
    print(f"\n{'kind':8s} {'name':24s} {'n pred':>7s} {'n meas':>7s} {'pred ms':>9s} "
          f"{'meas ms':>9s}")
    for key in sorted(set(p) | set(m), key=lambda k: -m.get(k, (0, 0.0))[1])[:args.top]:
        (np_, sp), (nm, sm) = p.get(key, (0, 0.0)), m.get(key, (0, 0.0))
        print(f"{key[0]:8s} {str(key[1]):24s} {np_:7d} {nm:7d} {sp * 1e3:9.2f} {sm * 1e3:9.2f}")
    (ps, pt), (ms, mt) = same_worker(pred), same_worker(meas)
    print(f"\nstreaming ops on the worker of the product before them: predicted {ps} of {pt}, "
          f"measured {ms} of {mt}")
    sizes = by_size(program, pred, meas)
    print(f"\n{'exec by op and size':24s} {'MiB':>8s} {'n':>5s} {'pred us':>9s} {'meas us':>9s} "
          f"{'ratio':>6s} {'same us':>9s} {'other us':>9s}")
    ranked = sorted(sizes.items(), key=lambda kv: -sum(m for _, m, _ in kv[1]))
    for (name, nbytes), rows in ranked[:args.top]:
        pm = statistics.median(p for p, _, _ in rows)
        mm = statistics.median(m for _, m, _ in rows)
        print(f"{name:24s} {nbytes / 2**20:8.3f} {len(rows):5d} {pm * 1e6:9.1f} {mm * 1e6:9.1f} "
              f"{mm / pm if pm else float('nan'):6.2f} "
              f"{_median_us(m for _, m, same in rows if same is True)} "
              f"{_median_us(m for _, m, same in rows if same is False)}")
    print("(same / other: measured, the ops whose first input was written on the worker that "
          "ran them / on another; - where none)")
    dots = products(program, pred, meas)
    if dots:
        print(f"\n{'dot (MFLOP, transposed)':34s} {'n':>4s} {'pred GFLOP/s':>13s} "
              f"{'meas GFLOP/s':>13s}")
        for (flops, flags), pairs in sorted(dots.items(), key=lambda kv: -kv[0][0]):
            pt = statistics.median(a for a, _ in pairs)
            mt = statistics.median(b for _, b in pairs)
            label = f"{flops / 1e6:.1f} {'+'.join(flags) or '-'}"
            print(f"{label:34s} {len(pairs):4d} {flops / pt / 1e9:13.1f} {flops / mt / 1e9:13.1f}")
    rp, rm = regions(pred), regions(meas)
    print(f"\n{'region (pred / meas)':28s} {'issue every us':>17s} {'issue us':>15s} "
          f"{'exec us':>15s} {'peak cpu MiB':>15s}")
    for label in rp:
        if label in rm:
            pairs = zip(rp[label][:3], rm[label][:3], strict=True)
            cells = [f"{a * 1e6:7.1f} {b * 1e6:7.1f}" for a, b in pairs]
            cells.append(f"{rp[label][3] / 2**20:7.2f} {rm[label][3] / 2**20:7.2f}")
            print(f"{label[:28]:28s} {cells[0]:>17s} {cells[1]:>15s} {cells[2]:>15s} "
                  f"{cells[3]:>15s}")


if __name__ == "__main__":
    main()
