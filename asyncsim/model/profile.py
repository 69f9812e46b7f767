"""Profile: what each step of a program costs on one machine -- the contract between calibration
(`realexec.calibrate`, or the chapters' own tables) and simulation (`asyncsim.simulate`).

A Profile says
- `t1`: the frontend's cost to issue one op (seconds), unless a "frontend:" cost below overrides it
  for that op or group; `t3`: what a blocker costs the frontend to return once its wait is over;
  `t3_asleep` (0: t3), the same for a blocker whose wait outlasted `spin` and fell asleep (a
  thread woken from a futex, not one watching a counter: 15-30 us against 0.4 on a VM);
- `workers` CPU worker lanes (MXNet's MXNET_CPU_WORKER_NTHREADS), `cores`, `gpus` (each GPU has a
  compute stream and a copy engine lane);
- `costs`: `Cost`s keyed "DEVICE:NAME" where DEVICE is "cpu", "gpu" or "frontend" and NAME is an op
  ("DEVICE:graph", a hybridized graph: its latency is what the graph's kernel adds per member op
  to their sum, but for a graph that a compiled worker runs whole: `jit.Graph.compiled`, with
  `native`)
  name from `asyncsim.nd.ops`, an op group (create, elementwise, reduce, dot, copy) or "*" (a
  fallback, not for "frontend", whose fallback is t1); "DEVICE:broadcast" prices a binary op whose
  operands' shapes differ, "DEVICE:NAME@GEOMETRY" a convolution or 2-d product of one geometry
  (`asyncsim.model.rules`: which key prices an op, and the pricing methods Profile inherits);
- `links`: the copy cost of `copyto` between devices, keyed "cpu->gpu", "gpu->cpu", "gpu->gpu",
  and optionally "gpu->host": a blocker's copy of a GPU array into fresh (pageable) host memory
  (asnumpy, item, print of GPU data; without it such a blocker is priced as on the CPU);
- the GPU's host side (0 by default): `gpu_issue`, what issuing an op on a GPU adds to the
  frontend's cost of it (a device buffer, the stream bookkeeping); `gpu_wait`, what a blocker
  that waited for GPU work adds (the lane thread handing the op back, an event's synchronize);
  `gpu_settle`, what a waitall adds in a program that uses a GPU (every stream synchronised);
- `free`: frontend seconds to drop a buffer's last handle (with runs of drops, `drop_batch`: a
  small result whose ops are done; `free_pending` and `free_large` price the others); `meta`:
  where the numbers came from;
- "frontend:<blocker>" costs (asnumpy, print, item, wait_to_read, waitall): what a blocker adds to
  t3 on the frontend, priced on the bytes of the array it returns (a copy, formatting): the
  program's first of its kind, with cold code; "frontend:<blocker>:again", where present, a
  later one;
- a Cost may also price outgrown caches (`cache`, `spill`, `cache2`, `spill2`) and how much
  kernels running beside it slow it (`crowd`; `asyncsim.model.cost` has the details);
- the host's contention, each off at its default (so the closed forms hold exactly): `dispatch`,
  the seconds a sleeping thread takes to wake up (an idle CPU worker handed an op, a thread handed
  the GIL); `wake`, what waking a sleeping thread costs the thread that wakes it (a push or a
  finished op handing an idle worker its op, a GIL release to a sleeping waiter: a system call,
  on a virtual machine an interrupt to another virtual CPU); `gil`, Python seconds a CPU worker
  spends per op outside its kernel, holding the GIL (while the GIL is modelled, the running
  frontend and each op's latency hold it too); `release`, what a worker adds (holding the GIL)
  when an op it finishes frees a dropped buffer; `recheck`, what a worker adds per op while the
  frontend sleeps in a blocker waiting for it (it tests the blocker's condition); `startup`,
  what the first op of a fresh engine adds to the frontend (code and threads that never ran:
  cold caches, first wake-ups); `first_kind`, what the first issue of each later op name adds
  (that kind's own frontend code, cold); `handover`, the seconds a thread asleep on the GIL
  takes to run once the GIL is let go (0: `dispatch`, as a queue's wake-up): the woken thread
  takes the GIL then only if it is still free; `switch`, CPython's switch interval
  (`sys.getswitchinterval()`): how long a thread waits for the GIL before the holder must hand
  it over; `spin`, how long a blocker spins before it sleeps (a frontend whose wait
  ends within it is awake and takes a released GIL at once); `cores`, which matters when fewer
  than workers + 1. `asyncsim.model.host` has the rules (the GIL's in `asyncsim.model.gil`).

A Cost (`asyncsim.model.cost`, with the cost keys' checks) is `latency + nbytes / bandwidth +
flops / peak` seconds. Units: seconds, bytes, bytes per second, flops per second. JSON files hold
the same fields; `load` rejects an unknown key, a negative cost or a non-number with one line
naming it and what is accepted (`asyncsim.model.fields`: the JSON form and the checks).

`llc`, `dram` (0: off): the host's last-level cache in bytes and main memory's bytes/s, for the
data a loop has let fall out of the caches (`asyncsim.model.caches`).

`reclaim` (0: off; with `native`): what a push adds when it gives back buffers whose ops finished
after their last handle was dropped (the compiled engine gives them back there, not at the drop).
`drop_batch` (0: off): small dropped results deleted together, that many at a time (the done ones
of a full run kept for the next outputs of their shape: `asyncsim.model.issue`); `take` (0: off):
what an issue saves when its output takes one of those kept results. `light` (0: off; with
`native`): the engine keeps small elementwise results in its compiled state, at `light` a push
and `light_flush` a drop made while another waits for its push (`asyncsim.model.light`).

`after_gemm` (0: off): the factor by which a streaming CPU op's bytes time stretches when it runs
on a worker within `asyncsim.model.places.AFTER_GEMM_S` of a product or convolution there (costs
are calibrated on kernels that follow their own kind; a training loop's bias adds and relus
follow products).

`mix` (0: off): what issuing ops of several kinds in turn adds to the frontend's price of each,
1 + mix (1 - 1/k) for k kinds among the last ops issued (`asyncsim.model.prices`); issue costs are
timed in a loop of one kind, which keeps one path through the frontend's code hot.

`rss_keep`: bytes of freed buffers the allocator keeps resident (`asyncsim.model.rss`). `fitted`
(read from meta["fitted"]): the printed numbers a preset was fitted to.

The built-in presets: "ideal" (every op costs exactly t2 on any lane, the book's t1/t2/t3 model),
"book", "book-zh" and "book-torch" (one per book machine, from the chapters' printed numbers;
see `asyncsim.model.book`).
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field
from pathlib import Path

from asyncsim.model import fields
from asyncsim.model.cost import (
    COST_FIELDS,
    LINKS,
    READBACK,
    Cost,
    ProfileError,
    check_key,
    device_kind,
    is_link_copy,
)
from asyncsim.model.rules import Rules


@dataclass
class Profile(Rules):
    name: str
    t1: float
    t3: float
    workers: int = 1
    cores: int = 2
    gpus: int = 0
    costs: dict[str, Cost] = field(default_factory=dict)
    links: dict[str, Cost] = field(default_factory=dict)
    free: float = 0.0
    dispatch: float = 0.0
    wake: float = 0.0
    gil: float = 0.0
    release: float = 0.0
    switch: float = 5e-3
    spin: float = 0.0
    recheck: float = 0.0
    startup: float = 0.0
    # what the first issue of each op name after the program's first op adds (the frontend's
    # code for that kind of op cold; the first op pays `startup`, which covers its own)
    first_kind: float = 0.0
    handover: float = 0.0
    gpu_issue: float = 0.0
    gpu_wait: float = 0.0
    gpu_settle: float = 0.0
    # 1: gpu->cpu copies land in pageable host memory, as a plain `.to('cpu')` or `.numpy()` in
    # PyTorch/TensorFlow does: the copy runs on the compute stream and the frontend waits for it,
    # so it cannot overlap compute (the book's 3.13 s against 0.12 + 2.16 s). 0: pinned buffers
    # and a copy engine, as realexec does and MXNet's copyto did.
    pageable: int = 0
    # bytes of freed buffers the process's allocator keeps resident for reuse (0: every freed
    # buffer goes back to the system); `asyncsim.model.rss` predicts resident memory with it
    rss_keep: float = 0.0
    # 1: CPU workers are compiled (realexec's default engine): an op of `ops.COMPILED` that does
    # not broadcast, or broadcasts as a bias (`ops.native_broadcast`), runs and completes without
    # the GIL, and its worker's Python costs (`gil`, `release`, `recheck`) are not paid; other
    # ops still come back to Python and pay them
    native: int = 0
    # seconds an idle compiled worker spins before it sleeps (with `native`): an op it is handed
    # meanwhile costs no wake-up
    idle_spin: float = 0.0
    # ops the engine's table holds (realexec's compiled engine: `NativeEngine`'s capacity): the
    # push of op p waits until every op before p - table has finished, so the frontend runs at
    # most that far ahead of the lanes (8.5's ResNet-18 on a GPU: about 8 batches, which bounds
    # its memory). 0: no bound, as MXNet's engine, whose queue grows as long as the frontend
    # issues
    table: int = 0
    # the host's last-level cache (`asyncsim.model.caches`; dram 0: off): a CPU op's buffers that
    # more than `llc` bytes of other data went through since they were last touched come from
    # main memory, whose bytes move at `dram` bytes/s at best (costs are calibrated warm)
    llc: float = 0.0
    dram: float = 0.0
    # (with dram) how much each other kernel moving cold bytes at the same moment stretches the
    # time an op's own cold bytes take (cold bytes / dram): the workers share one memory bus
    # (`asyncsim.model.host`); 1: each of two takes twice as long, 0: off
    dram_crowd: float = 0.0
    # what issuing ops of several kinds in turn adds to the frontend's price of each (0: off):
    # an op issued while k kinds were among the last `asyncsim.model.prices.MIX_WINDOW` issued
    # costs 1 + mix (1 - 1/k) times its price (t1 or its "frontend:" op cost; not the costs of
    # phases, backward's and a Trainer's, timed on mixed sequences already). A loop of one kind,
    # as issue costs are calibrated, keeps one path through the frontend's code hot
    # (`realexec.calibration.issuing.mixed_issue`)
    mix: float = 0.0
    # (with `native`) what a push adds when it gives back the buffers of dropped vars whose ops
    # have finished since the drop: realexec's compiled engine does that on the frontend, at its
    # next push (`NativeEngine._run_frees`); once per push that finds any. A drop whose ops had
    # finished already gives the buffer back at once, inside `free`. 0: off
    reclaim: float = 0.0
    # (with `native`) the frontend's dropped results of at most `issue.DROP_BYTES` on cpu(0)
    # are deleted together, this many at a time or at the next blocker or mark (realexec's
    # frontend: one call, one lock and one memory sample for the run); 0: each at its drop
    drop_batch: int = 0
    # (with `drop_batch`) what a drop costs the frontend instead of `free` when it is not a
    # small result whose ops are done: one whose ops are still running (realexec's engine keeps
    # its deletion waiting), or one too large for a run (given back alone, with its own lock and
    # memory sample); 0: `free`
    free_pending: float = 0.0
    free_large: float = 0.0
    # (with `drop_batch`) what an op's issue saves when its fresh output takes a result a run
    # of drops kept (realexec's frontend: a list pop and the var whole, against the pool's
    # lock, counts and memory sample and a new var); the issue costs are timed with outputs
    # from the pool. 0: off
    take: float = 0.0
    # (with `native`) the engine keeps small elementwise results in its compiled state
    # (`asyncsim.model.light`): a light push's issue price, with the drop of the result before it
    # that the push's call deletes; 0: the engine makes no light results. `light_flush`: a drop
    # made while another waits for its push, which deletes that one in a call
    light: float = 0.0
    light_flush: float = 0.0
    # how much slower a streaming CPU op (elementwise, reduction, copy, a layer's normalisation
    # or pooling) runs right after a product or a convolution on its worker, as a factor of its
    # bytes time (0 or 1: off); `asyncsim.model.host` says for how long
    after_gemm: float = 0.0
    # seconds per byte that an op's data, found in the caches but written last by another CPU
    # worker, adds: `foreign` for streaming ops, `foreign_gemm` for products (0: off; needs dram)
    foreign: float = 0.0
    foreign_gemm: float = 0.0
    # seconds after which a buffer no CPU op touched is out of the caches, however little went
    # through them meanwhile: the host's other tenants evict it (0: off; needs dram)
    forget: float = 0.0
    # what a blocker costs to return when its wait outlasted `spin` and it fell asleep (0: t3)
    t3_asleep: float = 0.0
    meta: dict = field(default_factory=dict)
    # per "DEVICE:NAME@" prefix: (len(costs) when built, the timed product geometries, the key
    # each untimed geometry resolved to); rebuilt when costs gain or lose a key
    _products: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        fields.check(self)

    # -- queries (the pricing methods: `Rules`, `asyncsim.model.rules`) --------------------
    @property
    def fitted(self) -> frozenset[tuple[str, str]]:
        """The printed numbers this profile was fitted to, as (scenario, label) pairs
        (`asyncsim.model.printed`): a preset reproduces them by construction, so only the others
        test it. Empty for a calibrated profile, which no scenario's number went into."""
        return frozenset(tuple(pair) for pair in self.meta.get("fitted", ()))

    @property
    def contended(self) -> bool:
        """Whether any host contention (wake-ups, the GIL, releases, re-checks, crowding, ops
        slowed after products, by data another worker wrote or by caches that forget, cold
        bytes sharing the memory bus) is
        modelled."""
        crowded = any(cost.crowd for key, cost in self.costs.items() if key.startswith("cpu:"))
        return bool(self.dispatch or self.wake or self.gil or self.release or self.recheck
                    or crowded or self.after_gemm > 1.0
                    or (self.dram > 0 and (self.foreign > 0 or self.foreign_gemm > 0
                                           or self.forget > 0 or self.dram_crowd > 0)))

    # -- variants --------------------------------------------------------------------------
    def replace(self, **kv) -> Profile:
        """A copy with some values changed: t1=..., workers=..., or cost fields by dotted key,
        e.g. replace(**{"cpu:add_scalar.latency": 1e-3, "gpu->cpu.bandwidth": 12e9}).
        Values may be strings (from `--set key=value`)."""
        doc = fields.override(self.to_dict(), kv)
        return Profile.from_dict(doc, source=f"replace({', '.join(kv)})")

    # -- presets ---------------------------------------------------------------------------
    @classmethod
    def ideal(cls, t1=10e-6, t2=1e-3, t3=20e-6, workers=1, gpus=1) -> Profile:
        """Constant costs: issue t1, every op (and every copy) exactly t2 on any lane, return t3."""
        each = Cost(latency=t2)
        return cls(name="ideal", t1=t1, t3=t3, workers=workers, gpus=gpus,
                   costs={"cpu:*": each, "gpu:*": _copy.copy(each)},
                   links={k: _copy.copy(each) for k in LINKS},
                   meta={"source": "constant costs", "t2": t2})

    @classmethod
    def book(cls) -> Profile:
        """The chapters' own machines, from their reported times (derivations in
        asyncsim.model.book)."""
        from asyncsim.model import book

        return book.book()

    @classmethod
    def preset(cls, name: str) -> Profile:
        """A built-in profile by name: 'ideal', or a book machine's ('book', 'book-zh',
        'book-torch'; `asyncsim.model.book`)."""
        from asyncsim.model import book
        presets = {"ideal": cls.ideal, **book.PRESETS}
        if name not in presets:
            raise ProfileError(f"unknown profile preset {name!r}; presets: {', '.join(presets)} "
                               f"(or a JSON file saved by Profile.save)")
        return presets[name]()

    # -- files (the JSON form and its checks: `asyncsim.model.fields`) ---------------------
    def to_dict(self) -> dict:
        """Plain JSON-able values; a Cost field left at its default is omitted (no Infinity)."""
        return fields.to_dict(self)

    @classmethod
    def from_dict(cls, doc: dict, source: str = "profile") -> Profile:
        """Build and validate; every problem is one ProfileError line that names the key."""
        return cls(**fields.from_dict(doc, source))

    def save(self, path: str | Path) -> None:
        fields.write(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        return cls.from_dict(fields.read(path), source=str(path))


__all__ = ["COST_FIELDS", "Cost", "LINKS", "READBACK", "Profile", "ProfileError", "check_key",
           "device_kind", "is_link_copy"]
