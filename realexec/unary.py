"""The commonest push, `y = x + 1`, from the frontend to the compiled engine in one Python frame.

`ND._same` hands an op of one array (an arithmetic with a number, relu, copy) to the backend's
`issue_same`. On the compiled engine that used to be three frames: `Issuing._issue_same` (which
op, which buffers), then `NativeEngine.push_unary` or, in sync mode, `run_unary` (the table's
counters, the analysis, the compiled call). Each frame re-read the same attributes and passed
eleven arguments on. `unary_push` returns one function per backend with both written into it,
and the objects that live as long as the engine bound once. Everything else goes to
`_issue_same` as before: another op, a replaced kernel, a GPU in use, `max_inflight`, a poisoned
var anywhere, a closed engine. The records, spans, memory and errors are the same as by that path
(tests/test_engine_fast_path.py holds the two to each other); only the Python between them is
gone: 0.1-0.4 us of a 2-3.8 us op, the old and new paths side by side in one process (2-core
AMD EPYC VM; notes/ACCURACY.md, "The commonest push in one frame"). `light_push` is the same push
on an engine with light results (`realexec.cpu.light`): one compiled call, and no Python var.

Bound once, read each call: the kernel table (`kernels` may be replaced), the engine's analysis
(closing the engine swaps it), the counters, and every flag that sends an op to the general
path. Bound for good: the backend's var dict and its `_take_cpu`, the engine's table (a closed
engine shrinks its table, and a closed engine never reaches it here). Units: nanoseconds
(perf_counter_ns), tokens (op numbers in push order).
"""

from __future__ import annotations

from time import perf_counter_ns

from realexec.cpu.worker import SCALAR
from realexec.engine import layout
from realexec.engine import table as t
from realexec.engine.light import PYTHON_DROP
from realexec.engine.shutdown import EngineStopped
from realexec.issuing import _CODES, _address_of, no_room

_LOW, _DONE = layout.H_LOW, layout.H_DONE


def unary_push(backend):
    """`backend.issue_same` for its compiled engine: `backend._issue_same` with the common case
    (one input on cpu(0), an elementwise op of the compiled worker, the shipped kernel) written
    out for the engine's mode."""
    engine = backend.engine
    general, vars_, take = backend._issue_same, backend.vars, backend._take_cpu
    state, buf, ops, mask = engine.state, engine._buf, engine._ops, engine.cap - 1
    numbers, number_of = engine._numbers, engine._name_number
    sync = engine._sync
    call = engine._run_unary if sync else engine._push_unary

    def issue_same(op_id, name, reads, var, shape, dtype, device, attrs, nbytes) -> None:
        code = backend._unary.get(name)
        if (code is None or len(reads) != 1 or device != "cpu" or backend.gpus
                or engine.max_inflight is not None or engine._closed or engine._tainted):
            general(op_id, name, reads, var, shape, dtype, device, attrs, nbytes)
            return
        t_issue = perf_counter_ns()
        x = vars_[reads[0]]
        try:
            out = take(shape, dtype)
        except MemoryError as exc:
            raise no_room(name, shape, dtype, exc) from None
        vars_[var] = out
        number = numbers.get(name)
        if number is None:
            number = number_of(name)
        a, c = x.ptr or _address_of(x), out.ptr or _address_of(out)
        scalar = attrs.get("scalar", 0.0)
        token = engine._next
        try:
            if token >= engine._next_harvest:
                engine._harvest(token)  # spans read out, or a wait for the slot's last op
            if sync:  # the op runs and is stamped in this call: no analysis, nothing pending
                engine._next = token + 1
                call(state, token, code, _CODES[dtype], out.data.size, a, c, scalar, op_id,
                     number, t_issue)
                return
            if engine._frees and buf[_DONE] != engine._frees_seen:
                engine._run_frees()
        except EngineStopped:  # refused before queuing: give the fresh output back
            del vars_[var]
            backend._release_cpu(out.data)
            raise
        engine._next = token + 1
        slot = token & mask
        pred = engine._deps.add_fresh(token, x, out)
        if pred >= buf[_LOW]:
            # a predecessor in flight can still fail it: the worker then poisons the output by
            # this record; below the mark it is done (`NativeEngine.push_unary`)
            ops[slot] = (name, op_id, (x,), (out,), None, ())
        if call(state, slot, token, SCALAR, code, _CODES[dtype], out.data.size, a, c, scalar,
                pred, op_id, number, t_issue):
            # its predecessor failed after `_tainted` was read: the op waits, held, for its
            # record, which the worker that takes it reads to poison its output
            ops[slot] = (name, op_id, (x,), (out,), None, ())
            t.release_held(state, slot, 0)

    return issue_same


