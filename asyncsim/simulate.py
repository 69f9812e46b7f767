"""The SimPy model: replay a recorded Program on a Profile and predict its Trace.

Processes (plain SimPy generators):
- the frontend walks `program.instrs`. An op costs it `profile.issue(op)` (t1, an "issue" span) and
  may start once that issue has ended and its dependencies are met (`asyncsim.deps.DepTracker`:
  read-after-write, write-after-read, write-after-write). A blocker (`Sync`) waits until every
  pending write of its var has finished (`waitall`: everything issued), then pays t3; one "wait"
  span covers both. `Free` drops a handle; `Mark` opens or closes a benchmark region.
- CPU workers "cpu/w0".."cpu/w{W-1}" share one ready queue (a `simpy.Store`): a ready CPU op takes
  any free worker, in the order ops became ready.
- each GPU i has two in-order lanes (CUDA streams): "gpu{i}/compute" and "gpu{i}/copy". Their
  queues take ops in issue order; the lane waits for the head op's dependencies, then runs it.
  `copyto` between devices runs on the GPU's copy lane (kind "copy", priced by `profile.links`).

`mode='sync'` is MXNet's NaiveEngine: each op runs to completion inside its issuing call, then the
frontend pays t3 (a blocker after every op). `max_inflight=k` makes the frontend wait (a
`simpy.Container` of k slots) before issuing while k issued ops are unfinished.

Memory: an op's fresh output is reserved on its device when the op's issue starts; it is released
once the frontend has freed the var and every op reading or writing it has finished. Each change
adds a sample (t, device, live_bytes). Times are seconds of simulated time from 0.

A blocker costs `profile.blocker(kind, nbytes, device, waited)` once its wait is over: t3, plus
what a "frontend:<kind>" cost adds for the bytes it hands back (asnumpy's copy, print's
formatting); on GPU data, `gpu_wait` if it waited and the "gpu->host" readback (see Profile).
An op on a GPU costs the frontend `profile.gpu_issue` more.

Pricing: an op by `profile.rule` on its lane and `profile.issue_rule` on the frontend; a binary
op whose operands differ in shape (`BINARY`, broadcasting) by the profile's "broadcast" costs
where it has them. The first op issued costs the frontend `profile.startup` more (a fresh
engine: code and threads that never ran).

The host (`asyncsim.host`, only when the profile asks for it, so `Profile.ideal` keeps the closed
forms exact): idle CPU workers take `profile.dispatch` to wake up, and the thread that wakes one
pays `profile.wake`, CPython's GIL (the frontend
holds it while it runs; a worker for an op's latency, again when its kernel returns, and for
`gil` after the op; hand-overs cost a wake-up, a waiter forces one after `profile.switch`),
buffers released by the worker that finishes their last op (`profile.release`), a frontend
asleep in a blocker whose condition each finished op tests (`profile.recheck`), cores shared
with a frontend that spins in its blockers, and memory-bound kernels crowding each other
(`Cost.crowd`).

Not modelled: an op's own threads (its cost is taken to include whatever threads it uses; the
calibrated costs are measured with the workers and BLAS threads of the run), the first touch of
fresh memory (page faults), caches that a kernel leaves cold for the Python work after it,
wake-ups that take longer the longer a thread slept, Python's garbage collector, memory
capacity limits, and errors raised inside ops.
"""

from __future__ import annotations

from collections import deque

import simpy

from asyncsim import host
from asyncsim.deps import DepTracker
from asyncsim.profile import Profile, ProfileError, device_kind, is_link_copy
from asyncsim.program import Free, Mark, Op, Program, Sync
from asyncsim.record import check_workload, record
from asyncsim.trace import Span, Trace

MODES = ("async", "sync")
FRONTEND = "frontend"
BINARY = frozenset({"add", "sub", "mul", "div"})  # the ops that broadcast their operands


