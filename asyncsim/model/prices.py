"""Prices: what each op of one simulation run (`asyncsim.model.simulate`) costs -- its issue on
the frontend and its time on its lane -- and which lane's queue it goes to.

Pricing: an op by `profile.rule` on its lane and `profile.issue_rule` on the frontend (t1 where
it has no rule); a binary op whose operands differ in shape (`ops.BROADCASTING`) by the
profile's "broadcast" costs where it has them; times 1 + mix (1 - 1/k) with k the kinds of op
among the last `MIX_WINDOW` issued (`profile.mix`, 0: off), except an op its phase prices
(backward's, a Trainer's). An op on a GPU costs the frontend
`profile.gpu_issue` more, the first op issued `profile.startup` more (a fresh engine: code
and threads that never ran), and the first of each later op name `profile.first_kind` more (its
kind's own code, cold: in fresh sessions after a quarter second of busy cores, a first `x * x`
took 26 us more than the next, a first relu, sum or product 9-11 us, a first `x + 2` after
them 3 us; 2-core AMD EPYC VM). Prices are cached per op name, devices and broadcasting.
A CPU op's lane time adds the price of the bytes it finds outside the last-level cache
(`asyncsim.model.caches`, with `profile.dram`). Its queue: a CPU op's device's worker pool; a
copy between devices the copy lane of its GPU end (the destination's for gpu->gpu), or the
source GPU's compute stream for a copy into pageable host memory (`profile.pageable`); a GPU op
its GPU's compute stream.

Assumptions: `Pricing` is a mixin of `asyncsim.model.simulate._Model`, beside
`asyncsim.model.issue.FrontendProcess`, whose walk calls `_prepare` once per op in issue order;
it appends to the per-position lists that model's `__init__` creates (ops, durations, kinds,
in_order, queue_of) and reads its lanes (`pools`, `streams`, `cpu_queues`), caches and host.
Times are seconds of simulated time.
"""

from __future__ import annotations

from collections import deque

from asyncsim.model.cost import device_kind, is_link_copy
from asyncsim.nd.ops import BROADCASTING, broadcasts, native_broadcast
from asyncsim.nd.program import Op

MIX_WINDOW = 16  # ops issued: the window whose kinds `Profile.mix` counts


def mix_factor(mix: float, kinds: int) -> float:
    """What an op's issue price is multiplied by with `kinds` kinds of op among the last issued
    (`Profile.mix`): 1 + mix (1 - 1/kinds). Calibration prices what it subtracts by it too."""
    return 1.0 + mix * (1.0 - 1.0 / kinds)


class RecentKinds:
    """The op names among the last `MIX_WINDOW` issued, counted, for `Profile.mix`."""

    def __init__(self, mix: float):
        self.mix, self.window, self.counts = mix, deque(), {}

    def factor(self, name: str) -> float:
        """Note `name` issued; return what its issue price is multiplied by."""
        window, counts = self.window, self.counts
        window.append(name)
        counts[name] = counts.get(name, 0) + 1
        if len(window) > MIX_WINDOW:
            old = window.popleft()
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
        return mix_factor(self.mix, len(counts))


class Pricing:
    """How one run prices its ops and picks their lanes (see the module's docstring)."""

    def _prepare(self, op: Op, light: bool = False) -> tuple[float, object]:
        """Price `op` and pick its lane queue (cached per op name, devices and geometry); return
        its issue cost and that queue. A `light` push (`asyncsim.model.light`) costs
        `profile.light` in place of its issue price."""
        broadcast = op.name in BROADCASTING and self._broadcast(op)
        key = (op.name, op.device, op.attrs.get("src"), broadcast, op.attrs.get("graph"),
               op.attrs.get("phase"), op.geometry)
        rule = self.rules.get(key)
        if rule is None:
            rule = self.rules[key] = self._rule(op, broadcast)
        issue_cost, lane_cost, link, queue, phased = rule
        self.ops.append(op)
        cold = 0.0  # what the bytes it finds outside the caches add (`asyncsim.model.caches`)
        warm = ()  # the vars it finds in them (`asyncsim.model.places` prices who wrote them)
        cold_price = 0.0  # what a cold byte adds to it
        from_dram = 0.0  # the time its cold bytes take at `dram`, a share of the memory bus
        if self.caches is not None and not link and device_kind(op.device) == "cpu":
            if op.fresh:
                self.caches.take(op.out)
            cold_bytes, warm = self.caches.cold_bytes(op)
            # priced now for the bytes found cold, and when it starts for those the caches
            # forgot meanwhile (`places`)
            if op.nbytes and (cold_bytes or self.profile.forget):
                cold_price = self.caches.price(op, lane_cost)
                cold = cold_bytes * cold_price
                if cold:  # an op slower than memory anyway moves its cold bytes as it goes
                    from_dram = cold_bytes / self.profile.dram
        if link:
            self.durations.append(lane_cost.time(op.nbytes / 2, 0.0))
        else:
            self.durations.append(lane_cost.time(op.nbytes, op.flops) + cold)
        self.kinds.append("copy" if link else "exec")
        self.in_order.append(not any(queue is q for q in self.cpu_queues))
        self.queue_of.append(queue)
        if self.host is not None:
            self.host.prepare(op, lane_cost, link,
                              broadcast and not native_broadcast(op, self.program.vars), cold,
                              warm, cold_price, from_dram)
        if light:
            cost = self.profile.light
        else:
            cost = self.profile.t1 if issue_cost is None else issue_cost.time(op.nbytes, op.flops)
        if self.kinds_issued is not None:
            factor = self.kinds_issued.factor(op.name)
            if not phased:  # a phase's cost was timed on mixed sequences already
                cost *= factor
        if device_kind(op.device) == "gpu":
            cost += self.profile.gpu_issue
        if len(self.ops) == 1:  # the first push into a fresh engine
            cost += self.profile.startup
        elif op.name not in self.names_issued:  # its kind's own code, cold
            cost += self.profile.first_kind
        self.names_issued.add(op.name)
        return cost, queue

    def _broadcast(self, op: Op) -> bool:
        """Whether the operands of a binary op differ in shape (numpy's broadcasting)."""
        return broadcasts(op, self.program.vars)

    def _rule(self, op: Op, broadcast: bool) -> tuple:
        link = is_link_copy(op)
        _, lane_cost = self.profile.rule(op, broadcast)
        if device_kind(op.device) == "cpu" and not link:
            queue = self.pools[op.device]
        elif link and device_kind(op.device) == "cpu" and self.profile.pageable:
            queue = self.streams[op.attrs["src"], "compute"]  # serialised with compute
        elif link:  # the GPU end of the copy owns the copy engine (the destination for gpu->gpu)
            gpu = op.device if device_kind(op.device) == "gpu" else op.attrs["src"]
            queue = self.streams[gpu, "copy"]
        else:
            queue = self.streams[op.device, "compute"]
        phase = op.attrs.get("phase")  # priced by its phase's cost (backward's, a Trainer's)
        phased = phase is not None and f"frontend:{phase}" in self.profile.costs
        return self.profile.issue_rule(op, broadcast), lane_cost, link, queue, phased