def light_push(backend, heavy):
    """`(issue_same, issue_scalar)` for an engine with light results. `issue_scalar` is the push
    of `unary_push`'s common case on cpu(0) as one compiled call (`realexec.engine.light.push`)
    with the input's var id, the output's var id and bytes (its shape and dtype are the input's,
    which the state holds), the number and the drop held back for it
    (`NDArray`'s operators call it for an op of an array and a number: no records, no attrs
    dict); `issue_same` hands it an op of one array of `ND._same` (relu, and those `issue`
    sends here). The call itself tells the cases it cannot do, having done nothing of them
    (`realexec.cpu.light.LightResults._answered`): light pushes over (the engine closed, a var
    poisoned, a GPU in use), a result of more than `LIGHT_BYTES`, a held drop
    that is a Python var's (deleted by Python, and the push made again), an input the state does
    not hold (a Python var: lent to it when its last write is done and it has at most two
    dimensions, and the push made again; else `heavy`: `unary_push`'s path). So the common push
    tests nothing in Python but the op and the device."""
    engine, world = backend.engine, backend._world
    push, addr, drops = world.push, world.addr, backend._light_drops
    buf, codes, hand = engine._buf, backend._light_codes, backend._hand_drops
    free_python = backend._free_python
    vars_, lent, lend = backend.vars, backend._lent_ids, backend._lend

    def issue_scalar(op_id, name, rid, var, shape, dtype, device, scalar, nbytes, attrs=None):
        op = codes.get(name)  # its op code and name's number, packed
        if op is None:
            op = backend._light_code(name)
        if op < 0 or device != "cpu":
            if drops:
                hand()
            heavy(op_id, name, (rid,), var, shape, dtype, device,
                  {"scalar": scalar} if attrs is None else attrs, nbytes)
            return
        token = engine._next
        if token >= engine._next_harvest:
            engine._harvest(token)  # spans read out, or a wait for the slot's last op
        if engine._frees and buf[_DONE] != engine._frees_seen:
            engine._run_frees()
        dropped = -1
        if drops:  # (a drop on another thread only appends)
            if len(drops) > 1:
                hand(keep=1)
            dropped = drops.pop()
        answer = push(addr, token, op, rid, var, nbytes, scalar, op_id, dropped)
        if answer == PYTHON_DROP:  # a Python var's drop, deleted here; the call made again
            free_python(dropped)
            dropped = -1
            answer = push(addr, token, op, rid, var, nbytes, scalar, op_id, -1)
        if answer:  # not the common case: see `LightResults._answered`
            answer = backend._answered(answer, op_id, name, rid, var, shape, dtype, device,
                                       scalar, nbytes, attrs, token, dropped)
            if answer < 0:
                return
        engine._next = token + 1

    def issue_same(op_id, name, reads, var, shape, dtype, device, attrs, nbytes) -> None:
        # relu, a gradient, `nd.invoke`: as often as not over a Python var whose last write
        # still runs (a dense layer's output), which the call would answer NO_VAR (0.35 us
        # more than this look, which `issue_scalar`'s loops over light results do not pay)
        op = codes.get(name)
        if op is None:
            op = backend._light_code(name)
        rid = reads[0]
        if op >= 0 and len(reads) == 1 and device == "cpu" and (
                rid in lent or rid not in vars_ or lend(vars_[rid], rid)):
            issue_scalar(op_id, name, rid, var, shape, dtype, device, attrs.get("scalar", 0.0),
                         nbytes, attrs)
            return
        if drops:
            hand()
        heavy(op_id, name, reads, var, shape, dtype, device, attrs, nbytes)

    return issue_same, issue_scalar
