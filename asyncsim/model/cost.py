"""Cost: what one op or copy costs on a lane, and the checks that a profile's cost tables name
things a Profile can price and hold usable numbers (shared by `asyncsim.model.fields` for JSON
files, `--set` overrides and Profiles built directly).

A Cost is `latency + nbytes / bandwidth + flops / peak` seconds, with nbytes the op's bytes read
plus written (for a link: the bytes copied, half of that) and flops from `asyncsim.nd.ops`. Bytes
beyond `cache` move at `spill` bytes/s (caches outgrown) and bytes beyond a larger `cache2` at
`spill2` (the last cache level outgrown too: main memory); `crowd` says how much each other
crowding kernel beside it stretches its bytes time (`asyncsim.model.host` has the rules). Units:
seconds, bytes, bytes per second, flops per second; a field left at its default (0 or infinity)
adds nothing.

Cost keys are "DEVICE:NAME" with DEVICE one of `DEVICE_KINDS` and NAME an op of `asyncsim.nd.ops`,
an op group, `BROADCAST`, "*" (not for "frontend") or, for "frontend", a blocker; or
"DEVICE:NAME@GEOMETRY" for an op of `asyncsim.nd.ops.GEOMETRY` (one geometry of a convolution
or one shape of a 2-d product).
Link keys are `LINKS` and the optional `READBACK`. Every rejection is one `ProfileError` line
naming the key and what is accepted. This module does not import `asyncsim.model.profile`,
`fields` or `rules` (which build on it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from asyncsim.nd.ops import GEOMETRY, OPS
from asyncsim.nd.program import BLOCKERS

DEVICE_KINDS = ("cpu", "gpu", "frontend")
GROUPS = tuple(sorted({d.group for d in OPS.values()}))
LINKS = ("cpu->gpu", "gpu->cpu", "gpu->gpu")
READBACK = "gpu->host"  # a blocker's copy of GPU data into fresh host memory (an optional link)
CALLS = ("block", "init", "trace")  # "frontend:<kind>": a program.Call, Python that issues no op
AGAIN = ":again"  # "frontend:<blocker>:again": a program's later blocker of a kind (warm code)
PHASES = ("backward", "kvstore")  # "frontend:<phase>": the issue of ops autograd or a Trainer makes
BROADCAST = "broadcast"  # the key of a binary op whose operands' shapes differ
COST_FIELDS = ("latency", "bandwidth", "peak", "cache", "spill", "cache2", "spill2", "crowd")


class ProfileError(ValueError):
    """A profile value or key that cannot be used; the message is one line."""


@dataclass
class Cost:
    """Seconds to run one op: latency + nbytes / bandwidth + flops / peak, where bytes beyond
    `cache` (an op whose data outgrows the caches) move at `spill` bytes/s instead, and bytes
    beyond `cache2` (a larger level, outgrown too) at `spill2`. `crowd`: how
    much each other crowding kernel running beside it stretches its bytes time (memory
    bandwidth shared by cores; used by `asyncsim.model.host`)."""

    latency: float = 0.0
    bandwidth: float = math.inf
    peak: float = math.inf
    cache: float = math.inf
    spill: float = math.inf
    cache2: float = math.inf
    spill2: float = math.inf
    crowd: float = 0.0

    def time(self, nbytes: float, flops: float) -> float:
        return self.latency + self.bytes_time(nbytes) + flops / self.peak

    def bytes_time(self, nbytes: float) -> float:
        """Seconds that moving `nbytes` takes alone."""
        if nbytes <= self.cache:
            return nbytes / self.bandwidth
        near = self.cache / self.bandwidth
        if nbytes <= self.cache2:
            return near + (nbytes - self.cache) / self.spill
        return near + (self.cache2 - self.cache) / self.spill + (nbytes - self.cache2) / self.spill2


# numpy's print options at their defaults: an array of more than THRESHOLD elements is printed
# summarised, EDGE items at each end of every axis longer than 2 * EDGE
PRINT_THRESHOLD, PRINT_EDGE = 1000, 3


def printed_bytes(shape: tuple[int, ...], nbytes: int) -> int:
    """Bytes of the values that printing an array of `shape` (`nbytes` in all) formats: every
    element up to numpy's threshold, beyond it the summary's corners. What a print costs goes
    with these, not with the array's bytes: on the 2-core AMD EPYC VM a print of 1000 float32
    elements took 1.6 ms, one of 2**21 elements (summarised: 6 shown) 31 us."""
    size = math.prod(shape)
    if size == 0:
        return 0
    shown = size if size <= PRINT_THRESHOLD else math.prod(min(d, 2 * PRINT_EDGE) for d in shape)
    return shown * (nbytes // size)


def device_kind(device: str) -> str:
    """"cpu" for "cpu", "cpu1", ...; "gpu" for "gpu0", "gpu1", ..."""
    return "cpu" if device.startswith("cpu") else "gpu"


def is_link_copy(op) -> bool:
    """A `copyto` that crosses a GPU's boundary: it runs on a copy engine and is priced by
    `links`. A copy between two CPU devices (cpu(0) and cpu(1): the same host memory) is an
    ordinary copy op on the destination's workers."""
    if op.name != "copyto":
        return False
    src, dst = op.attrs.get("src", op.device), op.attrs.get("dst", op.device)
    return src != dst and "gpu" in (device_kind(src), device_kind(dst))


