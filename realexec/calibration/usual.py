"""The machine's usual state across calibrations: what a calibration's gates learnt, kept from
one calibration to the next, so that one taken in a slow phase says so and is not kept.

A `steady.Gate` learns the usual state from the looks of its own calibration, so a slow phase
that holds for the whole of one is, to its gates, the usual state. Seen on the 2-core AMD EPYC
VM: a calibration of 1070 s in such a phase priced t1 at 12.7 us (4.8-5.5 in the calm
calibrations of the same afternoon) while its speed probe read 1.16x its usual; the main job
after it reused it from the cache and predicted every scenario from it.

Each full calibration's fastest probes (speed, products, issue: `raw["gate"]`) are appended to
`usual-HOST.json` in the calibration cache (the last `KEPT`). The machine's usual state is, per
probe, the median of the calibrations kept (once there are `MIN_KEPT`): most calibrations find
it, a slow phase's sit above it. `judge(raw)` gives a calibration's fastest probes as ratios
to it; over `steady.SLOW` the calibration ran in a slow state (`realexec.calibration.calibrate`
warns and does not cache it: the job that measured it uses it, no later one). A machine whose
usual state moved for good (another host) is judged slow until its new state is most of the
kept calibrations. Units: seconds of each probe; ratios.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path

from realexec.calibration.steady import SLOW

KEPT = 15  # calibrations kept per machine
MIN_KEPT = 3  # fewer: no usual state yet, nothing judged
PROBES = {"speed": ("fastest",), "products": ("products", "fastest"),
          "issues": ("issues", "fastest")}


def fastest(raw: dict) -> dict:
    """A calibration's fastest look of each probe (its gates' usual state), where it has it."""
    out = {}
    for probe, keys in PROBES.items():
        value = raw.get("gate", {})
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float) and value > 0:
            out[probe] = float(value)
    return out


def load(path: Path) -> list[dict]:
    """The kept calibrations' fastest probes, oldest first ([] if none or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
        if isinstance(kept, list):
            return [k for k in kept if isinstance(k, dict)]
    return []


def usual(kept: list[dict]) -> dict:
    """Per probe, the median of the kept calibrations' fastest looks ({} below MIN_KEPT)."""
    out = {}
    for probe in PROBES:
        values = [k[probe] for k in kept if isinstance(k.get(probe), int | float)]
        if len(values) >= MIN_KEPT:
            out[probe] = statistics.median(values)
    return out


def judge(raw: dict, kept: list[dict]) -> dict:
    """The calibration's fastest probes as ratios to the machine's usual state, per probe that
    both have, with "calibrations": how many the usual state is the median of."""
    state, mine = usual(kept), fastest(raw)
    ratios = {probe: mine[probe] / state[probe] for probe in state if probe in mine}
    return {**ratios, "calibrations": len(kept)} if ratios else {}


def slow(judged: dict) -> list[str]:
    """The probes a judged calibration read over `SLOW` of the usual state."""
    return [probe for probe in PROBES if judged.get(probe, 0.0) > SLOW]


def record(path: Path, raw: dict) -> None:
    """Keep this calibration's fastest probes (the last KEPT); nothing for a calibration
    without gates (a quick one)."""
    mine = fastest(raw)
    if not mine:
        return
    kept = (load(path) + [mine])[-KEPT:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=1))


__all__ = ["KEPT", "MIN_KEPT", "fastest", "judge", "load", "record", "slow", "usual"]
