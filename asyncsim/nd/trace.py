"""Trace: what happened (or is predicted to happen) during one run, in one format for both halves.

A Trace holds
- spans `Span(lane, name, op_id, start, end, kind)`: `kind` is "issue" (the frontend pushing an
  op, t1), "exec" (an op running on a lane, t2), "copy" (an op on a copy engine), "wait" (the
  frontend blocked in a blocker, including the wake-up t3);
- memory samples `(t, device, live_bytes)`, one per change of a device's live bytes;
- marks `(label, start, end)`: the `nd.benchmark` regions;
- meta: where it came from ("source": "predicted" or "measured", workload, profile, machine).

Times are seconds from the start of the run. Lanes are named "frontend", "cpu/w0".. for CPU
workers, "gpu0/compute" and "gpu0/copy" for a GPU's stream and copy engine. `to_chrome` writes
Chrome Trace Event JSON that opens in Perfetto or chrome://tracing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

KINDS = ("issue", "exec", "copy", "wait")


@dataclass(slots=True)
class Span:
    lane: str
    name: str
    op_id: int
    start: float
    end: float
    kind: str

    @property
    def duration(self) -> float:
        return self.end - self.start


def device_lanes(spans: list[Span], devices: dict[int, str]) -> list[Span]:
    """`spans` with each op of `devices` (op id -> "cpu{i}", a CPU device other than cpu(0))
    moved from its worker's "cpu/wK" lane to "cpu{i}/wK": every CPU device's ops run on the
    CPU's workers, and a trace shows each under its device (both halves, `realexec` and the
    simulator)."""
    if not devices:
        return spans
    return [replace(s, lane=devices[s.op_id] + s.lane[3:])
            if s.op_id in devices and s.lane.startswith("cpu/") else s for s in spans]


def _lane_key(lane: str) -> tuple:
    # frontend first, then CPU workers in number order, then GPUs
    head, _, tail = lane.partition("/")
    digits = "".join(ch for ch in tail if ch.isdigit())
    return (lane != "frontend", head != "cpu", head, tail.rstrip("0123456789"),
            int(digits) if digits else 0)


@dataclass
class Trace:
    spans: list[Span] = field(default_factory=list)
    memory: list[tuple[float, str, int]] = field(default_factory=list)
    marks: list[tuple[str, float, float]] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    # -- queries -----------------------------------------------------------------------------
    @property
    def duration(self) -> float:
        """Seconds from the start of the run to the last span or region end."""
        ends = [s.end for s in self.spans] + [m[2] for m in self.marks]
        return max(ends, default=0.0)

    def from_first_event(self) -> Trace:
        """This trace with its clock moved (in place) so that 0 is its first span or region
        start, as a prediction's is: a measured trace's clock starts when its engine is made,
        before the workload runs. Memory samples before that moment are put at 0."""
        t0 = min([s.start for s in self.spans] + [m[1] for m in self.marks], default=0.0)
        for span in self.spans:
            span.start -= t0
            span.end -= t0
        self.marks = [(label, a - t0, b - t0) for label, a, b in self.marks]
        self.memory = [(max(0.0, t - t0), dev, b) for t, dev, b in self.memory]
        return self

    @property
    def regions(self) -> dict[str, float]:
        """Seconds per benchmark label (summed if a label occurs more than once)."""
        out: dict[str, float] = {}
        for label, start, end in self.marks:
            out[label] = out.get(label, 0.0) + (end - start)
        return out

    @property
    def lanes(self) -> list[str]:
        return sorted({s.lane for s in self.spans}, key=_lane_key)

    @property
    def devices(self) -> list[str]:
        return sorted({d for _, d, _ in self.memory})

    def memory_curve(self, device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
        """(times, live bytes) for one device, as a step curve starting at t=0."""
        pts = [(t, b) for t, d, b in self.memory if d == device]
        if not pts:
            return np.zeros(1), np.zeros(1)
        t, b = zip(*pts, strict=True)
        return np.asarray(t, dtype=float), np.asarray(b, dtype=float)

    def peak_bytes(self, device: str = "cpu") -> int:
        return int(max((b for _, d, b in self.memory if d == device), default=0))

    def busy(self, lane: str) -> float:
        """Seconds that `lane` spent in spans."""
        return sum(s.end - s.start for s in self.spans if s.lane == lane)

    def spans_of(self, lane: str | None = None, kind: str | None = None) -> list[Span]:
        return [s for s in self.spans
                if (lane is None or s.lane == lane) and (kind is None or s.kind == kind)]

    # -- text ----------------------------------------------------------------------------------
    def summary(self) -> str:
        src = self.meta.get("source", "trace")
        name = self.meta.get("workload", "")
        lines = [f"{src} {name}: {self.duration * 1e3:.3f} ms total, "
                 f"{sum(1 for s in self.spans if s.kind in ('exec', 'copy'))} ops"]
        for label, secs in self.regions.items():
            lines.append(f"  {label:<40s} {secs * 1e3:12.3f} ms")
        for lane in self.lanes:
            busy = self.busy(lane)
            share = busy / self.duration if self.duration else 0.0
            lines.append(f"  lane {lane:<16s} busy {busy * 1e3:10.3f} ms ({share:6.1%})")
        for dev in self.devices:
            lines.append(f"  peak memory {dev:<8s} {self.peak_bytes(dev) / 2**20:10.2f} MiB")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Trace({self.meta.get('source', '?')} {self.meta.get('workload', '')!s}: "
                f"{self.duration:.6f} s, {len(self.spans)} spans, lanes {self.lanes})")

    # -- files ---------------------------------------------------------------------------------
    def to_chrome(self, path: str | Path | None = None) -> dict:
        """Chrome Trace Event JSON (microseconds); written to `path` if given."""
        lanes = self.lanes
        tid = {lane: i for i, lane in enumerate(lanes)}
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0,
                               "args": {"name": f"{self.meta.get('source', 'run')} "
                                                f"{self.meta.get('workload', '')}"}}]
        events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": lane}}
                   for lane, i in tid.items()]
        events += [{"name": s.name, "cat": s.kind, "ph": "X", "pid": 0, "tid": tid[s.lane],
                    "ts": s.start * 1e6, "dur": (s.end - s.start) * 1e6, "args": {"op": s.op_id}}
                   for s in self.spans]
        events += [{"name": f"memory {d}", "ph": "C", "pid": 0, "ts": t * 1e6,
                    "args": {"MiB": b / 2**20}} for t, d, b in self.memory]
        events += [{"name": label, "cat": "region", "ph": "X", "pid": 0, "tid": len(lanes),
                    "ts": a * 1e6, "dur": (b - a) * 1e6} for label, a, b in self.marks]
        doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": self.meta}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc

    def save(self, path: str | Path) -> None:
        """Plain JSON that `Trace.load` reads back exactly."""
        doc = {"spans": [asdict(s) for s in self.spans], "memory": self.memory,
               "marks": self.marks, "meta": self.meta}
        Path(path).write_text(json.dumps(doc))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        doc = json.loads(Path(path).read_text())
        return cls(spans=[Span(**s) for s in doc["spans"]],
                   memory=[tuple(m) for m in doc["memory"]],
                   marks=[tuple(m) for m in doc["marks"]], meta=doc["meta"])