def _from_text(value):
    """`--set` gives strings: numbers become numbers, anything else stays (and fails checks)."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


# -- validation -------------------------------------------------------------------------------
def _number(where: str, value, source: str, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ProfileError(f"{source}: {where} = {value!r} is not a number "
                           f"(give seconds, bytes/s or flops/s as a number)")
    bad = value <= minimum if strict else value < minimum
    if bad:
        need = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise ProfileError(f"{source}: {where} = {value!r} must be {need}")
    return float(value)


def _table(doc: dict, name: str, source: str) -> dict:
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise ProfileError(f"{source}: {name} must be an object of costs, "
                           f"got {type(table).__name__}")
    return table


def check_key(key: str, table: str, source: str = "profile") -> None:
    """A ProfileError unless `key` names something a Profile can price."""
    if table == "links":
        if key not in (*LINKS, READBACK):
            raise ProfileError(f"{source}: unknown link {key!r}; links: "
                               f"{', '.join((*LINKS, READBACK))}")
        return
    kind, colon, name = key.partition(":")
    if kind == "frontend" and name.endswith(AGAIN) and name[:-len(AGAIN)] in BLOCKERS:
        return
    name, at, geometry = name.partition("@")
    if at and (kind == "frontend" or name not in GEOMETRY or not geometry):
        raise ProfileError(f"{source}: unknown cost key {key!r}; a cost per geometry is "
                           f"DEVICE:NAME@GEOMETRY with DEVICE cpu or gpu and NAME one of "
                           f"{', '.join(GEOMETRY)}")
    wildcard = name == "*" and kind != "frontend"
    blocker = name in BLOCKERS and kind == "frontend"
    # ops issued by backward or a Trainer; Python that issues no op (program.Call), a Gluon
    # block's call by its class too ("frontend:block:Dense")
    call, _, block = name.partition(":")
    phase = kind == "frontend" and (name in (*PHASES, *CALLS)
                                    or (call == "block" and block.isidentifier()))
    known = name in OPS or name in GROUPS or name == BROADCAST or wildcard or blocker or phase
    if not colon or kind not in DEVICE_KINDS or not known:
        raise ProfileError(
            f"{source}: unknown cost key {key!r}; use DEVICE:NAME with DEVICE one of "
            f"{', '.join(DEVICE_KINDS)} and NAME an op ({', '.join(OPS)}), a group "
            f"({', '.join(GROUPS)}), {BROADCAST}, * (not for frontend: its fallback is t1) or, "
            f"for frontend, a blocker ({', '.join(BLOCKERS)}; BLOCKER{AGAIN}: a later one) or "
            f"Python that issues no op ({', '.join(CALLS)}; block:CLASS, a Gluon block's class)")


def _cost(key: str, value, table: str, source: str) -> Cost:
    check_key(key, table, source)
    if isinstance(value, Cost):
        value = asdict(value)
    if not isinstance(value, dict):
        raise ProfileError(f"{source}: {table}[{key!r}] must be an object with "
                           f"{', '.join(COST_FIELDS)}, got {value!r}")
    for attr in value:
        if attr not in COST_FIELDS:
            raise ProfileError(f"{source}: unknown field {attr!r} in {table}[{key!r}]; "
                               f"accepted: {', '.join(COST_FIELDS)}")
    where = f"{table}[{key!r}]"
    out = Cost()
    if "latency" in value:
        out.latency = _number(f"{where}.latency", value["latency"], source)
        if math.isinf(out.latency):
            raise ProfileError(f"{source}: {where}.latency must be finite")
    for attr in ("bandwidth", "peak", "cache", "spill", "cache2", "spill2"):
        if attr in value:
            setattr(out, attr, _number(f"{where}.{attr}", value[attr], source, strict=True))
    if "crowd" in value:
        out.crowd = _number(f"{where}.crowd", value["crowd"], source)
        if math.isinf(out.crowd):
            raise ProfileError(f"{source}: {where}.crowd must be finite")
    return out


__all__ = ["BROADCAST", "COST_FIELDS", "DEVICE_KINDS", "GROUPS", "LINKS", "READBACK", "Cost",
           "ProfileError", "check_key", "device_kind", "is_link_copy", "printed_bytes"]
