"""The frontend process of the SimPy model (`asyncsim.simulate`): issuing ops and blocking.

The frontend walks `program.instrs`, one SimPy generator:
- an `Op` costs it its issue price (an "issue" span) and may start once that issue has ended and
  its dependencies are met (`asyncsim.model.deps.DepTracker`: read-after-write, write-after-read,
  write-after-write); its fresh output is reserved when the issue starts. With a bounded engine
  table (`profile.table`), the frontend first waits until op p - table has finished and every op
  before it (that wait is part of the issue span, as realexec's push times it); with
  `max_inflight=k` it waits for one of k slots. In `mode='sync'` (MXNet's NaiveEngine), and for a
  `copyto` from a GPU into pageable host memory, it then waits for the op and pays t3 (a "wait"
  span).
- a blocker (`Sync`) waits until every pending write of its var has finished (`waitall`:
  everything issued), then pays `profile.blocker(kind, nbytes, device, waited, asleep, again)`:
  t3 (`t3_asleep` if it waited past the spin and fell asleep), plus what a
  "frontend:<kind>" cost adds for the bytes it hands back (asnumpy's copy; print's formatting,
  on the bytes numpy shows: `printed_bytes`;
  `again` for a kind the program already ran, whose code is warm);
  on GPU data, `gpu_wait` if it waited and the "gpu->host" readback (see Profile). One "wait"
  span covers both.
- a notebook cell boundary (`Sync` of kind "cell", `nd.cell()`): the frontend idles until every
  op issued so far has finished, as a reader does between two cells, and pays nothing more: no
  t3, no blocker cost. Its "wait" span is named "cell".
- on an engine with light results (`profile.light`), an elementwise op's small result follows
  `asyncsim.model.light`'s rules: its issue, its drop and its buffer's return;
- `Free` drops a handle (costing `profile.free`, or `free_pending` for a small result whose ops
  are running and `free_large` for one too large for a run: an "issue" span, where the profile
  has a price); a small result's deletion waits for `profile.drop_batch` drops in all, or the
  next blocker or mark (`DROP_BYTES`). A full run's results whose ops are done are kept, their
  bytes still live, for the next fresh cpu outputs of their shape and dtype, which take them
  without a sample; the next run's hand-over, blocker or mark gives back what none took (as
  realexec's frontend does: `realexec.cpu.drops`); such an op's issue costs `profile.take`
  less (its price was timed with outputs from the pool). With
  a compiled engine (`profile.native`), when an op that was the last to touch a dropped var has
  finished since the last push, the next push pays `profile.reclaim` for each at its end
  (realexec's looks at its pending deletions as it pushes, after the frontend's Python, and
  gives the buffers back there); a blocker pays it for each after its wait, except those it
  gave back while asleep past its spin, looking every `FREE_POLL` (`_given_back_after`: a
  chain of 100 small products dropping each result ended its waitall 70-120 us after its last
  op, ~0.8 us a buffer; 2-core AMD EPYC VM);
  `Mark` opens or closes a benchmark region and notes how many memory samples precede it
  (`mark_samples`: label, begin, index into the memory samples).

Pricing (an op's issue price and lane time, its lane's queue) is `asyncsim.model.prices`'s.

Assumptions: `FrontendProcess` is a mixin of `asyncsim.model.simulate._Model` and reads and
updates the state that model's `__init__` creates (the per-position lists, the tracker, lanes,
slots, the host), its lane and memory methods (`_dispatch`, `_reserve`, `_release`) and
`_prepare`, which prices an op (`asyncsim.model.prices.Pricing`, the model's other mixin). With
a contended profile the frontend holds `asyncsim.model.gil`'s GIL while it runs Python. Times
are seconds of simulated time.
"""

from __future__ import annotations

from functools import partial

from asyncsim.model.cores import elapse
from asyncsim.model.cost import printed_bytes
from asyncsim.model.profile import device_kind
from asyncsim.nd.program import Call, Free, Mark, Op, Sync
from asyncsim.nd.trace import Span

FRONTEND = "frontend"
# dropped results of at most DROP_BYTES on cpu(0) are deleted `profile.drop_batch` at a time (or at
# the next blocker, mark or the program's end), as realexec's frontend hands them to its compiled
# engine; the engine imports these, so both halves follow one rule
DROP_BYTES = 4096
DROP_BATCH = 32
CELL = "cell"  # the Sync kind of a notebook cell boundary (`nd.cell()`)
# seconds between a sleeping blocker's looks at the deletions waiting for their ops (realexec's
# native engine wakes this often to give back the memory of those done)
FREE_POLL = 1e-3


