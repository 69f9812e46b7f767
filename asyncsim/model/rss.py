"""Resident memory as the book's `ps` saw it, predicted from a Trace's live bytes.

The chapters read the process's resident set size (RSS) before a training loop and again after
it ("increased memory: 23.696000 MB"). That is not the loop's live memory: `ps` runs after the
final `waitall`, when the queue has drained and the loop's intermediate results are gone, so it
never sees the peak during the loop (gigabytes without a per-batch blocker). What it sees is

    RSS = base + live + cached

- `live`: the bytes of arrays still held (the Trace's memory samples): after a loop, what Python
  still references (the last batch, and what its autograd tape keeps);
- `cached`: freed buffers the allocator keeps resident for reuse, at most `keep` bytes
  (`Profile.rss_keep`). A freed buffer goes into the cache while it has room (the rest goes back
  to the system); a new buffer is carved from the cache first. So RSS falls back toward live
  bytes plus at most `keep` once a loop's results are freed, however high it went;
- `base` (the interpreter, the libraries) is the same before and after, so a change of RSS, the
  book's number, does not depend on it; values here are bytes above it.

A region's ends are read where its marks stand among the samples (`meta["mark_samples"]`, written
by `asyncsim.simulate`), so frees at the mark's instant fall on the right side of it. A measured
Trace (realexec) carries the process's real RSS as device "cpu:rss", read just before a region
begins and just after it ends; `across` reads those instead.

Assumptions: one allocator cache per device; reuse takes any cached bytes (no size classes, no
fragmentation). Units: bytes; times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncsim.nd.trace import Trace

RSS_SUFFIX = ":rss"  # the device suffix of measured process RSS samples


@dataclass(frozen=True)
class RegionMemory:
    """Resident memory across one region, in bytes above the process's base."""

    label: str
    before: float  # RSS when the region began
    after: float  # RSS when it ended
    peak: float  # the most RSS during it
    live_peak: float  # the most live bytes during it

    @property
    def increase(self) -> float:
        """What the book prints as "increased memory": RSS after minus RSS before."""
        return self.after - self.before


def walk(trace: Trace, keep: float, device: str = "cpu") -> list[tuple[int, float, float, float]]:
    """(index into trace.memory, time, live bytes, RSS) after each sample of `device`."""
    live = cached = 0.0
    out = []
    for index, (t, dev, nbytes) in enumerate(trace.memory):
        if dev != device:
            continue
        change = nbytes - live
        if change > 0:
            cached -= min(cached, change)  # reuse before asking the system for more
        else:
            cached = min(keep, cached - change)
        live = float(nbytes)
        out.append((index, t, live, live + cached))
    return out


def rss_curve(trace: Trace, keep: float, device: str = "cpu") -> tuple[list[float], list[float]]:
    """(times, RSS above base) of a predicted trace, one point per memory sample of `device`."""
    steps = walk(trace, keep, device)
    return [t for _, t, _, _ in steps], [rss for _, _, _, rss in steps]


def across(trace: Trace, label: str, keep: float = 0.0, device: str = "cpu") -> RegionMemory:
    """Resident memory before, after and at most during region `label` (its first occurrence):
    predicted from live bytes and `keep` (`Profile.rss_keep`), or, for a measured trace, the
    process RSS it sampled around the region."""
    if "mark_samples" not in trace.meta:
        return _measured(trace, label, device)
    marks = {}
    for name, begin, index in trace.meta["mark_samples"]:
        marks.setdefault((name, bool(begin)), index)
    if (label, True) not in marks or (label, False) not in marks:
        raise KeyError(f"region {label!r} is not in this trace; it has: "
                       f"{', '.join(sorted({m[0] for m in trace.marks})) or 'none'}")
    begin, end = marks[label, True], marks[label, False]
    steps = walk(trace, keep, device)

    def state_at(index: int) -> tuple[float, float]:
        last = (0.0, 0.0)
        for i, _, live, rss in steps:
            if i >= index:
                break
            last = (live, rss)
        return last

    live_before, before = state_at(begin)
    _, after = state_at(end)
    inside = [(live, rss) for i, _, live, rss in steps if begin <= i < end]
    return RegionMemory(label, before, after,
                        peak=max([before, *(rss for _, rss in inside)]),
                        live_peak=max([live_before, *(live for live, _ in inside)]))


def _measured(trace: Trace, label: str, device: str) -> RegionMemory:
    spans = [(a, b) for name, a, b in trace.marks if name == label]
    if not spans:
        raise KeyError(f"region {label!r} is not in this trace")
    start, end = spans[0]
    rss = [(t, b) for t, dev, b in trace.memory if dev == device + RSS_SUFFIX]
    live = [b for t, dev, b in trace.memory if dev == device and start <= t <= end]
    before = [b for t, b in rss if t <= start]
    after = [b for t, b in rss if t >= end]
    if not before or not after:
        raise ValueError(f"the trace has no {device}{RSS_SUFFIX} samples around {label!r}")
    during = [b for t, b in rss if start <= t <= end]
    return RegionMemory(label, float(before[-1]), float(after[0]),
                        peak=float(max([before[-1], after[0], *during])),
                        live_peak=float(max(live, default=0)))


__all__ = ["RSS_SUFFIX", "RegionMemory", "across", "rss_curve", "walk"]
