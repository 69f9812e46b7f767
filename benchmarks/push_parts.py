"""What a push's parts cost: the `y = x + 1` loop with a part replaced by a stand-in that costs
next to nothing, side by side in one run, with the machine.

    python benchmarks/push_parts.py [--rounds 16] [--ops 5000]

The loop is `benchmarks/overhead.py`'s "nd per op, async + drain" (a (1, 2) array, one worker of
the compiled engine draining while the frontend pushes), and the same loop in sync mode (each op
run inside its push, which needs no dependency analysis: only the deletions ask it). Each round
runs every variant once, in turn, each in a fresh session after an untimed warm-up; the figures
are microseconds per op, the median and the lowest over the rounds (this machine's speed moves
from second to second), and "x numpy" the median over the rounds of each round's time over
numpy's op in that round. "as shipped" is the engine without light results
(`engine="native"`, every result a Python var: the engine whose parts the stand-ins replace);
"light results" is the default engine (`engine="native-light"`). What each variant replaces:

- "one drop at a time": not a stand-in but the engine before its dropped results went back in
  runs (`asyncsim.model.issue.DROP_BATCH`): each drop deleted and given back alone;
- "not kept": not a stand-in either, the engine before a run's done results were kept for the
  next outputs of their shape (`realexec.cpu.drops`): each output from the pool, each run
  back to it;
- "pool accounting": the CPU pool's acquire and release by a list of free arrays per shape (no
  lock, no live bytes, no samples), its buffers' addresses registered as the pool's are (with
  the kept runs, this loop's outputs rarely reach the pool);
- "dependency analysis": the engine's `Deps` by one that finds no predecessor and no user (right
  for this loop's ops, whose input was written long before; its deletions give buffers back at
  once, which is wrong in general and harmless here);
- both, and both with a var object of four slots instead of eleven;
- "lean": the frontend's fast path written down to what would stay in Python if the pool's
  accounting, the analysis and the op records all lived in the one compiled call (`Lean`): the
  output from free lists, a small var, the table's slot and read-out, the compiled push (in sync
  mode the compiled kernel); a drop gives the buffer back at once;
- "ring, no call" (async only): not the engine but the frontend of a push that makes no call at
  all: `ND` over a backend (`ring_reader.Unread`) whose push writes the op's record (op id, op
  code, input var, output var, bytes, scalar) into a shared int64 ring by memoryview stores and
  moves the ring's tail, and whose drop writes a deletion record. Nothing reads the ring: it is
  the frontend's floor if a compiled thread took the records and did the pool's accounting, the
  dependency analysis and the buffers' addresses itself (x86 keeps a thread's stores in order,
  so a reader that sees the tail sees the record);
- "ring, compiled reader" (async only): the same records taken as they come by a compiled
  thread on the other core (`ring_reader.RingReader`), which looks each op's input up by var
  number, asks the compiled dependency analysis (`slotdeps`) for its predecessor, gives its
  output a buffer from free lists over one arena, runs the kernel and takes a deletion's buffer
  back: the floor with the ring's lines moving between the two cores in it, and the loop's
  final waitall (the reader keeping up);
- "ring, reader into the engine" (async only): the same reader pushing each op into a compiled
  engine's table (`realexec.engine.table.push_unary`) behind its predecessor instead of running
  it, for the engine's one worker to run, a dropped buffer given back once its last op is done:
  the route's frontend with the engine's own workers behind it;
- "one call" and "one call, into the engine" (async only): no ring and no reader thread. Each
  push is one compiled call (`one_call.OneCall`) that does the reader's work for its op on the
  frontend's own thread (the input's slot, a buffer from the size classes, the predecessor from
  the compiled analysis; the op run in the call, or pushed into the engine's table for its
  worker), and each drop is one call too: a call through a compiled entry point with integer
  arguments costs about what the ring's stores cost, so this is the same floor with the
  reader's core handed back to the engine;
- "light results": not a stand-in but the engine with small results kept in its compiled
  state (`realexec.session(engine="native-light")`, `realexec.engine.light`): the shipped
  frontend with one compiled call a push (in sync mode running the op too), the drop riding on
  it.

"numpy" is numpy's own `b = a + 1` on the same array, and "nd alone" the frontend over a backend
that does nothing (`overhead.NullBackend`; "fast path": one that takes the fast path's calls,
as the compiled engine does, and does nothing with them). The gap between "both + small var" and
"nd alone" is what stays in Python per op with the pool and the dependency analysis compiled but
the engine's Python as it is: the push's and the deletion's own code, the compiled call, the
records. "lean" keeps the Python around its one call (free lists, a var object, the table's
slot); "one call" keeps none of it, the pool, the vars and the analysis living in the call's
compiled state; "ring, no call" makes no call at all. Not a target: a map of where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from one_call import OneCall
from overhead import NullBackend, nd_per_op
from ring_reader import RingReader, Unread

import realexec
import realexec.cpu.drops as drops
import realexec.frontend as frontend
from asyncsim.nd.frontend import ND
from realexec.cpu.loops import ADD
from realexec.cpu.native_ops import RUN_TYPES, SCALAR, run_native
from realexec.engine import table
from realexec.engine.deps import Var
from realexec.engine.memory import ADDRESSES
from realexec.engine.native import NativeEngine


class FreeLists:
    """Arrays by shape, reused as they come back: a pool with no accounting."""

    def __init__(self):
        self.free: dict = {}
        self.raws: list = []

    def acquire(self, shape, dtype):
        spare = self.free.get(shape)
        if spare:
            return spare.pop()
        raw = np.empty(512, np.uint8)
        ADDRESSES[id(raw)] = raw.ctypes.data
        self.raws.append(raw)
        return np.ndarray(shape, dtype, raw)

    def release(self, array):
        spare = self.free.get(array.shape)
        if spare is None:
            spare = self.free[array.shape] = []
        spare.append(array)

    def release_many(self, arrays):
        for array in arrays:
            self.release(array)

    def close(self):
        for raw in self.raws:
            ADDRESSES.pop(id(raw), None)


class NoDeps:
    """No predecessors, no users."""

    finished = None

    def add(self, token, reads, writes):
        return []

    def add_fresh(self, token, read, write):
        return -1

    def drop(self, var):
        return []

    def last_write(self, var):
        return None


class SmallVar:
    """The fields of a var that the compiled engine's fast path reads."""

    __slots__ = ("name", "data", "ptr", "failure")

    def __init__(self, name, data=None):
        self.name, self.data, self.ptr, self.failure = name, data, 0, None