class FrontendProcess:
    """The frontend's SimPy process and the pushing and waiting only it does."""

    def _frontend(self):
        env, spans, profile, gil, host = self.env, self.spans, self.profile, self.gil, self.host
        timeout = env.timeout
        spend = host.front_spend if host is not None else partial(elapse, env)
        seen = set()  # the blocker kinds already run: a later one of a kind is priced `again`
        for ins in self.program.instrs:
            kind = type(ins)
            if kind is Op:
                began = env.now
                full = profile.table and len(self.ops) - profile.table >= self.low
                if full:
                    yield from self._wait_for_table(len(self.ops) - profile.table)
                if self.slots is not None:
                    yield from self._block_on(self.slots.get(1))
                light = self._light(ins)
                issue_cost, queue = self._prepare(ins, light)
                if gil is not None:
                    yield from self._take_gil()
                start = env.now
                if light:  # its call deletes the held drop first, and takes no kept result
                    self._light_push()
                    self._reserve(ins.out, stashed=False)
                elif ins.fresh:
                    from_gpu = ins.attrs.get("src", "cpu")[0] == "g"
                    if self._reserve(ins.out, stashed=not from_gpu) and profile.take:
                        issue_cost = max(0.0, issue_cost - profile.take)
                    if self.drops is not None and from_gpu:
                        self.pinned.add(ins.out)  # a copy from a GPU: deleted alone, as realexec
                yield from spend(issue_cost)
                # buffers whose ops finished after their drop, since the last push: the engine
                # gives them back as it pushes (`profile.reclaim` each)
                if self.unclaimed:
                    given = len(self.unclaimed)
                    self.unclaimed.clear()
                    if profile.native and profile.reclaim:
                        yield from spend(profile.reclaim * given)
                if host is None:
                    position = self._push(ins, queue)
                else:  # the push may wake an idle worker, which the frontend pays for
                    wakes = host.wakes
                    position = self._push(ins, queue)
                    if host.wake and host.wakes > wakes:
                        yield from spend(host.wake)
                if light or self.light_vars:
                    self._light_pushed(ins, position, light)
                # a wait for the engine's table is part of the push, as realexec times it
                spans.append(Span("frontend", ins.name, ins.id, began if full else start, env.now,
                                  "issue"))
                if self.sync_mode or (profile.pageable and ins.name == "copyto"
                                      and device_kind(ins.device) == "cpu"
                                      and device_kind(ins.attrs["src"]) == "gpu"):
                    start = env.now
                    yield self.done_events.setdefault(position, env.event())
                    yield timeout(profile.t3)
                    spans.append(Span("frontend", ins.name, ins.id, start, env.now, "wait"))
            elif kind is Sync:
                if gil is not None:
                    gil.release(FRONTEND)
                start = env.now
                if self.drops or self.stash:
                    self._delete_drops()
                if self.light_vars or self.light_late:
                    self._light_flush()
                event = self._wait_for(ins.var)
                asleep = False  # the wait outlasted the spin: a futex wakes the frontend
                if event is not None:
                    if host is not None:
                        host.frontend_waits(event)
                    yield event
                    if host is not None:
                        asleep = host.asleep
                        host.frontend_woke()
                given = self._given_back_after(start)
                if self.light_late:  # what the wait let finish
                    self._light_due()
                if ins.kind == CELL:  # a user between notebook cells: no blocker returns
                    spans.append(Span("frontend", CELL, -1, start, env.now, "wait"))
                    continue
                if ins.var is None:
                    nbytes, shown, device = 0, 0, self.gpu_program
                else:
                    var = self.program.vars[ins.var]
                    nbytes, device = var.nbytes, var.device
                    shown = printed_bytes(var.shape, nbytes)
                yield from spend(profile.blocker(ins.kind, nbytes, device, event is not None,
                                                 asleep, again=ins.kind in seen, shown=shown)
                                 + given * profile.reclaim)
                seen.add(ins.kind)
                spans.append(Span("frontend", ins.kind, -1, start, env.now, "wait"))
            elif kind is Free:
                # a light result's drop (`asyncsim.model.light`) has its own price and rules
                light = self._light_free(ins.var) if self.light_vars else None
                drops = self.drops
                small = light is None and drops is not None and self._small(ins.var)
                price = self._drop_price(ins.var, small) if light is None else light
                if price:
                    if gil is not None:
                        yield from self._take_gil()
                    start = env.now
                    yield from spend(price)
                    spans.append(Span("frontend", "free", -1, start, env.now, "issue"))
                if light is not None:
                    continue
                if small:
                    drops.append(ins.var)
                    if len(drops) >= profile.drop_batch:
                        self._delete_drops(keep=True)
                else:
                    self._delete(ins.var)
            elif kind is Mark:
                if self.drops or self.stash:
                    self._delete_drops()
                if self.light_vars or self.light_late:
                    self._light_flush()
                # where the memory samples stood at this mark: the RSS model reads a region's
                # ends there, not among samples that share the mark's instant
                self.mark_samples.append((ins.label, ins.begin, len(self.memory)))
                if ins.begin:
                    self.open_marks.setdefault(ins.label, []).append(env.now)
                elif self.open_marks.get(ins.label):
                    self.marks.append((ins.label, self.open_marks[ins.label].pop(), env.now))
            elif kind is Call:  # Python that issues no op (a block call): the frontend's time
                cost = profile.call_cost(ins)
                if cost is not None and cost.latency:
                    if gil is not None:
                        yield from self._take_gil()
                    yield from spend(cost.latency)
        if self.drops or self.stash:  # realexec's trace and close hand the last ones over
            self._delete_drops()
        if self.light_vars or self.light_late:
            self._light_end()
        if gil is not None:
            gil.release(FRONTEND)
        if host is not None:
            host.frontend_done()

    def _drop_price(self, var: int, small: bool) -> float:
        """What dropping `var`'s last handle costs the frontend: `free` for a small result whose
        ops are done (with runs of drops; without, for any drop), `free_pending` for a small one
        whose ops are still running, `free_large` for one too large for a run (each 0: `free`)."""
        profile = self.profile
        if self.drops is None:
            return profile.free
        if not small:
            return profile.free_large or profile.free
        if var in self.touching:
            return profile.free_pending or profile.free
        return profile.free

    def _small(self, var: int) -> bool:
        """Whether a dropped var's deletion waits for a run of them (`DROP_BYTES`; not the
        pinned target of a copy from a GPU, which realexec gives back on its own path)."""
        v = self.program.vars[var]
        if v.device != "cpu" or v.nbytes > DROP_BYTES:
            return False
        if var in self.pinned:
            self.pinned.discard(var)
            return False
        return True

    def _delete(self, var: int, count: bool = True) -> int:
        """A dropped var's deletion: its buffer goes back now, or once its last op finished;
        the bytes given back now (`count=False`: not yet counted, see `_release`)."""
        if var in self.touching:
            self.freed.add(var)
            return 0
        return self._release(var, count)

    def _delete_drops(self, keep: bool = False) -> None:
        """Hand the run of drops over: the results the last run kept go back; of this run's,
        those whose ops are done are kept for later outputs (`keep`, a full run) or go back
        too (a blocker, a mark, the end), the others once their ops finish."""
        given = self._unstash() if self.stash else 0
        if keep:  # the kept ones back at once (a sample), this run's done ones kept
            self._give_back("cpu", given)
            given = 0
        for var in self.drops:
            if keep and var not in self.touching:
                self._stash_var(var)
            else:  # done ones back with the kept ones: one sample (`Pool.release_many`)
                given += self._delete(var, count=False)
        self._give_back("cpu", given)
        self.drops.clear()

    def _wait_for_table(self, position: int):
        """Wait until every op up to `position` has finished: the slot the next op needs in the
        engine's table (`profile.table`) is then free."""
        event = self.env.event()
        self.table_wait = (position, event)
        yield from self._block_on(event)

    def _block_on(self, event):
        """Yield `event` (a max_inflight slot, the table); if it has not happened yet, the
        frontend drops the GIL first and the host knows it sleeps."""
        host = self.host
        if not event.triggered and host is not None:  # about to block
            if self.gil is not None:
                self.gil.release(FRONTEND)
            host.frontend_waits(event)
        yield event
        if host is not None:
            host.frontend_woke()

    def _take_gil(self):
        """The frontend takes the GIL before running Python (only when the profile models it)."""
        held = self.gil.take(FRONTEND, self.host.spinning)
        self.host.spinning = False
        if held is not None:
            yield from self.host.unscheduled(held, front=True)

    def _push(self, op: Op, queue) -> int:
        position = len(self.ops) - 1
        self.inflight += 1
        touching = self.touching
        for var in op.reads:
            touching[var] = touching.get(var, 0) + 1
        touching[op.out] = touching.get(op.out, 0) + 1
        if self.in_order[position]:
            queue.put(position)
        if self.tracker.push(position, op.reads, (op.out,)):
            self._dispatch(position)
        return position

    def _given_back_after(self, start: float) -> int:
        """How many of the buffers released since the last push (`unclaimed`) a blocker that
        began at `start` gives back once its wait is over, at `profile.reclaim` each: those
        released since the last of its polls; asleep past its spin (`profile.spin`), it looks
        every `FREE_POLL` and gives back what it finds meanwhile, off the critical path (as
        realexec's `_wait` does). The list is emptied: the rest went back during the wait."""
        unclaimed, profile = self.unclaimed, self.profile
        if not unclaimed:
            return 0
        waited = self.env.now - start - profile.spin
        last_poll = start + profile.spin + (waited // FREE_POLL) * FREE_POLL
        given = len(unclaimed) if waited < FREE_POLL else sum(t > last_poll for t in unclaimed)
        unclaimed.clear()
        return given if profile.native else 0

    def _wait_for(self, var):
        """The event a blocker on `var` (None: waitall) waits for, or None if nothing is pending."""
        if var is None:
            if not self.inflight:
                return None
            if self.idle_event is None:
                self.idle_event = self.env.event()
            return self.idle_event
        last = self.tracker.last_write(var)
        if last is None:
            return None
        return self.done_events.setdefault(last, self.env.event())
