"""Prediction against measurement: one row per region, plus total time and peak memory.

`compare(pred, meas)` pairs two Traces of the same workload (one from `asyncsim.simulate`, one
from `realexec.run`) and returns `Row`s: what was predicted, what was measured, and the error of
the prediction relative to the measurement (`(pred - meas) / meas`). Times are seconds, memory
bytes. `table(rows)` formats them for a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Row:
    name: str  # a region label, "total", or "peak <device>"
    predicted: float
    measured: float
    unit: str  # "s" or "B"

    @property
    def error(self) -> float:
        """Relative error of the prediction; nan when the measurement is zero."""
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("nan")
        return (self.predicted - self.measured) / self.measured


def compare(pred, meas) -> list[Row]:
    """Rows for every region the two traces share, the total time and each device's peak memory."""
    rows = [Row(label, secs, meas.regions[label], "s")
            for label, secs in pred.regions.items() if label in meas.regions]
    rows.append(Row("total", pred.duration, meas.duration, "s"))
    for dev in sorted(set(pred.devices) | set(meas.devices)):
        if ":" in dev:  # process RSS and other side measurements have no prediction
            continue
        rows.append(Row(f"peak {dev}", pred.peak_bytes(dev), meas.peak_bytes(dev), "B"))
    return rows


def _fmt(value: float, unit: str) -> str:
    if unit == "B":
        return f"{value / 2**20:10.2f} MiB"
    return f"{value * 1e3:10.3f} ms"


def table(rows: list[Row], title: str = "") -> str:
    """A fixed-width text table: name, predicted, measured, error %."""
    width = max([len(r.name) for r in rows] + [len("region")])
    lines = [title] if title else []
    lines.append(f"{'region':<{width}s}  {'predicted':>13s}  {'measured':>13s}  {'error':>8s}")
    for r in rows:
        err = f"{r.error:+8.1%}" if r.error == r.error else "     n/a"
        lines.append(f"{r.name:<{width}s}  {_fmt(r.predicted, r.unit):>13s}  "
                     f"{_fmt(r.measured, r.unit):>13s}  {err}")
    return "\n".join(lines)
