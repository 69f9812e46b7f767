"""The host's last-level cache in the SimPy model: which bytes an op finds cold, and what they cost.

A profile's costs are calibrated on warm data (the same buffers, op after op), so they are the
speed of an op whose data sits in the caches. A loop whose buffers outgrow the last-level cache
moves them from main memory instead: `y = x + 1` on 2000x2000 float32 took 1.3-1.6 ms with two
output buffers taking turns and 2.0 ms cycling through eight or more (the 2-core Intel VM,
numpy). With `profile.dram` > 0 (0: off, so the closed forms hold exactly):

- a *byte clock* per host counts the bytes the CPU's ops touch (their nbytes) in issue order;
- a buffer is *cold* for an op when more than `profile.llc` bytes were touched since it was last
  touched, or when no run touched it (fresh memory); the buffers are the op's inputs and output;
- buffers are reused as realexec's pool reuses them (`size_class`, the most recently given back
  first), so an output that takes a buffer just given back finds it warm. The buffer is chosen
  when the op is issued, from the buffers the model has given back by then;
- a run starts where a run before it left off (`after_run`), as a measured run follows a
  warm-up: the pool holds that run's buffers, each remembering when it was touched, up to
  `POOL_BYTES` (realexec's buffer cache; beyond it the buffers of the size classes given back
  least recently go back to the system, and the next of their size is fresh: cold);
- a cold byte moves at `profile.dram` bytes/s at best: an op adds `cold * (1/dram - pace)`
  seconds, where `pace` is its calibrated seconds per byte (flops included), and nothing when
  it was slower than that already (a sampler: compute hides the memory). A product or a
  convolution is the exception: it adds `cold / dram` whatever its pace, as BLAS copies its
  operands into packed panels before it computes on them, with nothing to hide that copy
  behind. A 128x512 by 512x2048 product ran 1.67-1.82 ms warm and 0.2-0.4 ms slower with its
  4 MiB weight evicted, where 4 MiB at `dram` (11.6 GB/s) takes 0.36 ms. This is a proxy: the
  product was as much slower with only its 256 KiB input or its 1 MiB output evicted, so a
  small cold operand is priced too low (2-core Intel Xeon VM; `notes/ACCURACY.md`, "Caches
  forget").
- the caches also forget with time (`profile.forget` seconds, 0: off): the last level is shared
  with the host's other tenants, whose data evicts ours while our ops look elsewhere. A buffer
  no op touched for longer than `forget` is cold, however few bytes went through in between.
  8 MiB in, 8 MiB out: 580 us back to back, 670 us after 15 ms idle, 940-1070 us after 40 ms,
  1150 us evicted. Time is known only when an op starts, so `asyncsim.model.places` prices this
  part, with `seen` and `stale` here; a run after another takes the buffers carried over as
  seen when it starts.

The caches also remember which worker lane wrote each buffer last (`owner`, passed on with the
buffer through the pool), for `foreign`: the bytes an op finds warm but that another lane wrote
(`asyncsim.model.places` prices them with `profile.foreign` and `foreign_gemm`). A buffer read on
another lane is shared from then on, as a core's modified lines become clean copies in both
cores' caches when another core reads them: no one pays for it again until the next write.

Only CPU ops that are not copies across a link are priced this way; a GPU's memory is its own.
Issue order stands for execution order: the engine's workers take ops in about the order they
were issued. Units: bytes, bytes per second, seconds.
"""

from __future__ import annotations

import math

from asyncsim.model.places import GEMM, part_of

_MIB = 1 << 20
_SMALL = 512
_LARGE_STEP = 2 * _MIB
_NEVER = -math.inf
POOL_BYTES = 1 << 30  # what realexec's buffer cache keeps of the buffers given back


def size_class(nbytes: int) -> int:
    """The buffer size that serves a request of `nbytes` (realexec's pool and this model): at
    most 512 bytes -> 512; up to 1 MiB -> the next power of two; above -> the next multiple of
    2 MiB."""
    if nbytes <= _SMALL:
        return _SMALL
    if nbytes <= _MIB:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _LARGE_STEP) * _LARGE_STEP


def make_room(spare: dict, last_given: dict, size: int, over: int) -> tuple[list, int]:
    """Take `over` bytes out of a full pool, as realexec's buffer cache and this model's pool
    both do: from `spare` (size class -> its buffers, oldest first) the oldest buffers of the
    size classes given back least recently (`last_given`: size class -> when), never of class
    `size`, the one being given back. Returns the buffers taken out and the bytes they held
    (less than `over` where the other classes hold less)."""
    taken, freed = [], 0
    for _, other in sorted((last_given.get(k, 0), k) for k, items in spare.items()
                           if items and k != size):
        items = spare[other]
        while items and freed < over:
            taken.append(items.pop(0))
            freed += other
        if freed >= over:
            break
    return taken, freed


def cold_price(op, cost, dram: float) -> float:
    """Seconds a cold byte adds to `op`, whose warm price is `cost`, where main memory moves
    `dram` bytes/s: `1 / dram` for a product or convolution, `1 / dram` less the op's own pace
    for any other op (nothing where it is slower than memory already)."""
    if part_of(op) == GEMM:
        return 1.0 / dram
    pace = (cost.time(op.nbytes, op.flops) - cost.latency) / op.nbytes
    return max(0.0, 1.0 / dram - pace)