class _Queue(simpy.Store):
    """A SimPy Store whose items are a deque: a backlog of a million ops stays O(1) per get."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self.items = deque()

    def _do_get(self, event) -> None:
        if self.items:
            event.succeed(self.items.popleft())


class _Model:
    """One simulation run: the shared state that the processes below read and update."""

    def __init__(self, program: Program, profile: Profile, mode: str, max_inflight: int | None):
        self.program, self.profile, self.sync_mode = program, profile, mode == "sync"
        self.env = env = simpy.Environment()
        self.tracker = DepTracker()
        self.ops: list[Op] = []  # position in issue order -> op
        self.durations: list[float] = []  # position -> seconds on its lane
        self.kinds: list[str] = []  # position -> "exec" or "copy"
        self.in_order: list[bool] = []  # position -> whether its lane is an in-order stream
        self.rules: dict = {}  # (op name, device, source device) -> pricing and lane
        self.done_events: dict = {}  # position -> Event a blocker waits on
        self.stream_ready: set = set()  # stream ops whose dependencies are met
        self.stream_waits: dict = {}  # position -> Event its stream waits on
        self.inflight = 0
        self.idle_event = None  # Event a waitall waits on
        # a waitall of a program that runs anything on a GPU also waits for the devices
        self.gpu_program = "gpu" if any(d != "cpu" for d in program.devices) else "cpu"
        self.slots = simpy.Container(env, max_inflight, init=max_inflight) if max_inflight else None
        self.touching: dict = {}  # var -> count of unfinished ops that read or write it
        self.freed: set = set()  # vars dropped by the frontend but still touched
        self.reserved: dict = {}  # var -> (device, bytes) while its bytes are live
        self.live = {device: 0 for device in program.devices}
        self.memory = [(0.0, device, 0) for device in program.devices]
        self.spans: list[Span] = []
        self.marks: list = []
        self.open_marks: dict = {}
        self.host = host.Host(self, profile, mode) if profile.contended else None
        self.gil = self.host.gil if self.host else None
        self.pool = self.host.queue if self.host else _Queue(env)
        for k in range(profile.workers):
            worker = self.host.worker if self.host else self._worker
            env.process(worker(f"cpu/w{k}", self.pool, False))
        self.streams = {}
        for i in range(profile.gpus):
            for part in ("compute", "copy"):
                self.streams[f"gpu{i}", part] = store = _Queue(env)
                env.process(self._worker(f"gpu{i}/{part}", store, True))
        env.process(self._frontend())

    # -- the frontend ---------------------------------------------------------------------------
    def _frontend(self):
        env, spans, profile, gil, host = self.env, self.spans, self.profile, self.gil, self.host
        timeout = env.timeout
        for ins in self.program.instrs:
            kind = type(ins)
            if kind is Op:
                if self.slots is not None:
                    slot = self.slots.get(1)
                    if not slot.triggered and host is not None:  # about to block
                        if gil is not None:
                            gil.release(FRONTEND)
                        host.frontend_waits(slot)
                    yield slot
                    if host is not None:
                        host.frontend_woke()
                issue_cost, queue = self._prepare(ins)
                if gil is not None:
                    yield from self._take_gil()
                start = env.now
                if ins.fresh:
                    self._reserve(ins.out)
                yield timeout(issue_cost)
                if host is None:
                    position = self._push(ins, queue)
                else:  # the push may wake an idle worker, which the frontend pays for
                    wakes = host.queue.wakes
                    position = self._push(ins, queue)
                    if host.wake and host.queue.wakes > wakes:
                        yield timeout(host.wake)
                spans.append(Span("frontend", ins.name, ins.id, start, env.now, "issue"))
                if self.sync_mode or (profile.pageable and ins.name == "copyto"
                                      and ins.device == "cpu" and ins.attrs["src"] != "cpu"):
                    start = env.now
                    yield self.done_events.setdefault(position, env.event())
                    yield timeout(profile.t3)
                    spans.append(Span("frontend", ins.name, ins.id, start, env.now, "wait"))
            elif kind is Sync:
                if gil is not None:
                    gil.release(FRONTEND)
                start = env.now
                event = self._wait_for(ins.var)
                if event is not None:
                    if host is not None:
                        host.frontend_waits(event)
                    yield event
                    if host is not None:
                        host.frontend_woke()
                if ins.var is None:
                    nbytes, device = 0, self.gpu_program
                else:
                    var = self.program.vars[ins.var]
                    nbytes, device = var.nbytes, var.device
                yield timeout(profile.blocker(ins.kind, nbytes, device, event is not None))
                spans.append(Span("frontend", ins.kind, -1, start, env.now, "wait"))
            elif kind is Free:
                if profile.free:
                    if gil is not None:
                        yield from self._take_gil()
                    start = env.now
                    yield timeout(profile.free)
                    spans.append(Span("frontend", "free", -1, start, env.now, "issue"))
                if ins.var in self.touching:
                    self.freed.add(ins.var)
                else:
                    self._release(ins.var)
            elif kind is Mark:
                if ins.begin:
                    self.open_marks.setdefault(ins.label, []).append(env.now)
                elif self.open_marks.get(ins.label):
                    self.marks.append((ins.label, self.open_marks[ins.label].pop(), env.now))
        if gil is not None:
            gil.release(FRONTEND)
        if host is not None:
            host.frontend_done()

    def _take_gil(self):
        """The frontend takes the GIL before running Python (only when the profile models it)."""
        held = self.gil.take(FRONTEND, self.host.spinning)
        self.host.spinning = False
        if held is not None:
            yield held

    def _prepare(self, op: Op) -> tuple[float, simpy.Store]:
        """Price `op` and pick its lane queue (cached per op name and devices); return its issue
        cost and that queue."""
        broadcast = op.name in BINARY and self._broadcast(op)
        key = (op.name, op.device, op.attrs.get("src"), broadcast)
        rule = self.rules.get(key)
        if rule is None:
            rule = self.rules[key] = self._rule(op, broadcast)
        issue_cost, lane_cost, link, queue = rule
        self.ops.append(op)
        if link:
            self.durations.append(lane_cost.time(op.nbytes / 2, 0.0))
        else:
            self.durations.append(lane_cost.time(op.nbytes, op.flops))
        self.kinds.append("copy" if link else "exec")
        self.in_order.append(queue is not self.pool)
        if self.host is not None:
            self.host.prepare(op, lane_cost, link)
        cost = self.profile.t1 if issue_cost is None else issue_cost.time(op.nbytes, op.flops)
        if op.device != "cpu":
            cost += self.profile.gpu_issue
        if len(self.ops) == 1:  # the first push into a fresh engine
            cost += self.profile.startup
        return cost, queue

    def _broadcast(self, op: Op) -> bool:
        """Whether the operands of a binary op differ in shape (numpy's broadcasting)."""
        shapes = {self.program.vars[var].shape for var in op.reads}
        return len(shapes) > 1 or self.program.vars[op.out].shape not in shapes

    def _rule(self, op: Op, broadcast: bool) -> tuple:
        link = is_link_copy(op)
        _, lane_cost = self.profile.rule(op, broadcast)
        if op.device == "cpu" and not link:
            queue = self.pool
        elif link and op.device == "cpu" and self.profile.pageable:
            queue = self.streams[op.attrs["src"], "compute"]  # serialised with compute
        elif link:  # the GPU end of the copy owns the copy engine (the destination for gpu->gpu)
            gpu = op.device if op.device != "cpu" else op.attrs["src"]
            queue = self.streams[gpu, "copy"]
        else:
            queue = self.streams[op.device, "compute"]
        return self.profile.issue_rule(op, broadcast), lane_cost, link, queue

    def _push(self, op: Op, queue: simpy.Store) -> int:
        position = len(self.ops) - 1
        self.inflight += 1
        touching = self.touching
        for var in op.reads:
            touching[var] = touching.get(var, 0) + 1
        touching[op.out] = touching.get(op.out, 0) + 1
        if self.in_order[position]:
            queue.put(position)
        if self.tracker.push(position, op.reads, (op.out,)):
            self._dispatch(position)
        return position

    def _wait_for(self, var):
        """The event a blocker on `var` (None: waitall) waits for, or None if nothing is pending."""
        if var is None:
            if not self.inflight:
                return None
            if self.idle_event is None:
                self.idle_event = self.env.event()
            return self.idle_event
        last = self.tracker.last_write(var)
        if last is None:
            return None
        return self.done_events.setdefault(last, self.env.event())

    # -- lanes --------------------------------------------------------------------------------
    def _dispatch(self, position: int) -> None:
        """`position` has its dependencies met: queue it, or wake the stream waiting for it."""
        if not self.in_order[position]:
            self.pool.put(position)
            return
        event = self.stream_waits.pop(position, None)
        if event is None:
            self.stream_ready.add(position)
        else:
            event.succeed()

    def _worker(self, lane: str, queue: simpy.Store, in_order: bool):
        env, spans, ops = self.env, self.spans, self.ops
        durations, kinds = self.durations, self.kinds
        get, timeout, finish = queue.get, env.timeout, self._finish
        ready, waits = self.stream_ready, self.stream_waits
        while True:
            position = yield get()
            if in_order:
                if position in ready:
                    ready.remove(position)
                else:
                    waits[position] = event = env.event()
                    yield event
            start = env.now
            yield timeout(durations[position])
            op = ops[position]
            spans.append(Span(lane, op.name, op.id, start, env.now, kinds[position]))
            finish(position, op)

    def _finish(self, position: int, op: Op) -> int:
        """Complete `position`: dispatch what it made ready, release what it was the last to
        touch. Returns how many buffers it released."""
        for other in self.tracker.complete(position):
            self._dispatch(other)
        touching = self.touching
        released = 0
        for var in (*op.reads, op.out):
            left = touching[var] - 1
            if left:
                touching[var] = left
            else:
                del touching[var]
                if var in self.freed:
                    self.freed.remove(var)
                    self._release(var)
                    released += 1
        event = self.done_events.pop(position, None)
        if event is not None:
            event.succeed()
        self.inflight -= 1
        if not self.inflight and self.idle_event is not None:
            self.idle_event.succeed()
            self.idle_event = None
        if self.slots is not None:
            self.slots.put(1)
        return released

    # -- memory ---------------------------------------------------------------------------------
    def _reserve(self, var: int) -> None:
        info = self.program.vars[var]
        self.reserved[var] = (info.device, info.nbytes)
        self.live[info.device] += info.nbytes
        self.memory.append((self.env.now, info.device, self.live[info.device]))

    def _release(self, var: int) -> None:
        device, nbytes = self.reserved.pop(var, (None, 0))
        self.tracker.forget(var)
        if device is not None:
            self.live[device] -= nbytes
            self.memory.append((self.env.now, device, self.live[device]))


def _check_devices(program: Program, profile: Profile) -> None:
    for device in program.devices:
        if device == "cpu":
            continue
        number = device[3:]
        if device_kind(device) != "gpu" or not number.isdigit():
            raise ValueError(f"program {program.name!r} uses unknown device {device!r}; "
                             f"devices are 'cpu' and 'gpuN'")
        if int(number) >= profile.gpus:
            names = ", ".join(f"gpu{i}" for i in range(profile.gpus))
            has = f"{profile.gpus} GPU{'s' if profile.gpus > 1 else ''} ({names})"
            has = has if profile.gpus else "no GPU"
            raise ValueError(f"program {program.name!r} uses {device} but profile "
                             f"{profile.name!r} has {has}; use a profile with more GPUs "
                             f"(--set gpus={int(number) + 1})")


def _as_profile(profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, str):
        return Profile.preset(profile)
    raise ProfileError(f"expected a Profile or a preset name, got {type(profile).__name__}")


def simulate(program: Program, profile: Profile | str, mode: str = "async",
             max_inflight: int | None = None) -> Trace:
    """Predict the Trace of `program` on `profile` (a Profile or a preset name)."""
    profile = _as_profile(profile)
    if not isinstance(program, Program):
        raise TypeError(f"simulate takes a Program (from asyncsim.record), "
                        f"got {type(program).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if max_inflight is not None and (not isinstance(max_inflight, int) or max_inflight < 1):
        raise ValueError(f"max_inflight must be a positive int or None, got {max_inflight!r}")
    _check_devices(program, profile)
    model = _Model(program, profile, mode, max_inflight)
    model.env.run()
    if model.inflight:
        raise RuntimeError(f"simulation of {program.name!r} stalled with {model.inflight} "
                           f"unfinished ops (a dependency cycle?)")
    meta = {"source": "predicted", "workload": program.name, "profile": profile.name,
            "mode": mode, "max_inflight": max_inflight, "params": dict(program.params),
            "workers": profile.workers, "gpus": profile.gpus}
    return Trace(spans=model.spans, memory=model.memory, marks=model.marks, meta=meta)


def predict(workload, profile: Profile | str, mode: str = "async",
            max_inflight: int | None = None, device: str = "cpu", **params) -> Trace:
    """Record `workload(nd, **params)` and simulate it: the two steps in one. `device` is where
    arrays made without a ctx live ("cpu" or "gpu", as in `realexec.run`)."""
    check_workload(workload)
    return simulate(record(workload, device=device, **params), profile, mode=mode,
                    max_inflight=max_inflight)
