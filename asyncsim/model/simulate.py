"""The SimPy model: replay a recorded Program on a Profile and predict its Trace.

Processes (plain SimPy generators):
- the frontend (`asyncsim.model.issue`) walks `program.instrs`: it issues ops (an "issue" span
  each), blocks in `Sync`s (a "wait" span: the wait, then t3 and more), drops handles and marks
  benchmark regions. An op may start once its issue has ended and its dependencies are met
  (`asyncsim.model.deps.DepTracker`).
- CPU workers "cpu/w0".."cpu/w{W-1}" share one ready queue (Store-like: `_Queue`, or the host
  model's `WakeQueue`, `asyncsim.model.wakes`): a ready CPU op takes any free worker, in the
  order ops became ready.
- each GPU i has two in-order lanes (CUDA streams): "gpu{i}/compute" and "gpu{i}/copy". Their
  queues take ops in issue order; the lane waits for the head op's dependencies, then runs it.
  `copyto` between devices runs on the GPU's copy lane (kind "copy", priced by `profile.links`).

`mode='sync'` is MXNet's NaiveEngine: each op runs to completion inside its issuing call, then the
frontend pays t3 (a blocker after every op). `max_inflight=k` makes the frontend wait (a
`simpy.Container` of k slots) before issuing while k issued ops are unfinished.

Memory: an op's fresh output is reserved on its device when the op's issue starts; it is released
once the frontend has freed the var and every op reading or writing it has finished. Each change
adds a sample (t, device, live_bytes); `meta["mark_samples"]` says, for every region begin and
end (label, begin), how many samples came before it, so that what was live at a region's ends is
exact even when frees share its instant (`asyncsim.model.rss` reads it). Times are seconds of
simulated time from 0.

Pricing is `asyncsim.model.prices`'s, blocker costs the frontend's (`asyncsim.model.issue`).

The host (`asyncsim.model.host`, only when the profile asks for it, so `Profile.ideal` keeps the
closed forms exact): idle CPU workers take `profile.dispatch` to wake up, and the thread that wakes
one pays `profile.wake`, CPython's GIL (the frontend
holds it while it runs; a worker for an op's latency, again when its kernel returns, and for
`gil` after the op; hand-overs cost a wake-up, a waiter forces one after `profile.switch`),
buffers released by the worker that finishes their last op (`profile.release`), a frontend
waiting in a blocker whose condition each finished op tests (`profile.recheck`), cores shared
by the workers that want them, the issuing frontend keeping its own (`asyncsim.model.cores`),
and memory-bound kernels crowding each other (`Cost.crowd`).

The last-level cache (`asyncsim.model.caches`, only with `profile.dram` > 0): an op's buffers that
have fallen out of it cost main memory's speed. The run predicted then follows a warm-up run of
the same program, simulated first, whose buffers the pool holds, as realexec's measurements do.

Workers: a CPU worker process per `profile.workers`, but no more than the program has ops (the
others would never get one; see `_worker_processes`).

Not modelled: an op's own threads (its cost is taken to include whatever threads it uses; the
calibrated costs are measured with the workers and BLAS threads of the run), the first touch of
fresh memory (page faults; a warm-up run has paid them), caches nearer the core than the last
level, and those that a kernel leaves cold for the Python work after it, wake-ups that take
longer the longer a thread slept, Python's garbage collector, memory capacity limits, and
errors raised inside ops.
"""

from __future__ import annotations

from collections import deque

import simpy

from asyncsim.model import host
from asyncsim.model.caches import LastLevelCache
from asyncsim.model.deps import DepTracker
from asyncsim.model.issue import FRONTEND, FrontendProcess
from asyncsim.model.light import LightRules
from asyncsim.model.prices import Pricing, RecentKinds
from asyncsim.model.profile import Profile, ProfileError, device_kind
from asyncsim.nd.program import Op, Program
from asyncsim.nd.record import check_workload, record
from asyncsim.nd.trace import Span, Trace, device_lanes

__all__ = ["FRONTEND", "MODES", "predict", "simulate"]

MODES = ("async", "sync")