class Lean:
    """The frontend's side of a push with every record kept in compiled code: the fast path's
    output array from free lists, a small var, the table's slot and read-out, and the compiled
    push itself called at once (no predecessors: right for this loop; in sync mode the compiled
    kernel call); a drop gives the buffer back at once. What stays in Python if the pool, the
    analysis and the op records all move into the one compiled call (which would then do their
    work too, costing it a little more, and a var's deletion would need that call too)."""

    def __init__(self, backend, lists: FreeLists):
        self.engine, self.vars, self.lists = backend.engine, backend.vars, lists
        self.number = self.engine._name_number("add_scalar")
        self.run = table.entry(run_native, RUN_TYPES)  # the kernel alone, as sync mode runs it
        self.none = np.empty(0, np.int64)

    def issue_same(self, op_id, name, reads, var, shape, dtype, device, attrs, nbytes):
        t_issue = time.perf_counter_ns()
        engine, vars_ = self.engine, self.vars
        x = vars_[reads[0]]
        data = self.lists.acquire(shape, dtype)
        out = vars_[var] = SmallVar("cpu", data)
        out.ptr = ADDRESSES[id(data.base)]
        if engine._sync:  # the kernel at once, as sync mode's push runs it
            self.run(SCALAR, ADD, 0, 2, x.ptr, x.ptr, out.ptr, float(attrs["scalar"]), 0)
            return
        token = engine._next
        if token >= engine._next_harvest:
            engine._harvest(token)
        engine._next = token + 1
        engine._push(engine.state, token & (engine.cap - 1), token, 0, SCALAR, ADD, 0, 2,
                     x.ptr, x.ptr, out.ptr, float(attrs["scalar"]), 0, -1, -1, -1, self.none,
                     op_id, self.number, t_issue)

    def free(self, var):
        ev = self.vars.pop(var, None)
        if ev is not None:
            self.lists.release(ev.data)


class Silent(NullBackend):
    """`ND`'s fast path handed to a backend that does nothing with it: the baseline of "ring, no
    call", whose gap to this row is what writing the records costs."""

    def issue_same(self, op_id, name, reads, var, shape, dtype, device, attrs, nbytes):
        pass


VARIANTS = {"as shipped": "engine='native': every result a Python var",
            "one drop at a time": "drops handed over one at a time",
            "not kept": "dropped results not kept",
            "pool accounting": "without pool accounting",
            "dependency analysis": "without dependency analysis",
            "both": "without both", "both + small var": "without both, a small var",
            "lean": "lean: one compiled call, no records",
            "light results": "light results (engine='native-light', the default)"}


