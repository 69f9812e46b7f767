"""The host's contention in the SimPy model: threads waking up, the GIL, cores, memory crowding.

`asyncsim.simulate` uses a `Host` only when its Profile asks for one of these effects
(`Profile.contended`); otherwise CPU workers hold their lane for exactly the op's cost, which is
what the book's closed forms assume. With a Host:

- wake-ups (`profile.dispatch`): a CPU worker with nothing to do sleeps. Each op queued wakes
  one sleeper, which looks at the queue `dispatch` seconds later and takes the op at its head if
  a busy worker has not taken it meanwhile (a worker that finishes an op takes the next one at
  once, so a chain of ops stays on one worker).
- waking (`profile.wake`): a thread that wakes a sleeping one pays for it: a push or a finished
  op that hands an idle worker its op, and a worker whose GIL release (before its kernel)
  signals a sleeping waiter -- holding the GIL meanwhile, as CPython signals under the GIL's
  own mutex (the GIL free while the waker paid let the woken thread take it at nearly every op,
  where the real engine hands it over at about one op in ten). On a virtual machine each is an
  interrupt to another virtual CPU, several microseconds.
- after each op (`profile.gil`, `profile.release`): the worker completes it in Python, holding
  the GIL, for `gil` seconds, plus `release` for each buffer it was the last to use that the
  frontend has dropped (the worker releases it then). It keeps the GIL into its next op, if one
  is queued, and lets it go only when it finds none (blocked in the queue's get).
- a blocked frontend (`profile.recheck`): while the frontend waits in a blocker (spinning or
  asleep), the worker that finishes an op tests the blocker's condition, and signals it only when
  it holds. Each op finished then costs its worker `recheck` more (measured whole, on a backlog
  of small ops).
- the GIL (`profile.gil` > 0; `handover`, `switch`): CPython's rules, in `asyncsim.model.gil`.
- cores, when `profile.cores` < workers + 1 (`asyncsim.model.cores`): the threads that want to
  run share the cores, each of n at `cores / n` of a core's speed once n exceeds them, as the
  operating system's scheduler shares them over an op's time. The frontend wants one while it
  issues, and gives it up when it blocks (realexec's blocker spins only while a core is free of
  busy workers, and its engine steers a worker kept behind a busy one onto the blocker's core:
  ten independent 256x256 products ran in 0.52x the time of ten chained ones within the 2 ms
  spin); a worker wants one from starting an op until it finds no next op, except while it
  waits for the GIL. Work is conserved, so a program's total moves little with the rule; where
  it shows is in who is slowed: `record_no_barrier` issued its first 50 batches beside two
  busy workers in 10.2-11.5 ms, where the rule before (the frontend's core its own, a worker
  waiting for a free one) said 7.0-7.6 and sharing says 11.4 (2-core AMD EPYC VM).
- crowding (a CPU cost with `crowd` > 0, memory-bound kernels, and convolutions, whose cost
  has no bytes term: their flops time stands for it): while such a kernel runs, each other
  crowding kernel running beside it stretches its bytes time by `crowd` (two cores sharing one
  memory system; re-timed whenever one starts or ends: `asyncsim.model.crowd`).
  Compute-bound kernels (crowd 0) neither stretch nor count. The bytes
  an op finds cold (`asyncsim.model.caches`) come over the memory bus instead, which the
  workers share more than the caches: with `profile.dram_crowd`, the time they take at `dram`
  is stretched by `dram_crowd` for each other kernel moving cold bytes at that moment, not by
  `crowd` (two cores streaming 16 MiB arrays from memory took 1.9-2.2x as long each as one
  alone, arrays of 1 MiB in the caches 1.0x: 2-core AMD EPYC VM).
- compiled workers (`profile.native`, realexec's default engine): an op of `ops.COMPILED` that
  does not broadcast, or broadcasts as a bias (`ops.native_broadcast`), and a hybridized graph
  of such ops (`jit.Graph.compiled`) are run and completed by compiled code, so they neither
  take nor wait for the GIL and pay no `gil`, `release` or `recheck`; a worker back from a
  Python op lets the GIL go before it. Other ops (convolutions,
  reductions) come back to Python as before.
  An idle compiled worker spins `profile.idle_spin` seconds before it sleeps: an op queued
  meanwhile starts at once, with no `dispatch` and no `wake` for whoever queued it.
- where an op runs (`profile.after_gemm`, `foreign`, `foreign_gemm`): what the op before it on
  its worker and data another worker wrote add to its bytes time (`asyncsim.model.places`).
NaiveEngine (`mode='sync'`) runs each op inside its issuing call: no wake-ups, no GIL contest;
the call returns after the op's `gil` (its completion).

Units: seconds, bytes per second. An op's span is its latency + bytes / bandwidth (stretched) +
flops / peak, plus the wait for the GIL after its kernel; `gil` and the rest follow the span.
"""

from __future__ import annotations

from functools import partial