class _Queue:
    """A lane's queue, as a SimPy Store of unbounded capacity gives its items (in order, to its
    getters in order, a get answered at once when an item waits), without the Store's event per
    put: a ring allreduce on 16 devices puts two million ops. Items are a deque, so a backlog of a
    million ops stays O(1) per get."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.items: deque = deque()
        self.getters: deque = deque()

    def put(self, item) -> None:
        if self.getters:
            self.getters.popleft().succeed(item)
        else:
            self.items.append(item)

    def get(self) -> simpy.Event:
        event = self.env.event()
        if self.items:
            event.succeed(self.items.popleft())
        else:
            self.getters.append(event)
        return event


class _Model(FrontendProcess, Pricing, LightRules):
    """One simulation run: the shared state that the processes (the lanes below, the frontend in
    `asyncsim.model.issue`) and the op pricing (`asyncsim.model.prices`) read and update."""

    def __init__(self, program: Program, profile: Profile, mode: str, max_inflight: int | None,
                 before: LastLevelCache | None = None):
        self.program, self.profile, self.sync_mode = program, profile, mode == "sync"
        self.env = env = simpy.Environment()
        self.tracker = DepTracker()
        self.ops: list[Op] = []  # position in issue order -> op
        self.durations: list[float] = []  # position -> seconds on its lane
        self.kinds: list[str] = []  # position -> "exec" or "copy"
        self.in_order: list[bool] = []  # position -> whether its lane is an in-order stream
        self.rules: dict = {}  # (op name, device, source device) -> pricing and lane
        # the kinds of op issued lately, where issuing kinds in turn costs more (`profile.mix`)
        self.kinds_issued = RecentKinds(profile.mix) if profile.mix else None
        self.names_issued: set = set()  # op names issued so far (`profile.first_kind`)
        self.done_events: dict = {}  # position -> Event a blocker waits on
        self.stream_ready: set = set()  # stream ops whose dependencies are met
        self.stream_waits: dict = {}  # position -> Event its stream waits on
        self.inflight = 0
        self.idle_event = None  # Event a waitall waits on
        # a waitall of a program that runs anything on a GPU also waits for the devices
        self.gpu_program = ("gpu" if any(device_kind(d) == "gpu" for d in program.devices)
                            else "cpu")
        self.slots = simpy.Container(env, max_inflight, init=max_inflight) if max_inflight else None
        # the engine's table (`profile.table`): the lowest unfinished position, the positions
        # above it already finished, and the frontend's wait (position to pass, event)
        self.low, self.finished_above, self.table_wait = 0, set(), None
        self.touching: dict = {}  # var -> count of unfinished ops that read or write it
        self.freed: set = set()  # vars dropped by the frontend but still touched
        self._init_light()  # (the engine's small elementwise results: `asyncsim.model.light`)
        # the low-water mark is followed for the table's wait and the light results' deletion
        self.track_low = bool(profile.table) or self.light_on
        # when each buffer of a dropped var was released since the frontend's last push or
        # blocker: the compiled engine gives them back there (`profile.reclaim` each)
        self.unclaimed: list[float] = []
        # small dropped vars whose deletion waits for a run of them (`profile.drop_batch`)
        self.drops: list | None = [] if profile.native and profile.drop_batch else None
        self.pinned: set = set()  # (with drops) cpu vars that copies from a GPU wrote
        # (with drops) the done ones of the last run, by shape: [(dtype, bytes)], still live
        # until a fresh cpu output of their shape and dtype takes one, or a hand-over or
        # blocker gives them back (as realexec.cpu.drops keeps them)
        self.stash: dict = {}
        self.reserved: dict = {}  # var -> (device, bytes) while its bytes are live
        # the host's last-level cache (`profile.dram` > 0): which bytes an op finds cold, from
        # the pool a run `before` this one left
        self.caches = (LastLevelCache(profile.llc, profile.dram, program.vars, before)
                       if profile.dram else None)
        self.live = {device: 0 for device in program.devices}
        self.memory = [(0.0, device, 0) for device in program.devices]
        self.spans: list[Span] = []
        self.marks: list = []
        self.open_marks: dict = {}
        self.mark_samples: list = []  # (label, begin, memory samples before the mark)
        # every CPU device (cpu(0) is "cpu", cpu(i) "cpu{i}") has memory of its own, and its
        # ops go to the one ready queue of `profile.workers` CPU workers (the same cores), as
        # realexec runs them; `trace.device_lanes` shows an op of cpu(i) on "cpu{i}/w.." lanes
        cpus = sorted({d for d in program.devices if device_kind(d) == "cpu"} | {"cpu"})
        workers = _worker_processes(program, profile)
        self.host = host.Host(self, profile, mode, workers=workers) if profile.contended else None
        self.gil = self.host.gil if self.host else None
        self.pool = pool = self.host.queue if self.host else _Queue(env)
        self.pools = dict.fromkeys(cpus, pool)
        for k in range(workers):
            worker = self.host.worker if self.host else self._worker
            env.process(worker(f"cpu/w{k}", pool, False))
        self.cpu_queues = [pool]
        self.queue_of: list = []  # position -> the queue its op runs from
        self.streams = {}
        for i in range(profile.gpus):
            for part in ("compute", "copy"):
                self.streams[f"gpu{i}", part] = store = _Queue(env)
                env.process(self._worker(f"gpu{i}/{part}", store, True))
        env.process(self._frontend())

    # -- lanes --------------------------------------------------------------------------------
    def _dispatch(self, position: int) -> None:
        """`position` has its dependencies met: queue it, or wake the stream waiting for it."""
        if not self.in_order[position]:
            self.queue_of[position].put(position)
            return
        event = self.stream_waits.pop(position, None)
        if event is None:
            self.stream_ready.add(position)
        else:
            event.succeed()

    def _worker(self, lane: str, queue: _Queue, in_order: bool):
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
                    self.unclaimed.append(self.env.now)
        event = self.done_events.pop(position, None)
        if event is not None:
            event.succeed()
        self.inflight -= 1
        if not self.inflight and self.idle_event is not None:
            self.idle_event.succeed()
            self.idle_event = None
        if self.slots is not None:
            self.slots.put(1)
        if self.track_low:
            self._lower_mark(position)
        return released

    def _lower_mark(self, position: int) -> None:
        """`position` finished: move the lowest unfinished position past it and every finished
        one above, and let a frontend waiting for the table go once it is past its mark."""
        if position != self.low:
            self.finished_above.add(position)
            return
        self.low += 1
        while self.low in self.finished_above:
            self.finished_above.remove(self.low)
            self.low += 1
        if self.table_wait is not None and self.low > self.table_wait[0]:
            self.table_wait[1].succeed()
            self.table_wait = None

    # -- memory ---------------------------------------------------------------------------------
    def _reserve(self, var: int, stashed: bool = True) -> bool:
        """`var`'s bytes become live, or (`stashed`, on cpu(0)) it takes a dropped result's
        buffer kept for it, whose bytes never stopped being live: the last kept of its shape,
        if that one has its dtype too. True if it took one."""
        info = self.program.vars[var]
        self.reserved[var] = (info.device, info.nbytes)
        if stashed and self.stash and info.device == "cpu":
            spare = self.stash.get(info.shape)
            if spare and spare[-1][0] == info.dtype:
                spare.pop()
                return True
        self.live[info.device] += info.nbytes
        self.memory.append((self.env.now, info.device, self.live[info.device]))
        return False

    def _stash_var(self, var: int) -> None:
        """A dropped small result whose ops are done is kept for a later output (`stash`): its
        var is gone, its bytes stay live."""
        if var in self.reserved:  # `_release` without the count: the bytes stay live
            info = self.program.vars[var]
            self.stash.setdefault(info.shape, []).append((info.dtype, self._release(var, False)))

    def _unstash(self) -> int:
        """The kept results no output took go back: their bytes (not yet counted)."""
        given = sum(nbytes for spare in self.stash.values() for _, nbytes in spare)
        self.stash.clear()
        return given

    def _give_back(self, device: str, nbytes: int) -> None:
        """`nbytes` of `device` are no longer live: one memory sample."""
        if nbytes:
            self.live[device] -= nbytes
            self.memory.append((self.env.now, device, self.live[device]))

    def _release(self, var: int, count: bool = True) -> int:
        """`var`'s buffer goes back; its bytes counted now, or (`count=False`) returned for the
        caller to count with others (one sample for a run, as realexec's `release_many`)."""
        device, nbytes = self.reserved.pop(var, (None, 0))
        self.tracker.forget(var)
        if self.caches is not None:
            self.caches.give_back(var)
        if device is None:
            return 0
        if count:
            self._give_back(device, nbytes)
        return nbytes


def _worker_processes(program: Program, profile: Profile) -> int:
    """How many CPU worker processes to start: `profile.workers`, but no more than the program
    has ops. An idle worker waits in the ready queue's line (or the host's sleepers) and each op
    takes the first in line, so with more workers than ops the last ones never run anything:
    leaving them out changes no span, and `--set workers=1000000000` stays a small model."""
    ops = sum(1 for instr in program.instrs if isinstance(instr, Op))
    return min(profile.workers, max(1, ops))


def _check_devices(program: Program, profile: Profile) -> None:
    for device in program.devices:
        number = device[3:]
        if device[:3] not in ("cpu", "gpu") or not (number.isdigit() or device == "cpu"):
            raise ValueError(f"program {program.name!r} uses unknown device {device!r}; "
                             f"devices are 'cpu', 'cpuN' and 'gpuN'")
        if device_kind(device) == "cpu":
            continue
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
    before = None
    if profile.dram:  # the run measured follows a warm-up run: its buffers, warm or cold
        warm_up = _Model(program, profile, mode, max_inflight)
        warm_up.env.run()
        before = warm_up.caches
        before.after_run()
    model = _Model(program, profile, mode, max_inflight, before)
    model.env.run()
    if model.inflight:
        raise RuntimeError(f"simulation of {program.name!r} stalled with {model.inflight} "
                           f"unfinished ops (a dependency cycle?)")
    meta = {"source": "predicted", "workload": program.name, "profile": profile.name,
            "mode": mode, "max_inflight": max_inflight, "params": dict(program.params),
            "workers": profile.workers, "gpus": profile.gpus,
            "mark_samples": [list(mark) for mark in model.mark_samples]}  # as JSON keeps it
    moved = {op.id: op.device for op in program.ops
             if op.device != "cpu" and device_kind(op.device) == "cpu"}
    return Trace(spans=device_lanes(model.spans, moved), memory=model.memory,
                 marks=model.marks, meta=meta)


def predict(workload, profile: Profile | str, mode: str = "async",
            max_inflight: int | None = None, device: str = "cpu", **params) -> Trace:
    """Record `workload(nd, **params)` and simulate it: the two steps in one. `device` is where
    arrays made without a ctx live ("cpu" or "gpu", as in `realexec.run`)."""
    check_workload(workload)
    return simulate(record(workload, device=device, **params), profile, mode=mode,
                    max_inflight=max_inflight)
