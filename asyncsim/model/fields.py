"""Fields: a Profile as plain values -- the JSON form of `asyncsim.model.profile.Profile`
(`to_dict`, `from_dict`, `save`, `load` and `replace` call these) and the checks every Profile
passes, loaded from a file or built directly.

A JSON file holds the same fields as a Profile: its scalars (`_SCALARS`, each with its type),
"costs" and "links" (Costs by key; a Cost field left at its default is omitted, so a file holds
no Infinity) and "meta". A file or dict is rejected, with one `ProfileError` line naming the key
and what is accepted, for an unknown key, a missing name, t1 or t3, an empty name, a scalar that
is not a number, negative or infinite, a fractional count (workers, cores, gpus and the other
whole numbers), a count below its minimum (`_MINIMUM`), or a cost key or Cost that
`asyncsim.model.cost` refuses.
`override` applies `Profile.replace`'s settings: scalars by name and cost fields by dotted key
("cpu:add_scalar.latency"), values possibly text (from `--set key=value`).

Assumptions: this module does not import `asyncsim.model.profile` (which builds on it): it hands
back the keyword arguments a Profile is built from. Units: the Profile's (seconds, bytes, bytes
per second, flops per second; counts whole).
"""

from __future__ import annotations

import copy as _copy
import json
import math
from dataclasses import asdict
from pathlib import Path

from asyncsim.model.cost import (
    COST_FIELDS,
    Cost,
    ProfileError,
    _cost,
    _from_text,
    _number,
    _table,
)

_SCALARS = {"name": str, "t1": float, "t3": float, "workers": int, "cores": int, "gpus": int,
            "free": float, "dispatch": float, "wake": float, "gil": float, "release": float,
            "switch": float, "spin": float, "recheck": float, "startup": float, "first_kind": float,
            "handover": float, "gpu_issue": float, "gpu_wait": float, "gpu_settle": float,
            "pageable": int, "rss_keep": float, "native": int, "idle_spin": float,
            "table": int, "llc": float, "dram": float, "dram_crowd": float, "mix": float,
            "reclaim": float, "after_gemm": float, "t3_asleep": float, "drop_batch": int,
            "free_pending": float, "free_large": float, "take": float,
            "light": float, "light_flush": float,
            "foreign": float, "foreign_gemm": float, "forget": float}
_MINIMUM = {"workers": 1, "cores": 1, "gpus": 0}


def to_dict(profile) -> dict:
    """Plain JSON-able values; a Cost field left at its default is omitted (no Infinity)."""
    def plain(cost: Cost) -> dict:
        return {k: v for k, v in asdict(cost).items() if v != getattr(Cost(), k)}
    doc = {k: getattr(profile, k) for k in _SCALARS}
    doc["costs"] = {k: plain(c) for k, c in profile.costs.items()}
    doc["links"] = {k: plain(c) for k, c in profile.links.items()}
    doc["meta"] = _copy.deepcopy(profile.meta)
    return doc


def from_dict(doc: dict, source: str = "profile") -> dict:
    """The keyword arguments of the Profile `doc` describes, validated; every problem is one
    ProfileError line that names the key."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    accepted = [*_SCALARS, "costs", "links", "meta"]
    for key in doc:
        if key not in accepted:
            raise ProfileError(f"{source}: unknown key {key!r}; "
                               f"accepted: {', '.join(accepted)}")
    for key in ("name", "t1", "t3"):
        if key not in doc:
            raise ProfileError(f"{source}: missing key {key!r}")
    values = {k: _scalar(k, doc[k], source) for k in _SCALARS if k in doc}
    costs = {k: _cost(k, v, "costs", source) for k, v in _table(doc, "costs", source).items()}
    links = {k: _cost(k, v, "links", source) for k, v in _table(doc, "links", source).items()}
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ProfileError(f"{source}: meta must be an object, got {type(meta).__name__}")
    return {**values, "costs": costs, "links": links, "meta": meta}


def override(doc: dict, kv: dict) -> dict:
    """`doc` (a Profile's `to_dict`) with `Profile.replace`'s settings applied, in place."""
    for key, value in kv.items():
        value = value if key == "name" else _from_text(value)
        if key in _SCALARS:
            doc[key] = value
            continue
        table_key, dot, attr = key.rpartition(".")
        if not dot:
            raise ProfileError(f"unknown setting {key!r}: use one of {', '.join(_SCALARS)}, "
                               f"or DEVICE:NAME.FIELD / LINK.FIELD with FIELD one of "
                               f"{', '.join(COST_FIELDS)}")
        table = "links" if "->" in table_key else "costs"
        doc[table].setdefault(table_key, {})[attr] = value
    return doc


def write(path: str | Path, doc: dict) -> None:
    """Save a Profile's `to_dict` as a JSON file."""
    Path(path).write_text(json.dumps(doc, indent=1))


def read(path: str | Path) -> dict:
    """A JSON file's contents, unchecked (`from_dict` checks them)."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from None


# -- validation -------------------------------------------------------------------------------
def _scalar(key: str, value, source: str):
    kind = _SCALARS[key]
    if kind is str:
        if not isinstance(value, str) or not value:
            raise ProfileError(f"{source}: name = {value!r} must be a non-empty string")
        return value
    number = _number(key, value, source, minimum=_MINIMUM.get(key, 0.0))
    if kind is int:
        if number != int(number) or math.isinf(number):
            raise ProfileError(f"{source}: {key} = {value!r} must be a whole number")
        return int(number)
    if math.isinf(number):
        raise ProfileError(f"{source}: {key} = {value!r} must be finite")
    return number


def check(profile) -> None:
    """Validate a Profile built directly (the same rules as a loaded file)."""
    for key in _SCALARS:
        _scalar(key, getattr(profile, key), "profile")
    for table in ("costs", "links"):
        entries = getattr(profile, table)
        for key, cost in entries.items():
            entries[key] = _cost(key, cost, table, "profile")
