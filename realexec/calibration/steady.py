"""Measuring on a machine whose speed moves: pauses that keep the cores at work (`busy`), the
summary of rounds spread over seconds (`central`), a probe of the machine's speed of the moment
(`speed_probe`, and `product_probe` for BLAS), and a `Gate` that keeps measurements out of the
machine's slow spells, for `realexec.calibration` and benchmarks/accuracy.py; and
`BackgroundLoad`, what other processes and other machines took of the cores meanwhile.

A virtual machine's cores run slower for seconds after they idle. Measured on the 2-core VM
here: the same Python loop took 250-300 us instead of 140 us in about half of the samples taken
1.5 s of sleep apart, and in 2 of 25 taken between busy pauses; an idle round trip took
180-2000 us instead of 25-30 us right after a 0.1 s sleep. So a pause between measurements is
`busy`: every core kept at work, as during a run. And rounds spread over seconds, and their mean,
give what a run meets on average, where one burst reports whichever speed it caught (before
this, t1 came out 3.2 us in one calibration and 6.0 us in the next; since, 6.5, 6.6 and 6.5 us).
Spells of 10-20 s at two thirds of the usual speed are another matter: `Gate`.
Units: seconds.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import numpy as np


def at_once(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` now: a step taken without a `Gate` (a quick calibration's)."""
    return fn(*args, **kwargs)


def busy(seconds: float, threads: int | None = None) -> None:
    """Keep `threads` cores (default: all) at work for `seconds`: realexec's own sampler (a
    numba loop that drops the GIL, tens of microseconds a call) on that many threads. Not BLAS
    products: BLAS's pool threads spin on for a while after the last call, into what is
    measured next. A pause that sleeps instead lets this kind of machine slow its idle cores
    down (see the module docstring)."""
    if seconds <= 0:
        return
    from realexec.cpu.kernels import KERNELS

    count = threads or os.cpu_count() or 1
    sample, attrs = KERNELS["uniform"], {"low": 0.0, "high": 1.0, "seed": 0}
    deadline = time.perf_counter() + seconds

    def work():
        out = np.empty(4096, dtype=np.float32)
        while time.perf_counter() < deadline:
            sample((), out, attrs)

    others = [threading.Thread(target=work, daemon=True) for _ in range(count - 1)]
    for t in others:
        t.start()
    work()
    for t in others:
        t.join()


def central(samples) -> float:
    """The mean of the middle 60% of `samples` (all of them when fewer than five): a mean, as
    the machine's two speeds mix, without the rare stall that a mean alone would take in."""
    values = np.sort(np.asarray(samples, dtype=float))
    cut = int(len(values) * 0.2) if len(values) >= 5 else 0
    return float(values[cut:len(values) - cut].mean())


def speed_probe(rounds: int = 7) -> float:
    """Seconds of a fixed piece of backend work on this thread, the median of `rounds`: the
    engine's compiled sampler on 1M floats (the cores' speed) and its add on two 8 MiB arrays
    (the caches' and memory's). The same probe taken when a profile was calibrated and when a
    workload is measured says how much faster or slower the machine runs meanwhile; it prices
    nothing. It does not catch every drift: on the 2-core Intel VM it stayed within 0.94-1.03
    of calibration's over three collections in which backend-bound scenarios moved by 13%."""
    from realexec.cpu.kernels import KERNELS

    sample, add = KERNELS["uniform"], KERNELS["add"]
    attrs = {"low": 0.0, "high": 1.0, "seed": 0}
    noise = np.empty(1 << 20, dtype=np.float32)
    x, out = np.ones(1 << 21, dtype=np.float32), np.empty(1 << 21, dtype=np.float32)

    def work():
        sample((), noise, attrs)
        add((x, x), out, {})

    return _median_seconds(work, rounds)


def product_probe(rounds: int = 7, side: int = 512) -> float:
    """Seconds of a `side`-cubed float32 product on one BLAS thread, the median of `rounds`: what
    `speed_probe` does not see. Products drift apart from the sampler and the add: on the 2-core
    Intel VM a 1024x512x2048 product ran 14-20% slower a quarter of an hour after its
    calibration while `speed_probe` stayed within 4% (`python benchmarks/breakdown.py
    memory_barrier`). Like `speed_probe`, it prices nothing."""
    import threadpoolctl

    a = np.random.default_rng(0).random((side, side), dtype=np.float32)
    out = np.empty_like(a)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        return _median_seconds(lambda: np.dot(a, a, out=out), rounds)


def _median_seconds(work, rounds: int) -> float:
    """The median seconds of `rounds` calls of `work`, after one untimed call."""
    work()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


SLOW = 1.2  # a probe this much over the fastest one marks the machine's slow state
HELD = 5  # a state the machine is in for most of this many looks is one it holds
LOOK_PAUSE = 0.25  # seconds of busy cores between two looks of a `Gate` that waits


