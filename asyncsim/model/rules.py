"""Rules: which of a Profile's costs prices an op on its lane, a copy between devices, the
frontend's issue of an op and a blocker's return -- the pricing half of
`asyncsim.model.profile.Profile`, which inherits these methods.

An op is priced on its lane by "DEVICE:NAME" (NAME its name from `asyncsim.nd.ops`), then
"DEVICE:GROUP" (its op group), then "DEVICE:*"; a binary op whose operands' shapes differ
(broadcasting: another path through the frontend and the kernel) by "DEVICE:broadcast" before
those, where the profile has one; a convolution or a 2-d product by "DEVICE:NAME@GEOMETRY" before
them (`asyncsim.nd.ops.geometry`: a convolution's shape without the batch, a product's whole shape
and transposes), for a profile that timed that geometry: BLAS's speed depends on the product's
shape; a product it did not time, of 1 MFLOP or more, by the timed one nearest in shape within a
factor 2 on every side (`asyncsim.model.products`). A copy between devices is priced by its link
("cpu->gpu", "gpu->cpu", "gpu->gpu"), a hybridized graph by its members' costs plus what
"DEVICE:graph" adds per member. The frontend's issue of an op: "frontend:<phase>" for an op
backward or a Trainer issued, else "frontend:broadcast", "frontend:NAME", "frontend:GROUP", else
t1; a blocker: t3 plus its "frontend:<blocker>" cost (`Rules.blocker`); Python that issues no op
(a program.Call) by "frontend:block:CLASS" for a Gluon block's call where the profile has its
class, else "frontend:<kind>" (`Rules.call_cost`).

Assumptions: `Rules` holds no state of its own: it reads the Profile's fields (`name`, `t1`,
`t3`, `t3_asleep`, `native`, `costs`, `links`, `gpu_issue`, `gpu_wait`, `gpu_settle`) and keeps
the nearest-product lookups in its `_products`. Units: seconds, bytes and flops, as a Cost's
(`asyncsim.model.cost`).
"""

from __future__ import annotations

from asyncsim.model import products
from asyncsim.model.cost import (
    AGAIN,
    BROADCAST,
    READBACK,
    Cost,
    ProfileError,
    device_kind,
    is_link_copy,
)
from asyncsim.nd.ops import BROADCASTING, OPS