from asyncsim.model.cores import Cores, elapse
from asyncsim.model.crowd import Crowd
from asyncsim.model.gil import Gil
from asyncsim.model.places import Places
from asyncsim.model.wakes import WakeQueue
from asyncsim.nd.ops import COMPILED
from asyncsim.nd.trace import Span


class Host:
    """The contention state of one simulation run (`model` is simulate's `_Model`)."""

    def __init__(self, model, profile, mode: str, workers: int | None = None):
        self.model = model
        self.env = env = model.env
        self.sync = sync = mode == "sync"
        self.dispatch = 0.0 if sync else profile.dispatch
        self.wake = 0.0 if sync else profile.wake
        self.hold = profile.gil
        self.release = profile.release
        handover = profile.handover or profile.dispatch
        self.gil = Gil(env, handover, profile.switch) if profile.gil and not sync else None
        self.dram_crowd = profile.dram_crowd if profile.dram else 0.0
        # every CPU device's workers share the cores (and the GIL): one process
        workers = profile.workers if workers is None else workers
        crowded = profile.cores < workers + 1 and not sync
        self.cores = Cores(env, profile.cores) if crowded else None
        # generators: seconds of a runnable worker's work, and of the frontend's, at their share
        # of the cores
        self.spend = self.cores.work if crowded else partial(elapse, env)
        self.front_spend = partial(self.cores.work, front=True) if crowded else self.spend
        self.crowd = Crowd(env, self.dram_crowd, self.cores)  # the crowding kernels running
        self.spin = profile.spin
        self.waiting = False  # the frontend is blocked (and holds no core)
        self.asleep = False  # ... and has stopped spinning
        self.spinning = False  # the frontend's last wait ended before it fell asleep
        self.recheck = 0.0 if sync else profile.recheck
        self.blocked = None  # the event the frontend's blocker waits for, while it waits
        # position -> split cost: latency, bytes time, flops time, crowd, cold bytes' time
        self.parts: list[tuple[float, float, float, float, float]] = []
        self.native = bool(profile.native) and not sync
        self.idle_spin = profile.idle_spin if self.native else 0.0
        self.compiled: list[bool] = []  # position -> run by a compiled worker, without the GIL
        self.places = Places(profile, model.caches)  # what an op's worker adds to its cost
        self.queue = WakeQueue(self.env, self.idle_spin)  # every CPU device's ready ops

    @property
    def wakes(self) -> int:
        """Wake-ups of idle workers so far."""
        return self.queue.wakes

    def prepare(self, op, cost, link: bool, broadcast: bool = False, cold: float = 0.0,
                warm: tuple = (), cold_price: float = 0.0, from_dram: float = 0.0) -> None:
        """Split the op's lane cost: (latency with the GIL, bytes time, flops time (without the
        GIL, and not stretched by crowding), crowd, the part of the bytes time its cold bytes
        take), and note whether a compiled worker runs it without the GIL (`Profile.native`).
        `broadcast`: it broadcasts in a way the compiled worker leaves to Python
        (`ops.native_broadcast` says which it keeps). `cold`: seconds its data's trips from main
        memory add (`asyncsim.model.caches`), bytes time; `from_dram`: those bytes' whole time
        at `dram` (what `dram_crowd` stretches); `warm`: the vars it finds in the caches, priced
        when it starts if another lane wrote them or no op touched them for long (`cold_price`:
        seconds a cold byte adds)."""
        self.places.prepare(op, link, warm, cold_price)
        if link:
            self.parts.append((cost.latency, cost.bytes_time(op.nbytes / 2), 0.0, 0.0, 0.0))
            self.compiled.append(False)
            return
        by_bytes = cost.bytes_time(op.nbytes) if op.nbytes else 0.0
        by_flops = op.flops / cost.peak if op.flops else 0.0
        if cost.crowd and not by_bytes:  # priced by flops alone (a convolution geometry): that
            by_bytes, by_flops = by_flops, 0.0  # time is what kernels beside it stretch
        by_bytes += cold
        from_dram = min(from_dram, by_bytes) if self.dram_crowd else 0.0
        self.parts.append((cost.latency, by_bytes, by_flops, cost.crowd if by_bytes else 0.0,
                           from_dram))
        self.compiled.append(self.native and (op.name in COMPILED and not broadcast or (
            op.name == "graph" and op.attrs["graph"].compiled)))

    # -- the frontend's waits -------------------------------------------------------------------
    def frontend_waits(self, event) -> None:
        """The frontend blocks until `event`: it gives its core up at once (realexec's engine
        steers a worker kept behind a busy one onto it, `realexec.engine.placement`), spins for
        `spin` seconds, then falls asleep."""
        if event.triggered:
            return
        self.waiting = True
        self.blocked = event
        if self.cores is not None:
            self.cores.leave(front=True)
        if self.spin:
            self.env.timeout(self.spin).callbacks.append(lambda _: self._sleep(event))
        else:
            self._sleep(event)

    def _sleep(self, event) -> None:
        if not event.triggered:
            self.asleep = True

    def frontend_woke(self) -> None:
        """The frontend's wait is over; `spinning` says it never fell asleep."""
        self.blocked = None
        if not self.waiting:
            return
        if self.cores is not None:
            self.cores.join(front=True)
        self.spinning = not self.asleep
        self.waiting = self.asleep = False

    def frontend_done(self) -> None:
        if self.cores is not None and not self.waiting:
            self.waiting = True
            self.cores.leave(front=True)

    def frontend_blocked(self) -> bool:
        """The frontend waits in a blocker: each op a worker finishes tests the blocker's
        condition (see `recheck` in the module docstring)."""
        blocked = self.blocked
        return blocked is not None and not blocked.triggered

    # -- workers --------------------------------------------------------------------------------
    def worker(self, lane: str, queue, in_order: bool):
        """A CPU worker's process: the simulator's `_worker` with the host's effects."""
        model, env, items = self.model, self.env, queue.items
        spans, ops, parts, finish = model.spans, model.ops, self.parts, model._finish
        timeout, gil, hold, cores = env.timeout, self.gil, self.hold, self.cores
        places = self.places
        runnable, sync, spend = False, self.sync, self.spend
        while True:
            if not items:
                if gil is not None:  # blocked in the queue's get: the GIL goes
                    gil.release(lane)
                if runnable:
                    cores.leave()
                    runnable = False
                while not items:  # asleep until a put wakes us; awake a wake-up later
                    event = env.event()
                    queue.sleepers.append((event, env.now))
                    spinning = yield event
                    if self.dispatch and not spinning:
                        yield timeout(self.dispatch)
            if cores is not None and not runnable:
                cores.join()
                runnable = True
            if gil is not None and items and not self.compiled[items[0]]:
                turn = gil.take(lane)  # held already after the last op, unless asked to drop it
                if turn is not None:
                    yield from self.unscheduled(turn)
            if not items:  # read with the GIL and on a core: another worker emptied it meanwhile
                continue
            position = items.popleft()
            latency, by_bytes, by_flops, crowd, from_dram = parts[position]
            if places.on:
                by_bytes, stale = places.start(lane, position, env.now, by_bytes)
                if stale and self.dram_crowd:
                    from_dram += stale
            if self.compiled[position]:
                if gil is not None:  # back in the compiled loop: no GIL
                    gil.release(lane)
                yield from self._compiled(lane, position, latency, by_bytes, by_flops, crowd,
                                          from_dram)
                continue
            start = env.now
            if latency:  # the call into the kernel, with the GIL
                yield from spend(latency)
            if gil is not None:
                if self.wake and gil.signals(lane):
                    # CPython signals the waiter inside the release, under the GIL's own mutex:
                    # no thread can take the GIL until the signal is sent
                    yield from spend(self.wake)
                gil.release(lane)
            if crowd or from_dram:
                yield from self.crowd.run(0.0, by_bytes, by_flops, crowd, from_dram)
            elif by_bytes or by_flops:
                yield from spend(by_bytes + by_flops)
            if gil is not None:  # the kernel returns into Python: the GIL again
                turn = gil.take(lane)
                if turn is not None:
                    yield from self.unscheduled(turn)
            op = ops[position]
            spans.append(Span(lane, op.name, op.id, start, env.now, model.kinds[position]))
            if places.after_gemm:
                places.ended(lane, position, env.now)
            if sync and hold:  # NaiveEngine: the issuing call returns after the completion
                yield timeout(hold)
            wakes = self.wakes
            self.queue.keeper = self.native  # back in the compiled loop, as after `_compiled`
            released = finish(position, op)
            self.queue.keeper = False
            after = released * self.release + (0.0 if sync else hold)
            after += (self.wakes - wakes) * self.wake  # idle workers handed what it made ready
            if self.recheck and self.frontend_blocked():
                after += self.recheck  # a blocked frontend tests its condition meanwhile
            if after:
                yield from spend(after)

    def unscheduled(self, event, front: bool = False):
        """Generator: a runnable thread (a worker, or the frontend) waits for `event` (the
        GIL), off the cores meanwhile."""
        if self.cores is None:
            yield event
            return
        self.cores.leave(front)
        yield event
        self.cores.join(front)

    def _compiled(self, lane: str, position: int, latency: float, by_bytes: float,
                  by_flops: float, crowd: float, from_dram: float):
        """A compiled worker runs op `position`: its kernel, then its completion, no GIL; it
        pays only for the idle workers it wakes (a futex wake each)."""
        model, env = self.model, self.env
        start = env.now
        if crowd or from_dram:
            yield from self.crowd.run(latency, by_bytes, by_flops, crowd, from_dram)
        else:
            yield from self.spend(latency + by_bytes + by_flops)
        op = model.ops[position]
        model.spans.append(Span(lane, op.name, op.id, start, env.now, model.kinds[position]))
        if self.places.after_gemm:
            self.places.ended(lane, position, env.now)
        wakes = self.wakes
        self.queue.keeper = True
        model._finish(position, op)
        self.queue.keeper = False
        after = (self.wakes - wakes) * self.wake
        if after:
            yield from self.spend(after)
