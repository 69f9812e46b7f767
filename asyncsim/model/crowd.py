"""Kernels crowding each other in the SimPy model: two cores sharing one memory system.

A crowding kernel (a CPU cost with `crowd` > 0: the memory-bound ops and the convolutions) runs
slower while other crowding kernels run beside it: its bytes time is stretched by `crowd` for
each of them, and the part of it its cold bytes take (`from_dram`) by `dram_crowd` for each
other kernel moving cold bytes (the memory bus, which the workers share more than the caches).

The stretch follows the kernels that run at each moment, not those running when it started:
a kernel runs its whole at the rate its time would have if the crowd it meets now lasted to its
end, so one alone for half its time and beside another for the other half takes half of each
time. Two kernels issued together are stretched alike, which is what calibration measures (both
at once against each alone: `realexec.calibration.fits.set_crowding`); the rule before this one
fixed each kernel's stretch at its start, so the first of two started together ran as if alone
and the model gave a pair half the slowdown calibration had measured, while a long kernel that
started beside a short one's last microseconds was stretched for its whole time.

When the crowd changes (a crowding kernel starts or ends), every other crowding kernel running
is interrupted and runs what it has left at its new rate; with `Cores` (more runnable threads
than cores) a kernel also runs at its share of a core, and is re-timed when that changes.

Units: seconds, at a full core's speed.
"""

from __future__ import annotations

from simpy import Interrupt

__all__ = ["Crowd"]


class Crowd:
    """The crowding kernels running now (`count`, `streaming`), and their processes."""

    def __init__(self, env, dram_crowd: float = 0.0, cores=None):
        self.env, self.dram_crowd, self.cores = env, dram_crowd, cores
        self.count = 0  # crowding kernels running now
        self.streaming = 0  # of all kernels here, those moving cold bytes now
        # process -> [crowds (0/1), streams (0/1), interrupted and not yet re-timed]
        self.running: dict = {}

    def seconds(self, latency: float, by_bytes: float, by_flops: float, crowd: float,
                from_dram: float, crowds: int, streams: int) -> float:
        """The kernel's whole time if the crowd it meets now (itself left out) lasted."""
        seconds = latency + (by_bytes - from_dram) * (1.0 + crowd * (self.count - crowds))
        if from_dram:
            seconds += from_dram * (1.0 + self.dram_crowd * (self.streaming - streams))
        return seconds + by_flops

    def run(self, latency: float, by_bytes: float, by_flops: float, crowd: float,
            from_dram: float):
        """Generator: one kernel's time among the others (its parts as `Host.prepare` splits
        them), ending when it has run its whole at the rates it met."""
        env, cores = self.env, self.cores
        process = env.active_process
        crowds, streams = int(crowd > 0), int(from_dram > 0)
        entry = [crowds, streams, False]
        self._change(process, entry, +1)
        left = 1.0  # the share of the kernel still to run
        while True:
            share = 1.0 if cores is None else cores.share
            rate = share / self.seconds(latency, by_bytes, by_flops, crowd, from_dram, crowds,
                                        streams)
            start = env.now
            if cores is not None:
                cores.working.add(process)
            try:
                # only the timeout ends the kernel: an interrupt that finds it all but done
                # waits a zero timeout, behind any other interrupt sent at this moment
                yield env.timeout(max(left, 0.0) / rate)
                break
            except Interrupt:
                entry[2] = False
                left -= (env.now - start) * rate
            finally:
                if cores is not None:
                    cores.working.discard(process)
        self._change(process, entry, -1)

    def _change(self, process, entry: list, step: int) -> None:
        """A kernel starts (+1) or ends (-1): the others it crowds run at their new rate."""
        crowds, streams = entry[0], entry[1]
        if step > 0:
            self.running[process] = entry
        else:
            del self.running[process]
        self.count += step * crowds
        self.streaming += step * streams
        for other, state in self.running.items():
            if other is process or state[2]:  # interrupted once already at this moment
                continue
            if crowds and state[0] or streams and state[1]:
                state[2] = True
                other.interrupt()
