"""What an op's place adds to its cost in the SimPy model: the op that ran before it on its
worker, and data that another worker wrote last. `asyncsim.model.host` asks `Places` when a CPU
worker starts an op (`start`) and tells it when the op ends (`ended`).

- after products (`profile.after_gemm` > 1): a streaming op (elementwise, reduction, copy, a
  layer's normalisation or pooling) that starts on a worker within `AFTER_GEMM_S` of the end of
  a product or convolution on that worker has its bytes time stretched by `after_gemm`. On a
  2-core Intel Xeon VM an 8 MiB relu ran 1.28-1.34x and `x + 1` 1.14-1.24x their time right
  after a 1024x512x2048 product, 1.13-1.27x with 2-10 ms in between, 1.05-1.07x with 50 ms
  (`realexec.calibration.aftergemm`).
- data another worker wrote (`profile.foreign`, `foreign_gemm` > 0, with the caches' model,
  `profile.dram` > 0): each worker lane stands for a core. An op's buffers that it finds in the
  caches (`asyncsim.model.caches`) but that another lane wrote last (its inputs, and the buffer
  its output takes from the pool) add `foreign_gemm` seconds per byte to a product or
  convolution and `foreign` to any other op, to its bytes time (after the stretch above); the
  lane that runs an op is then its output's last writer (`LastLevelCache.foreign`). Measured
  with pinned threads (`realexec.calibration.places`): 9.7-11.4 us per MiB for `x + 1` on
  8 MiB, 20.8-42.7 us per MiB for a dense layer's product, on the 2-core Intel Xeon VM.

- caches that forget (`profile.forget` > 0, with the caches' model): a buffer the op finds in
  the caches by the bytes gone through since (`asyncsim.model.caches`) but that no op touched
  for longer than `forget` seconds is cold after all, and its bytes pay the caches' cold price
  (`LastLevelCache.price`); they are then not priced as another worker's data.

All three follow when and where the op runs, which is known only when it starts; the rest of an
op's price is fixed when it is issued (`Host.prepare`). Units: seconds, bytes.
"""

from __future__ import annotations

import math

from asyncsim.nd.ops import OPS

AFTER_GEMM_S = 0.02  # how long a product or convolution slows the streaming ops after it
GEMM, STREAMING = 1, 2  # an op's part in that
AFTER = {"dot": GEMM, "conv": GEMM, "elementwise": STREAMING, "reduce": STREAMING,
         "copy": STREAMING, "nn": STREAMING}


def part_of(op) -> int:
    """GEMM (a product or convolution), STREAMING or 0: the op's part in both effects."""
    return AFTER.get(OPS[op.name].group, 0)


def foreign_price(profile, part: int) -> float:
    """Seconds per byte that data another worker wrote adds to an op of `part`."""
    return profile.foreign_gemm if part == GEMM else profile.foreign


class Places:
    """Per simulation run: each op's part (GEMM, STREAMING or 0), when each lane's last product
    ended, and the vars each op finds warm (for `foreign` and `forget`)."""

    def __init__(self, profile, caches):
        self.after_gemm = profile.after_gemm if profile.after_gemm > 1.0 else 0.0
        self.foreign = caches is not None and (profile.foreign > 0 or profile.foreign_gemm > 0)
        self.forget = profile.forget if caches is not None else 0.0
        self.caches = caches if self.foreign or self.forget else None
        self.price = {part: foreign_price(profile, part) for part in (0, GEMM, STREAMING)}
        self.on = bool(self.after_gemm or self.caches is not None)
        self.part: list[int] = []  # position -> GEMM, STREAMING or 0
        # position -> (the vars it finds warm, its out, every var it touches, seconds a cold
        # byte adds to it), or None
        self.touches: list = []
        self.last_gemm: dict[str, float] = {}  # worker lane -> when its last product ended

    def prepare(self, op, link: bool, warm: tuple = (), cold_price: float = 0.0) -> None:
        """Note op `op` (the next position): a copy across a link has no part here.
        `cold_price`: seconds a cold byte adds to it (`LastLevelCache.price`)."""
        self.part.append(0 if link else part_of(op))
        every = (*op.reads, op.out) if self.forget else ()
        self.touches.append((warm, op.out, every, cold_price)
                            if self.caches is not None and not link else None)

    def start(self, lane: str, position: int, now: float, by_bytes: float) -> tuple[float, float]:
        """The bytes time of op `position`, starting on `lane` at `now`, with what its place
        adds; and of that, the time its bytes the caches forgot take at `dram` (they come over
        the memory bus, as the cold bytes found at its issue do)."""
        part = self.part[position]
        stale = 0.0
        if (self.after_gemm and part == STREAMING
                and now - self.last_gemm.get(lane, -math.inf) < AFTER_GEMM_S):
            by_bytes *= self.after_gemm
        touched = self.touches[position] if self.caches is not None else None
        if touched is not None:
            warm, out, every, cold_price = touched
            if self.forget:
                gone, warm = self.caches.stale(warm, now - self.forget)
                if gone and cold_price:
                    by_bytes += gone * cold_price
                    stale = gone / self.caches.dram
                self.caches.see(every, now)
            if self.foreign:
                by_bytes += self.caches.foreign(warm, out, lane) * self.price[part]
        return by_bytes, stale

    def ended(self, lane: str, position: int, now: float) -> None:
        """Op `position` has just ended on `lane`: a product or convolution starts the window."""
        if self.part[position] == GEMM:
            self.last_gemm[lane] = now


__all__ = ["AFTER", "AFTER_GEMM_S", "GEMM", "STREAMING", "Places", "foreign_price", "part_of"]
