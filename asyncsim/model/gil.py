"""The GIL in the SimPy model: one lock that threads take and release under CPython's rules.

`asyncsim.model.host`'s `Host` makes one `Gil` per run when the profile models the GIL
(`profile.gil` > 0; never for NaiveEngine's `mode='sync'`, which has no GIL contest), and the
frontend (`asyncsim.model.issue`) and the CPU workers (`Host.worker`) take and release it. A
thread is named by any value (a lane, the frontend), compared with ==; `take` answers None or an
event that the caller's SimPy process yields.

The GIL follows CPython's rules as far as they matter here. The frontend holds it while it runs
-- from its first issue until it blocks (a blocker, max_inflight) -- and checks for a drop
request before each issue or free. A CPU worker holds it for an op's latency (the call into the
kernel), drops it for the kernel's bytes and flops time (a nogil kernel), and must take it again
when the kernel returns, before the op is done (a worker whose kernel ends while the frontend
issues waits for the GIL, not the frontend for it). A thread asking for a free GIL takes it at
once, even if others wait; a release wakes the longest waiter, which arrives a hand-over later
(`profile.handover`: measured, ~40 us here; else `dispatch`; scattered by half of it either way,
as real wake-ups are) and takes it only if it is still free (a frontend whose blocker ended while
it still spun is awake: it takes a released GIL at once). A thread that has waited
`profile.switch` seconds without any other thread taking the GIL meanwhile asks the holder to
drop it, and that drop hands it over; otherwise it waits another interval (CPython's take_gil).
The thread that dropped it waits until the asker holds it, then sleeps on the GIL like any waiter
(a release must wake it: CPython 3.11's drop_gil with FORCE_SWITCHING, then take_gil). So a
worker whose kernels are shorter than a wake-up keeps the GIL from the others (a convoy), and a
busy frontend leaves workers a turn only every switch interval.

Units: seconds of simulated time (`wake`, the hand-over; `switch`, the switch interval).
"""

from __future__ import annotations

import random
from collections import deque


class Gil:
    """One lock with CPython's hand-over rules (see the module docstring)."""

    def __init__(self, env, wake: float, switch: float, seed: int = 0):
        self.env, self.wake, self.switch = env, wake, switch
        self.holder = None
        self.last = None  # the thread that held it last
        self.switches = 0  # hand-overs to another thread so far (CPython's switch_number)
        self.waiting: deque = deque()  # events of waiting threads, oldest first
        self.drop = False  # a waiter has waited a switch interval
        self.reserved = False  # a forced drop is handing the GIL to the oldest waiter
        self.signalled = False  # a woken waiter is on its way
        self.jitter = random.Random(seed)  # wake-ups scatter (see `_arrival`)

    def take(self, who, awake: bool = False):
        """None if `who` holds the GIL now (taken at once or held already), else the event of
        its turn. A holder asked to drop it does so here and queues behind the asker. An `awake`
        thread (one spinning in a blocker, not asleep) takes a released GIL without a wake-up."""
        if self.holder == who:
            if not (self.drop and self.waiting):
                return None
            self.release(who)
            # forced to hand it over; once the asker holds it (FORCE_SWITCHING), it sleeps on the
            # GIL like any waiter (take_gil), and a release must wake it
        if self.holder is None and not self.reserved:
            self._hold(who)
            return None
        event = self.env.event()
        event.who, event.awake = who, awake
        self.waiting.append(event)
        self._arm(event)
        return event

    def signals(self, who) -> bool:
        """Whether `release(who)` now would signal a sleeping waiter (see `release`)."""
        if self.holder != who or not self.waiting or self.waiting[0].awake:
            return False
        return self.drop or not self.signalled

    def release(self, who) -> bool:
        """Let the GIL go; True if that signalled a sleeping waiter (a wake-up the releasing
        thread pays for)."""
        if self.holder != who:
            return False
        self.holder = None
        if not self.waiting:
            self.drop = False
            return False
        if self.waiting[0].awake:  # a spinning waiter is on the spot
            self.drop = False
            self._give()
            return False
        if self.drop:  # a forced switch: the asker gets it once it is awake
            self.drop, self.reserved = False, True
            self.env.timeout(self.wake).callbacks.append(self._handover)
            return True
        if not self.signalled:
            self.signalled = True
            self.env.timeout(self._arrival()).callbacks.append(self._arrive)
            return True
        return False

    def _arrival(self) -> float:
        """When a signalled waiter gets to look: a hand-over, scattered by half of it either way.
        Real wake-ups scatter so, and it matters: a waiter finds the GIL free about as often
        as the holder leaves it free (in its nogil kernels), where a fixed delay would always
        land in the same phase of a holder's cycle (always free, or never). Seeded: a
        prediction is repeatable."""
        return self.wake * (0.5 + self.jitter.random())

    def _arm(self, event) -> None:
        seen = self.switches
        self.env.timeout(self.switch).callbacks.append(lambda _: self._expired(event, seen))

    def _expired(self, event, seen: int) -> None:
        """A waiter's interval is over: if no other thread took the GIL meanwhile, it asks the
        holder to drop it; either way it waits another interval (CPython's take_gil)."""
        if event.triggered:
            return
        if self.switches == seen and self.holder is not None:
            self.drop = True
        self._arm(event)

    def _handover(self, _) -> None:
        self.reserved = False
        self._give()

    def _arrive(self, _) -> None:
        self.signalled = False
        if self.holder is None and not self.reserved and self.waiting:
            self._give()

    def _give(self) -> None:
        event = self.waiting.popleft()
        self._hold(event.who)
        event.succeed()

    def _hold(self, who) -> None:
        self.holder = who
        if who != self.last:
            self.last = who
            self.switches += 1