def per_op(variant: str, n: int, mode: str = "async") -> float:
    """Seconds per op of the loop with `variant`'s stand-ins, in `mode`."""
    lists = FreeLists()
    drops.Var = SmallVar if variant == "both + small var" else Var
    try:
        engine = "native-light" if variant == "light results" else "native"
        with realexec.session(workers=1, mode=mode, engine=engine) as nd:
            backend = nd._backend
            if variant == "one drop at a time":
                backend._drops = None  # each drop deleted alone, as before runs of them
            if variant == "not kept":
                def back(vars_, release=backend._release_many_cpu):  # a run back to the pool
                    release([var.data for var in vars_])
                backend._stash_cpu = back
            if variant in ("pool accounting", "both", "both + small var"):
                backend._acquire_cpu, backend._release_cpu = lists.acquire, lists.release
                backend._release_many_cpu = lists.release_many
            if variant in ("dependency analysis", "both", "both + small var"):
                backend.engine._deps = NoDeps()
            if variant == "lean":
                x = nd.ones((1, 2))  # written by the general path, read by the lean one
                x.wait_to_read()
                lean = Lean(backend, lists)
                nd._issue_same, nd._free = lean.issue_same, lean.free
                nd_per_op(nd, n // 5, drain=True, x=x)
                return nd_per_op(nd, n, drain=True, x=x)
            nd_per_op(nd, n // 5, drain=True)
            return nd_per_op(nd, n, drain=True)
    finally:
        drops.Var = Var
        lists.close()


def compiled_per_op(n: int, backend, label: str, native=None) -> float:
    """Seconds per op of the loop over a backend of compiled code (`RingReader`, started, or
    `OneCall`), its final waitall included; `native`, the compiled engine whose one worker runs
    its ops, or None where the backend runs them itself. Both are closed after."""
    try:
        nd = ND(backend)
        x = nd.ones((1, 2))
        nd_per_op(nd, n // 5, drain=True, x=x)
        per_op = nd_per_op(nd, n, drain=True, x=x)
        if np.ravel((x + 1).asnumpy()).tolist() != [2.0, 2.0]:
            raise AssertionError(f"{label}: x + 1 is not 2")
        return per_op
    finally:
        if isinstance(backend, RingReader):
            backend.close()
        if native is not None:
            native.close()


def compiled_rows(n: int) -> dict[str, float]:
    """The rows of the compiled backends: the ring's reader and one call, each running the ops
    itself and feeding an engine's table."""
    rows = {}
    for label, into, make in (
            ("ring, compiled reader", "ring, reader into the engine",
             lambda engine: RingReader(engine=engine).start()),
            ("one call", "one call, into the engine", lambda engine: OneCall(engine=engine))):
        rows[label] = compiled_per_op(n, make(None), label)
        native = NativeEngine(workers=1)
        rows[into] = compiled_per_op(n, make(native), into, native)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args()
    print(f"machine: {frontend.machine()}")
    names = ("numpy", "nd alone", "nd alone, fast path", "ring, no call",
             "ring, compiled reader", "ring, reader into the engine", "one call",
             "one call, into the engine", *VARIANTS,
             *[f"{v} (sync)" for v in VARIANTS])
    times: dict[str, list[float]] = {name: [] for name in names}
    a = np.ones((1, 2), np.float32)
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.ops):
            b = a + 1  # noqa: F841 -- numpy's own op, the yardstick
        times["numpy"].append((time.perf_counter() - start) / args.ops)
        times["nd alone"].append(nd_per_op(ND(NullBackend()), args.ops))
        times["nd alone, fast path"].append(nd_per_op(ND(Silent()), args.ops))
        times["ring, no call"].append(nd_per_op(ND(Unread()), args.ops))
        for label, per_op_s in compiled_rows(args.ops).items():
            times[label].append(per_op_s)
        for variant in VARIANTS:
            times[variant].append(per_op(variant, args.ops))
            times[f"{variant} (sync)"].append(per_op(variant, args.ops, "sync"))
    print(f"y = x + 1 on a (1, 2) array, us per op over {args.rounds} rounds of {args.ops} ops")
    print(f"{'':50s} {'median':>7s} {'lowest':>7s} {'x numpy':>8s}")
    for name, values in times.items():
        variant, sync = name.removesuffix(" (sync)"), name.endswith(" (sync)")
        label = VARIANTS.get(variant, variant) + (", sync mode" if sync else "")
        # each round's time over numpy's in the same round, the median of those: a slow spell
        # that lands on one round moves both sides of its ratio
        ratio = statistics.median(v / n for v, n in zip(values, times["numpy"], strict=True))
        print(f"{label:50s} {statistics.median(values) * 1e6:7.2f} {min(values) * 1e6:7.2f} "
              f"{ratio:8.2f}")


if __name__ == "__main__":
    main()