class LastLevelCache:
    """Byte clock, buffers' last touches and the pool's given-back buffers of one run."""

    def __init__(self, llc: float, dram: float, variables, before: LastLevelCache | None = None):
        self.llc, self.dram, self.vars = llc, dram, variables
        self.clock = 0.0
        self.touched: dict[int, float] = {}  # live var -> the clock when its buffer was touched
        self.owner: dict[int, str] = {}  # live var -> the worker lane that last wrote its buffer
        self.seen: dict[int, float] = {}  # live var -> when an op last touched it (seconds)
        # size class -> given-back buffers' (last touch, last writer, when), oldest first
        self.spare: dict[int, list[tuple[float, str | None, float]]] = {}
        self.spare_bytes = 0
        self.given = 0  # buffers given back so far: a clock for `last_given`
        self.last_given: dict[int, int] = {}  # size class -> the clock at its last give-back
        if before is not None:  # the pool and the clock as the run before left them
            self.clock, self.spare_bytes = before.clock, before.spare_bytes
            # its clock starts at 0 again: a buffer carried over counts as seen at the start
            self.spare = {size: [(touch, owner, 0.0) for touch, owner, _ in stack]
                          for size, stack in before.spare.items()}
            self.given, self.last_given = before.given, dict(before.last_given)

    def take(self, var: int) -> None:
        """`var` is created: it takes the buffer given back last of its size class, if any."""
        size = size_class(self.vars[var].nbytes)
        stack = self.spare.get(size)
        if stack:
            self.spare_bytes -= size
            self.touched[var], owner, self.seen[var] = stack.pop()
            if owner is not None:
                self.owner[var] = owner
        else:
            self.touched[var] = _NEVER

    def give_back(self, var: int) -> None:
        """`var`'s buffer goes back to the pool, remembering when it was last touched; beyond
        `POOL_BYTES` the pool first lets go of the buffers of the size classes given back least
        recently, as realexec's does (if only its own class is left, this one goes). A var no
        CPU op touched is not the host's."""
        when = self.touched.pop(var, None)
        owner = self.owner.pop(var, None)
        seen = self.seen.pop(var, _NEVER)
        if when is None:
            return
        size = size_class(self.vars[var].nbytes)
        self.given += 1
        self.last_given[size] = self.given
        if self.spare_bytes + size > POOL_BYTES:
            _, freed = make_room(self.spare, self.last_given, size,
                                 self.spare_bytes + size - POOL_BYTES)
            self.spare_bytes -= freed
        if self.spare_bytes + size <= POOL_BYTES:
            self.spare.setdefault(size, []).append((when, owner, seen))
            self.spare_bytes += size

    def after_run(self) -> None:
        """The run is over: every buffer still held goes back, the least recently touched
        first (a workload's arrays are dropped when it returns), so the next run takes the
        most recently touched first."""
        for var in sorted(self.touched, key=self.touched.__getitem__):
            self.give_back(var)

    def cold_bytes(self, op) -> tuple[float, tuple[int, ...]]:
        """Bytes of `op`'s buffers that are cold (at most the op's nbytes), and the vars it finds
        warm; then the op touches them (the clock moves on by its nbytes)."""
        touched, clock, variables = self.touched, self.clock, self.vars
        cold, warm = 0, []
        for var in {*op.reads, op.out}:
            if clock - touched.get(var, _NEVER) > self.llc:
                cold += variables[var].nbytes
            else:
                warm.append(var)
        self.clock = clock = clock + op.nbytes
        for var in (*op.reads, op.out):
            touched[var] = clock
        return min(cold, op.nbytes), tuple(warm)

    def price(self, op, cost) -> float:
        """Seconds a cold byte adds to `op`: `cold_price`."""
        return cold_price(op, cost, self.dram)

    def stale(self, warm: tuple[int, ...], since: float) -> tuple[int, tuple[int, ...]]:
        """Bytes of `warm` that no op touched after time `since`, and the rest of `warm`."""
        seen, variables = self.seen, self.vars
        gone, kept = 0, []
        for var in warm:
            if seen.get(var, _NEVER) < since:
                gone += variables[var].nbytes
            else:
                kept.append(var)
        return gone, tuple(kept)

    def see(self, variables, now: float) -> None:
        """An op touches `variables` at time `now` (seconds)."""
        seen = self.seen
        for var in variables:
            seen[var] = now

    def foreign(self, warm: tuple[int, ...], out: int, lane: str) -> int:
        """Bytes of `warm` (the vars an op found in the caches) that a worker other than `lane`
        wrote last. A buffer read there is then shared (each core has its lines, clean: no one
        pays for them again until the next write), and `lane` is the last writer of `out`."""
        owner, variables = self.owner, self.vars
        moved = 0
        for var in warm:
            if owner.get(var, lane) != lane:
                moved += variables[var].nbytes
                del owner[var]
        owner[out] = lane
        return moved


__all__ = ["LastLevelCache", "cold_price", "make_room", "size_class"]
