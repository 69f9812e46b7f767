"""Light results in the model: the frontend's rules for an engine whose small elementwise results
live in its compiled state alone (realexec's `engine="native-light"`, `realexec.engine.light`).

On such an engine (`profile.light` > 0, with `native`, no `max_inflight`), an op is *light*
when its fresh output is the result of an elementwise op of one array of `LIGHT_OPS` on cpu(0),
of at most `LIGHT_BYTES` and at most `LIGHT_DIMS` dimensions, issued before any GPU is used,
and its input is a light result or an array whose last write has finished (realexec lends it
to the compiled state; one still being written sends the op the general way). Then:
- its issue costs `profile.light` (one compiled call, no pool `take`, no Python var; the drop of
  the result before it, which that call deletes, included) in place of the op's issue price;
  the frontend's other additions (`mix`, the first of its kind) stay;
- its result's drop is held for the next light push, whose call deletes it first (priced with
  that push); a drop while one is held prices that one's deletion (`profile.light_flush`),
  which realexec's next push makes in a call of its own before its own (charged and given back
  here, at the drop). A blocker or a mark deletes the held one too;
- a deleted result's buffer goes back at once when every op up to the last that touched it has
  finished (the engine's low-water mark), else it waits on a late list, in order, for the next
  light push or blocker or mark after that (and one more look once a blocker's wait is over);
- a blocker on a light result leaves it light (realexec reads its buffer where it lies); one
  that an op of another kind reads or writes becomes an ordinary var (Python adopts it) and
  follows the shipped rules from then on.

Not modelled: the look a blocker makes for deletions and late buffers (inside its t3, which
the calibration times on the shipped engine); the light call that finds an input still being
written before an op of an array and a number takes the general path (0.3 us; relu and a
gradient look in Python first); the second call of a light push after the drop of an ordinary
var (0.25 us); and that realexec holds an ordinary var's drop, as a light one's, for the next
push or blocker (the same work, an op later).

Assumptions: `LightRules` is a mixin of `asyncsim.model.simulate._Model`, called by the
frontend's walk (`asyncsim.model.issue`) in program order; it reads the model's `profile`,
`program`, `slots`, `low`, `finished_above`, `tracker` and `touching`, and gives buffers back
with `_release`. Times are seconds of simulated time; bytes.
"""

from __future__ import annotations

from collections import deque

from asyncsim.model.profile import device_kind
from asyncsim.nd.program import Op

# what realexec's light push takes (`realexec.cpu.worker.UNARY`, `realexec.engine.light`; a
# test holds the two to one list): elementwise ops of one array and a number, and relu
LIGHT_OPS = frozenset({"add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar",
                       "rdiv_scalar", "relu"})
LIGHT_BYTES = 4096
LIGHT_DIMS = 2


class LightRules:
    """The model's light results (see the module)."""

    def _init_light(self) -> None:
        profile = self.profile
        self.light_on = bool(profile.light and profile.native and self.slots is None)
        self.light_vars: dict = {}  # light result -> the last position that touched it
        self.light_held = None  # a dropped light result, deleted by the next light push
        self.light_late: deque = deque()  # (var, last position) deleted, ops still running

    def _light(self, op: Op) -> bool:
        """Whether `op` is a light push (see the module)."""
        if not self.light_on:
            return False
        if device_kind(op.device) == "gpu" or device_kind(op.attrs.get("src", "cpu")) == "gpu":
            self.light_on = False  # a GPU in use: realexec's light push stands aside for good
            return False
        if not op.fresh or op.name not in LIGHT_OPS or len(op.reads) != 1 or op.device != "cpu":
            return False
        out = self.program.vars[op.out]
        if not 0 < out.nbytes <= LIGHT_BYTES or len(out.shape) > LIGHT_DIMS:
            return False
        source = op.reads[0]
        if source in self.light_vars:
            return True
        written = self.tracker.last_write(source)
        return written is None or self._finished(written)

    def _light_pushed(self, op: Op, position: int, light: bool) -> None:
        """Note `op` (at `position`) on the light results it touches: a light push's output
        becomes one and its input's last position moves; any other op adopts them."""
        vars_ = self.light_vars
        if light:
            source = op.reads[0]
            if source in vars_:
                vars_[source] = position
            vars_[op.out] = position
        elif vars_:
            for var in (*op.reads, op.out):
                vars_.pop(var, None)

    def _light_push(self) -> None:
        """A light push's call, before its op: the held drop deleted, the late buffers whose
        ops are done back."""
        if self.light_held is not None:
            self._light_delete(self.light_held)
            self.light_held = None
        if self.light_late:
            self._light_due()

    def _light_free(self, var: int) -> float | None:
        """The drop of `var`'s last handle if it is a light result: its price (0, priced with
        the next push; a held one deleted now: `light_flush`); None if it is not one."""
        if var not in self.light_vars:
            return None
        price = 0.0
        if self.light_held is not None:
            price = self.profile.light_flush
            self._light_delete(self.light_held)
            self._light_due()
        self.light_held = var
        return price

    def _light_flush(self) -> None:
        """A blocker or a mark: the held drop deleted, the done late buffers back."""
        if self.light_held is not None:
            self._light_delete(self.light_held)
            self.light_held = None
        if self.light_late:
            self._light_due()

    def _light_end(self) -> None:
        """The program's end: the held drop deleted; what is late goes back as its ops finish
        (realexec's close gives every light buffer back once the engine drained)."""
        self._light_flush()
        for var, _ in self.light_late:
            if var in self.touching:
                self.freed.add(var)
            else:
                self._release(var)
        self.light_late.clear()

    def _light_delete(self, var: int) -> None:
        last = self.light_vars.pop(var)
        if self._light_done(last):
            self._release(var)
        else:
            self.light_late.append((var, last))

    def _light_due(self) -> None:
        """Give back the late buffers in the order they came while their ops are done."""
        late = self.light_late
        while late and self._light_done(late[0][1]):
            self._release(late.popleft()[0])

    def _light_done(self, last: int) -> bool:
        """Whether every op up to position `last` has finished (the engine's low-water mark)."""
        return last < self.low

    def _finished(self, position: int) -> bool:
        """Whether the op at `position` has finished."""
        return position < self.low or position in self.finished_above
