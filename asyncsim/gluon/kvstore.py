"""Summing one array held on several devices (allreduce), two ways, as ordinary ops and copies.

- `reduce_on_first` is the chapter's (8.4's `allreduce`, MXNet's 'device' kvstore): every other
  device copies its array to the first, which adds them up, then copies the sum back to each.
  The first device's links carry 2 (k - 1) arrays, and its adds run one after another.
- `ring` is the bandwidth-optimal ring of NCCL and Horovod: the array is cut into k chunks along
  its first axis; in k - 1 reduce-scatter steps each device adds the chunk its left neighbour
  sends, and in k - 1 all-gather steps the finished chunks travel on round the ring. Every link
  carries 2 (k - 1) / k of the array, all links at once, but it issues 2k^2 + 3k(k - 1) ops
  (slices, copies, adds, write-backs) against 3(k - 1) for the first's: worth it for large
  arrays on many devices, not for LeNet's small ones.

Both write the sum into every array in place and return the arrays; the model prices the copies
by the links they cross (`asyncsim.model.profile`), so scaling curves compare the two.
"""

from __future__ import annotations


def reduce_on_first(arrays: list) -> list:
    first = arrays[0]
    for a in arrays[1:]:
        first[:] += a.copyto(first.context)
    for a in arrays[1:]:
        first.copyto(a)
    return arrays


def _chunks(rows: int, k: int) -> list[tuple[int, int]]:
    step, extra = divmod(rows, k)
    bounds, start = [], 0
    for i in range(k):
        stop = start + step + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring(arrays: list) -> list:
    """Ring allreduce; an array with fewer rows than devices (or a scalar) is summed by
    `reduce_on_first`, as NCCL does for tiny buffers in effect. Each device's array is cut into
    chunk arrays once, the ring's steps add and copy whole chunks (a copy and an add per chunk
    and step, as NCCL's kernels work on chunks of one buffer in place), and the chunks are
    written back at the end."""
    k = len(arrays)
    shape = arrays[0].shape
    if k == 1:
        return arrays
    if not shape or shape[0] < k:
        return reduce_on_first(arrays)
    chunks = _chunks(shape[0], k)
    parts = [[a[start:stop] for start, stop in chunks] for a in arrays]
    for step in range(k - 1):  # reduce-scatter: chunk c gathers its sum on device c - 1
        for i in range(k):
            c, dst = (i - step) % k, (i + 1) % k
            parts[dst][c] += parts[i][c].copyto(arrays[dst].context)
    for step in range(k - 1):  # all-gather: the finished chunks go round once more
        for i in range(k):
            c = (i + 1 - step) % k
            parts[i][c].copyto(parts[(i + 1) % k][c])
    for a, own in zip(arrays, parts, strict=True):
        for (start, stop), part in zip(chunks, own, strict=True):
            a[start:stop] = part
    return arrays


ALLREDUCE = {"device": reduce_on_first, "ring": ring}

__all__ = ["ALLREDUCE", "reduce_on_first", "ring"]
