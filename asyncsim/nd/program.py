"""Program: a workload recorded as instructions over numbered variables, without data.

A `Program` is what `asyncsim.record` produces and `asyncsim.simulate` replays. It is a flat list
of instructions in the order the frontend issued them:

- `Op`: run op `name` (from `asyncsim.nd.ops`) reading vars `reads`, writing var `out`. When
  `fresh` is true the op creates `out`, so its bytes are reserved when the op is issued.
- `Sync`: a blocker. `kind` is one of `BLOCKERS`; `var` is the var waited on (None: all).
  "cell" is a notebook cell boundary (`nd.cell()`): it waits for everything like `waitall`
  but hands nothing back and costs nothing more (the reader was idle between cells).
- `Free`: the frontend dropped the last handle to `var`; its bytes go back once every op that
  reads it has finished (the DESIGN.md memory rule).
- `Mark`: a `with nd.benchmark(label)` region begins (`begin=True`) or ends.

`Var` describes one variable: shape, dtype, device ("cpu", "gpu0", ...) and bytes. The real engine
(`realexec`) uses the same records, so one vocabulary describes both halves.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

BLOCKERS = ("wait_to_read", "waitall", "asnumpy", "item", "print", "cell")


@dataclass(slots=True)
class Var:
    id: int
    shape: tuple[int, ...]
    dtype: str
    device: str
    nbytes: int


@dataclass(slots=True)
class Op:
    id: int
    name: str
    reads: tuple[int, ...]
    out: int
    fresh: bool
    device: str  # where it runs; for copyto, the destination's device
    attrs: dict
    flops: float
    nbytes: int  # bytes read plus bytes written
    # for the ops of `ops.GEOMETRY` (else ""): a convolution's shape without its batch, a 2-d
    # product's shape and transposes; a profile may price each geometry apart
    geometry: str = ""

    @property
    def writes(self) -> tuple[int, ...]:
        return (self.out,)


@dataclass(slots=True)
class Sync:
    kind: str
    var: int | None


@dataclass(slots=True)
class Free:
    var: int


@dataclass(slots=True)
class Mark:
    label: str
    begin: bool


@dataclass(slots=True)
class Call:
    """The frontend ran Python that issues no op of its own: `kind` "block" is a Gluon block's
    call (finding its parameters, inferring shapes) around the ops its layer issues, "init" a
    parameter made at its block's first call (deferred initialisation) beyond its initialiser's
    ops, "trace" one op of a hybridized block's trace. A profile may price each
    ("frontend:<kind>"), a block call by its class too (`block`, e.g. "Dense":
    "frontend:block:Dense", else "frontend:block"); the real engine simply pays it."""

    kind: str
    block: str = ""


Instr = Op | Sync | Free | Mark | Call


@dataclass
class Program:
    """Instructions in frontend order, plus the table of every var they name."""

    name: str = "workload"
    vars: dict[int, Var] = field(default_factory=dict)
    instrs: list[Instr] = field(default_factory=list)
    params: dict = field(default_factory=dict)

    @property
    def ops(self) -> list[Op]:
        return [i for i in self.instrs if isinstance(i, Op)]

    @property
    def devices(self) -> list[str]:
        return sorted({v.device for v in self.vars.values()})

    def counts(self) -> Counter:
        """How many of each instruction kind (op names, blockers, frees, marks)."""
        c: Counter = Counter()
        for i in self.instrs:
            c[i.name if isinstance(i, Op) else i.kind if isinstance(i, Sync)
              else type(i).__name__.lower()] += 1
        return c

    def regions(self) -> list[str]:
        """Benchmark labels in the order they begin."""
        return [i.label for i in self.instrs if isinstance(i, Mark) and i.begin]

    def __repr__(self) -> str:
        c = self.counts()
        top = ", ".join(f"{k} x{v}" for k, v in c.most_common(6))
        size = f"{len(self.instrs)} instructions, {len(self.vars)} vars"
        return f"Program({self.name!r}: {size}; {top})"