class Rules:
    """The pricing methods of `asyncsim.model.profile.Profile` (see the module's docstring)."""

    def rule(self, op, broadcast: bool = False) -> tuple[str, Cost]:
        """The key that prices `op` on its lane and its Cost (a link for cross-device copies).
        A `broadcast` op (operands of different shapes) is priced by "DEVICE:broadcast" first."""
        if is_link_copy(op):
            key = f"{device_kind(op.attrs['src'])}->{device_kind(op.attrs['dst'])}"
            if key not in self.links:
                raise ProfileError(f"profile {self.name!r} has no link {key!r} for {op.name} "
                                   f"(it has: {', '.join(self.links) or 'none'})")
            return key, self.links[key]
        if op.name == "graph":  # a hybridized block: its ops back to back, issued once
            graph = op.attrs["graph"]
            seconds = sum(self.cost(m, m.name in BROADCASTING and graph.broadcasts(m))
                          for m in graph.ops)
            step = self.costs.get(f"{device_kind(op.device)}:graph")
            # the graph kernel's own Python per member (its bindings); none where a compiled
            # worker runs the whole graph itself (realexec's native_ops.GRAPH)
            if step is not None and not (self.native and graph.compiled):
                seconds += step.latency * len(graph.ops)
            return "graph", Cost(latency=seconds)
        kind = device_kind(op.device)
        if op.geometry:  # a convolution or product: its geometry's cost where the profile timed it
            key = f"{kind}:{op.name}@{op.geometry}"
            if key in self.costs:
                return key, self.costs[key]
            key = self._nearest_product(f"{kind}:{op.name}@", op)
            if key is not None:  # a product near one timed: at that one's rate
                return key, self.costs[key]
        keys = (f"{kind}:{op.name}", f"{kind}:{OPS[op.name].group}", f"{kind}:*")
        for key in (f"{kind}:{BROADCAST}", *keys) if broadcast else keys:
            if key in self.costs:
                return key, self.costs[key]
        raise ProfileError(f"profile {self.name!r} has no cost for {op.name} on {kind} "
                           f"(add {kind}:{op.name}, {kind}:{OPS[op.name].group} or {kind}:*)")

    def _nearest_product(self, prefix: str, op) -> str | None:
        """The timed product that prices `op`'s untimed geometry (`asyncsim.model.products`)."""
        cached = self._products.get(prefix)
        if cached is None or cached[0] != len(self.costs):
            cached = self._products[prefix] = (len(self.costs),
                                               products.timed(self.costs, prefix), {})
        found = cached[2]
        if op.geometry not in found:
            found[op.geometry] = products.nearest(op.geometry, op.flops, cached[1])
        return found[op.geometry]

    def cost(self, op, broadcast: bool = False) -> float:
        """Seconds `op` holds its lane."""
        key, cost = self.rule(op, broadcast)
        if "->" in key:  # op.nbytes counts the array twice (read and written); a link moves it once
            return cost.time(op.nbytes / 2, 0.0)
        return cost.time(op.nbytes, op.flops)

    def issue_rule(self, op, broadcast: bool = False) -> Cost | None:
        """The "frontend:" Cost that prices issuing `op`, or None when t1 does."""
        keys = (f"frontend:{op.name}", f"frontend:{OPS[op.name].group}")
        phase = op.attrs.get("phase")
        if phase is not None and f"frontend:{phase}" in self.costs:
            return self.costs[f"frontend:{phase}"]  # issued by backward, or by a Trainer
        for key in (f"frontend:{BROADCAST}", *keys) if broadcast else keys:
            if key in self.costs:
                return self.costs[key]
        return None

    def issue(self, op, broadcast: bool = False) -> float:
        """Seconds the frontend spends issuing `op`: a "frontend:" cost if one matches, else t1;
        plus `gpu_issue` for an op on a GPU."""
        cost = self.issue_rule(op, broadcast)
        seconds = self.t1 if cost is None else cost.time(op.nbytes, op.flops)
        return seconds + (self.gpu_issue if device_kind(op.device) == "gpu" else 0.0)

    def call_cost(self, call) -> Cost | None:
        """The "frontend:" Cost of `call` (a program.Call: Python that issues no op), or None:
        a block call by its class ("frontend:block:Dense"), else by its kind
        ("frontend:block", "frontend:init", "frontend:trace")."""
        if call.block:
            cost = self.costs.get(f"frontend:{call.kind}:{call.block}")
            if cost is not None:
                return cost
        return self.costs.get(f"frontend:{call.kind}")

    def blocker(self, kind: str, nbytes: int = 0, device: str = "cpu",
                waited: bool = False, asleep: bool = False, again: bool = False,
                shown: int | None = None) -> float:
        """Seconds a blocker of `kind` costs the frontend once its wait is over: t3 (`t3_asleep`,
        where there is one, for a blocker that fell `asleep` waiting), plus its
        "frontend:<kind>" cost on the `nbytes` it returns when there is one (a print's on the
        `shown` bytes it formats, `printed_bytes`, where given): the cold price of a
        program's first blocker of the kind; `again` (a later one), "frontend:<kind>:again"
        where the profile has it (its code is in the caches by then). On GPU data
        (`device`; for waitall, a program with GPU work): plus `gpu_wait` if it `waited`, and a
        copy of the data by the "gpu->host" link, where there is one, instead of the frontend's
        own copy (print still formats); a waitall also pays `gpu_settle`."""
        t3 = self.t3_asleep if asleep and self.t3_asleep else self.t3
        cost = self.costs.get(f"frontend:{kind}")
        if again:
            cost = self.costs.get(f"frontend:{kind}{AGAIN}", cost)
        own = shown if kind == "print" and shown is not None else nbytes
        extra = 0.0 if cost is None else cost.time(own, 0.0)
        if device_kind(device) != "gpu":
            return t3 + extra
        readback = self.links.get(READBACK)
        if readback is not None and kind in ("asnumpy", "item", "print"):
            extra = readback.time(nbytes, 0.0) + (extra if kind == "print" else 0.0)
        settle = self.gpu_settle if kind == "waitall" else 0.0
        return t3 + extra + settle + (self.gpu_wait if waited else 0.0)
