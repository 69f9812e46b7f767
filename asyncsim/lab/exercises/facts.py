"""Facts that the checks read off a Program and its Trace, to grade an answer and explain why.

From the Program (what the frontend issued, in order): the instructions inside a benchmark
region, the ops that each op depends on (read-after-write, followed transitively), and groups of
ops such as the minibatches of a training loop. From the Trace (what ran when): each op's window
on its lane, a group's window, how many groups were in flight at once, how long two sets of
lanes were busy together and how many ops of a set ran at once.

Ops are matched between the two by id: the recorder and the engine number a workload's ops the
same way, since a workload branches on its parameters only. Times are seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from asyncsim.nd.program import Mark, Op, Program, Sync
from asyncsim.nd.trace import Trace

RUNNING = ("exec", "copy")  # span kinds of an op holding a lane


# -- the Program ---------------------------------------------------------------------------------
def region_label(program: Program, prefix: str) -> str | None:
    """The first region whose label starts with `prefix` (case-insensitive), or None."""
    for label in program.regions():
        if label.lower().startswith(prefix.lower()):
            return label
    return None


def region_instrs(program: Program, label: str) -> list:
    """The instructions issued inside the first region called `label`, in order."""
    inside, depth, out = False, 0, []
    for instr in program.instrs:
        if isinstance(instr, Mark) and instr.label == label:
            if instr.begin and not inside:
                inside, depth = True, 1
                continue
            if not instr.begin and inside:
                depth -= 1
                if depth == 0:
                    return out
                continue
        if inside:
            out.append(instr)
    return out


def ops_of(instrs: Iterable) -> list[Op]:
    return [i for i in instrs if isinstance(i, Op)]


def syncs_of(instrs: Iterable) -> list[Sync]:
    return [i for i in instrs if isinstance(i, Sync)]


def ancestors(program: Program) -> dict[int, set[int]]:
    """Op id -> ids of every op it depends on through the data it reads (read-after-write)."""
    writer: dict[int, int] = {}
    before: dict[int, set[int]] = {}
    for op in program.ops:
        deps: set[int] = set()
        for var in op.reads:
            if var in writer:
                deps.add(writer[var])
                deps |= before[writer[var]]
        before[op.id] = deps
        writer[op.out] = op.id
    return before


def independent(a: int, b: int, before: dict[int, set[int]]) -> bool:
    """Neither op needs the other's result: they may run at the same time."""
    return a not in before[b] and b not in before[a]


def groups(program: Program, is_head: Callable[[Op], bool], last: int | None = None
           ) -> list[list[int]]:
    """Op ids grouped from each head op up to the next head, in issue order: e.g. a training
    loop's minibatches, each beginning where its data is made. With `last`, only the last
    `last` groups (a warm-up's batch before the loop is then left out)."""
    out: list[list[int]] = []
    for op in program.ops:
        if is_head(op):
            out.append([])
        if out:
            out[-1].append(op.id)
    return out[-last:] if last else out


# -- the Trace -----------------------------------------------------------------------------------
def op_windows(trace: Trace) -> dict[int, tuple[float, float]]:
    """Op id -> (start, end) of its time on a lane."""
    windows: dict[int, tuple[float, float]] = {}
    for s in trace.spans:
        if s.kind in RUNNING:
            a, b = windows.get(s.op_id, (s.start, s.end))
            windows[s.op_id] = (min(a, s.start), max(b, s.end))
    return windows


def issue_starts(trace: Trace) -> dict[int, float]:
    """Op id -> when the frontend began issuing it."""
    return {s.op_id: s.start for s in trace.spans if s.kind == "issue"}


def group_window(ids: Iterable[int], windows: dict[int, tuple[float, float]]
                 ) -> tuple[float, float]:
    """(first start, last end) of the ops `ids` on their lanes."""
    spans = [windows[i] for i in ids if i in windows]
    return min(a for a, _ in spans), max(b for _, b in spans)


def most_in_flight(begins: list[float], ends: list[float]) -> int:
    """The most intervals [begin, end) open at one moment."""
    events = sorted([(b, 1) for b in begins] + [(e, -1) for e in ends], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def busy(trace: Trace, lane_is: Callable[[str], bool]) -> list[tuple[float, float]]:
    """Merged intervals during which some lane chosen by `lane_is` ran an op."""
    spans = sorted((s.start, s.end) for s in trace.spans if s.kind in RUNNING and lane_is(s.lane))
    merged: list[tuple[float, float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def total(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds during which both sets of merged intervals are busy."""
    i = j = 0
    both = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        both += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return both


def concurrency(trace: Trace, ids: Iterable[int]) -> tuple[int, list[str]]:
    """(the most of the ops `ids` running at one moment, the lanes they ran on)."""
    wanted = set(ids)
    spans = [s for s in trace.spans if s.kind in RUNNING and s.op_id in wanted]
    most = most_in_flight([s.start for s in spans], [s.end for s in spans])
    return most, sorted({s.lane for s in spans})
