"""The dependency analysis of `asyncsim.nd.deps.Deps` in compiled code, by var slot: what a
compiled call asks for each op it pushes without Python objects (the engine's light results,
`realexec.engine.light`; the benchmarks' ring reader and one call), and what Python's analysis
cannot be: it runs without the GIL.

The rules are `Deps`'s (read-after-write, write-after-read, write-after-write; a read of a var
the op also writes counts as the write; a var read twice by one op is one read), and so is the
answer: the predecessors' tokens, reads' writers first, in the order `Deps.add` gives them.

Per var slot, a row of `rows`: the token of its last write (-1: none) and the reads since, a
list of nodes in token order. A var that a hundred ops in flight read (`small_ops`) holds a
hundred nodes: no fixed bound per var. A list that has grown to its row's `NEXT` drops its
nodes below `low` (every op below it is done, and a finished predecessor orders nothing),
keeping the one just added, and its next prune comes at twice what is left, as `Deps._prune`
spaces its own. Nodes (`nodes`: token, next) come from one free list whose head is `pool[0]`
(-1: none left). No threads: one caller at a time. Tokens are op numbers in push order (>= 0).
"""

from __future__ import annotations

import numpy as np
from numba import njit

WRITER, HEAD, TAIL, LEN, NEXT = range(5)  # a var slot's row
TOKEN, LINK = 0, 1  # a node
PRUNE = 64  # a reader list this long is weeded of tokens below `low`
OUT_OF_NODES = -1


def new_deps(slots: int, nodes: int):
    """(rows, nodes, pool) for `slots` vars and `nodes` reads in flight."""
    rows = np.full((slots, 5), -1, np.int64)
    rows[:, LEN] = 0
    rows[:, NEXT] = PRUNE
    links = np.empty((nodes, 2), np.int64)
    links[:, LINK] = np.arange(1, nodes + 1)
    links[-1, LINK] = -1
    return rows, links, np.zeros(1, np.int64)


@njit(nogil=True, cache=True)
def fresh(rows, v):
    """Slot `v` holds a new var: nothing written, nothing read."""
    rows[v, WRITER] = -1
    rows[v, HEAD] = -1
    rows[v, TAIL] = -1
    rows[v, LEN] = 0
    rows[v, NEXT] = PRUNE


@njit(nogil=True, cache=True)
def note_read(rows, nodes, pool, v, token, low):
    """Append `token` to `v`'s reads (once per op); False when no node is left."""
    tail = rows[v, TAIL]
    if tail >= 0 and nodes[tail, TOKEN] == token:
        return True
    i = pool[0]
    if i < 0:
        return False
    pool[0] = nodes[i, LINK]
    nodes[i, TOKEN] = token
    nodes[i, LINK] = -1
    if tail >= 0:
        nodes[tail, LINK] = i
    else:
        rows[v, HEAD] = i
    rows[v, TAIL] = i
    rows[v, LEN] += 1
    if rows[v, LEN] >= rows[v, NEXT]:
        # the list is in token order: its finished part is a prefix, cut in one walk
        i = rows[v, HEAD]
        while i != rows[v, TAIL] and nodes[i, TOKEN] < low:
            after = nodes[i, LINK]
            nodes[i, LINK] = pool[0]
            pool[0] = i
            i = after
            rows[v, LEN] -= 1
        rows[v, HEAD] = i
        rows[v, NEXT] = max(PRUNE, 2 * rows[v, LEN])
    return True


@njit(nogil=True, cache=True)
def _users(rows, nodes, pool, v, preds, n):
    """Put `v`'s reads since its last write into `preds` from `n` (or, with none, its writer),
    give their nodes back and empty the list; the new count."""
    i = rows[v, HEAD]
    if i < 0:
        if rows[v, WRITER] >= 0:
            preds[n] = rows[v, WRITER]
            n += 1
        return n
    while i >= 0:
        preds[n] = nodes[i, TOKEN]
        n += 1
        after = nodes[i, LINK]
        nodes[i, LINK] = pool[0]
        pool[0] = i
        i = after
    rows[v, HEAD] = -1
    rows[v, TAIL] = -1
    rows[v, LEN] = 0
    rows[v, NEXT] = PRUNE
    return n


@njit(nogil=True, cache=True)
def add(rows, nodes, pool, token, reads, writes, low, preds):
    """Op `token` reads the slots `reads` and writes `writes`: its predecessors' tokens into
    `preds` (room for every node and read), their count returned; OUT_OF_NODES if a read found
    no node (the op is then half added: the caller stops)."""
    n = 0
    for v in reads:
        written = False
        for w in writes:
            written = written or w == v
        if written:
            continue  # a write covers the read
        if rows[v, WRITER] >= 0:
            preds[n] = rows[v, WRITER]
            n += 1
        if not note_read(rows, nodes, pool, v, token, low):
            return OUT_OF_NODES
    for v in writes:
        if rows[v, HEAD] >= 0 or rows[v, WRITER] != token:  # a var written twice by one op
            n = _users(rows, nodes, pool, v, preds, n)
        rows[v, WRITER] = token
    return n


@njit(nogil=True, cache=True)
def add_fresh(rows, nodes, pool, token, read, write, low):
    """`add(token, (read,), (write,))` where `write` is a fresh var (`fresh` called on its
    slot): the one predecessor, -1 for none, or OUT_OF_NODES - 1."""
    pred = rows[read, WRITER]
    if not note_read(rows, nodes, pool, read, token, low):
        return OUT_OF_NODES - 1
    rows[write, WRITER] = token
    return pred


@njit(nogil=True, cache=True)
def drop(rows, nodes, pool, v, preds):
    """The var in slot `v` is freed: the tokens its deletion waits for (its reads since its last
    write, or that write) into `preds`, their count returned; the slot is left fresh."""
    n = _users(rows, nodes, pool, v, preds, 0)
    fresh(rows, v)
    return n