class Gate:
    """Measure in the machine's usual state, not in its slow spells.

    The 2-core Intel VM runs at its usual speed with spells in which `speed_probe` takes about
    1.5x as long: from a single look to a minute, some hours none (`python
    benchmarks/spells.py` looks every half second and prints them). A calibration step or a
    measured run that met one prices or measures another machine, and averaging over spells
    does not converge in the seconds a step takes. So calibration
    (`realexec.calibration.measure`) and benchmarks/accuracy.py take each step in the usual
    state: `wait` until a probe is within `SLOW` of the fastest seen (the cores kept busy
    meanwhile, at most `patience` looks), run, and `holds` looks again after; `run` takes a
    step again (up to `retries` times) when the look after it says a spell began. The spells
    met are counted (`slow`, `waited`) and printed, not hidden. Drifts that stay under `SLOW`
    are not its business (a 1024x512x2048 product 14% slower a quarter of an hour after its
    calibration, the probe within 4%: `python benchmarks/breakdown.py memory_barrier` prints
    the products' rates).

    A gate without a reference learns the usual state from its looks, so steps taken before
    the machine first showed its usual speed passed against a slower one: `behind` counts
    them, and calibration is taken again whole when there are any
    (`realexec.calibration.calibrate`). Seen on the 2-core Intel VM: a calibration whose first
    probe took 2.2x the fastest of its later ones predicted every scenario 10-70% slow, the
    runs after it 1.5x faster than its probes.

    The usual state is one the machine holds, not its fastest blip: the fastest is the lowest
    median of the last `HELD` looks (a state seen in most of them), and a machine that stays
    over `SLOW` of it for a whole `patience` has moved: the gate takes the state it held then
    as the usual one (`moved` counts it). Seen on the 2-core Intel VM: 90% of the looks took
    1.4-1.7x the fastest, whose looks came alone or in pairs every few seconds
    (`spells.py --seconds 20`); with the fastest single look as the reference each step of a
    calibration waited out its patience (30 s), and a calibration was stopped after 20 minutes.

    `reference`: the probe's seconds in the usual state (a calibration's fastest probe), or None
    to learn it from the looks; `probe` is `speed_probe` (tests give their own)."""

    def __init__(self, reference: float | None = None, probe=None, patience: int = 120):
        self.fastest = reference
        self.probe = probe or speed_probe
        self.patience = patience
        self.slow = 0  # looks after a step that found a slow spell (the step was taken again)
        self.waited = 0  # looks before a step that found one (the step waited, or gave up)
        self.moved = 0  # waits out of patience, after which the state they held became usual
        self.starts: list[float] = []  # each take's look before it, in the probe's seconds
        self._last: float | None = None  # the last look, in the probe's seconds
        self._recent: collections.deque = collections.deque(maxlen=HELD)  # the last looks
        self._held = float("inf")  # the fastest state held during this wait

    @classmethod
    def of(cls, profile, patience: int = 120) -> Gate:
        """A gate in the state of the machine `profile` was calibrated on: its fastest speed
        probe, or, for a profile without probes (a preset), the fastest seen while looking."""
        probes = profile.meta.get("measurements", {}).get("speed_probe")
        return cls(min(probes) if probes else None, patience=patience)

    def look(self) -> float:
        """One probe, as a ratio to the fastest state held (which it and the looks before it
        may lower)."""
        seconds = self.probe()
        self._last = seconds
        self._recent.append(seconds)
        held = sorted(self._recent)[len(self._recent) // 2]  # of two, the slower
        self._held = min(self._held, held)
        if self.fastest is None or held < self.fastest:
            self.fastest = held
        return seconds / self.fastest

    def wait(self) -> float:
        """Look until the machine is in its usual state, at most `patience` looks (then go on:
        a machine that stays slow is measured as it is, and the state it held becomes the
        usual one); the last look's ratio."""
        self._held = float("inf")
        for k in range(self.patience):
            ratio = self.look()
            if ratio <= SLOW:
                return ratio
            self.waited += 1
            if k == self.patience - 1:
                self.moved += 1
                self.fastest = self._held
                return self._last / self.fastest
            busy(LOOK_PAUSE)
        return float("nan")  # patience < 1: no look at all

    def holds(self) -> bool:
        """Whether the machine is still in its usual state (a look after a step)."""
        ok = self.look() <= SLOW
        self.slow += not ok
        return ok

    def begin(self) -> None:
        """Wait for the usual state and note the look a take starts from (for `behind`)."""
        ratio = self.wait()
        if ratio == ratio:  # (NaN: no look, patience < 1)
            self.starts.append(self._last)

    def run(self, fn, *args, retries: int = 2, **kwargs):
        """`fn(*args, **kwargs)` taken in the usual state: again when the look after it found a
        slow spell, at most `retries` more times (the last take is kept whatever it met)."""
        return _take(self, fn, args, kwargs, retries)

    def behind(self) -> int:
        """How many takes started in a state over `SLOW` of the fastest look seen since: taken
        before the gate had seen the usual state, or out of patience."""
        return sum(start / self.fastest > SLOW for start in self.starts)

    def summary(self) -> dict:
        return {"fastest": self.fastest, "slow": self.slow, "waited": self.waited,
                "moved": self.moved, "behind": self.behind()}


def _take(gate, fn, args, kwargs, retries: int):
    """`Gate.run` and `Gates.run`: begin, take, look after; again while a spell began."""
    for attempt in range(retries + 1):
        gate.begin()
        out = fn(*args, **kwargs)
        if gate.holds() or attempt == retries:
            return out
    return None  # retries < 0


class Gates:
    """Gates on several probes taken as one: a step begins once each probe reads its usual
    state, and is taken again when any of them finds a spell right after it.

    The speed probe does not see every slow state. On the 2-core AMD VM six of 22 calibrations
    priced the square products at 75-84 GFLOP/s against 91-104 in the others, five of them
    LeNet's second convolution at 28-32 GFLOP/s against 35-43, for minutes, while the gate's
    speed probe passed each step as usual: the sampler and the add are memory-bound, products
    and convolutions (BLAS underneath) compute-bound. The product probes taken as those
    calibrations began and ended read as usual too, so the state came and went inside them.
    So the steps that price products and convolutions are gated on `product_probe` as well
    (`Gates.of_products`), and the steps taken on calibration's engine on its issue probe
    (the interpreter's state, which prices the frontend: `microbench.issue_probe`)."""

    def __init__(self, *gates: Gate):
        self.gates = gates

    @classmethod
    def of_products(cls, speed: Gate, reference: float | None = None,
                    patience: int = 120) -> Gates:
        """`speed` and a gate on `product_probe` (`reference`: its seconds in the usual state,
        None to learn it)."""
        return cls(speed, Gate(reference, probe=product_probe, patience=patience))

    @classmethod
    def of(cls, profile, patience: int = 120) -> Gates:
        """The speed and the product probe's gates in the state `profile` was calibrated in
        (`Gate.of`; a profile without product probes: the products' usual state learnt)."""
        products = profile.meta.get("measurements", {}).get("product_probe")
        return cls.of_products(Gate.of(profile, patience),
                               min(products) if products else None, patience)

    def look(self) -> float:
        """One look with each probe: the largest ratio."""
        return max(gate.look() for gate in self.gates)

    def wait(self) -> float:
        """Each gate's wait in turn; the largest ratio of their last looks."""
        return max(gate.wait() for gate in self.gates)

    def begin(self) -> None:
        for gate in self.gates:
            gate.begin()

    def holds(self) -> bool:
        return all([gate.holds() for gate in self.gates])  # every gate looks (and counts)

    def run(self, fn, *args, retries: int = 2, **kwargs):
        """`Gate.run` with every probe."""
        return _take(self, fn, args, kwargs, retries)

    def behind(self) -> int:
        return max(gate.behind() for gate in self.gates)


class BackgroundLoad:
    """Cores kept busy by other processes since this was made (`cores`): all busy CPU time of
    the machine (/proc/stat) minus this process's own and its ended children's, over the wall
    time; and the share of the cores' time a hypervisor gave to other machines (`stolen`); both
    0.0 where /proc is missing.

    A child is this job's own work: the process that compiles the training kernels on a fresh
    clone (`realexec.cpu.warm`) made the main job's first calibration warn of 0.19-0.22 cores of
    other load on a quiet machine. Stolen time is not another process's: on the 2-core Intel VM
    a loop on one core lost 15% of its time to steal with nothing else running here, and
    24-51% while the host was busy. Counted as other processes' load (as it was), a quiet
    machine read 0.6 cores busy, every test calibration was taken three times, and
    benchmarks/accuracy.py's wait for a quiet second always ran out."""

    def __init__(self):
        self.start = (time.perf_counter(), *self._stat(), self._own())

    @staticmethod
    def _stat() -> tuple[float, float]:
        """(busy, stolen) seconds of all cores since boot: user, nice, system, irq and softirq
        (guest time is inside user and nice already), and steal: time a core was ready to run
        while the hypervisor ran another machine."""
        try:
            with open("/proc/stat") as f:
                ticks = [int(v) for v in f.readline().split()[1:]]
        except OSError:
            return 0.0, 0.0
        user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
        hz = os.sysconf("SC_CLK_TCK")
        return (user + nice + system + irq + softirq) / hz, steal / hz

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def cores(self) -> float:
        wall, busy, _, own = self.start
        elapsed = max(time.perf_counter() - wall, 1e-9)
        return max(0.0, (self._stat()[0] - busy) - (self._own() - own)) / elapsed

    def stolen(self) -> float:
        """The share of the cores' running time (busy + stolen) the hypervisor took."""
        _, busy, steal, _ = self.start
        now_busy, now_steal = self._stat()
        ran, lost = now_busy - busy, now_steal - steal
        return lost / (ran + lost) if ran + lost > 0 else 0.0
