"""numba.cuda kernels of the normalising ops: the softmax family, softmax cross-entropy and batch
norm, forward and backward (`KERNELS`, merged into `GPU_KERNELS`), with the semantics of
`asyncsim.nd.ops.nn`.

Same contract as `realexec.gpu.kernels`: `KERNELS[op](inputs, out, attrs, stream)` enqueues op
on stream; arrays are C-contiguous device arrays of float32 or float64, and kernels compile
once per dtype on first use. Each op reduces along rows (the softmax axis) or channels (axis 1
of a batch norm). A softmax's block takes one row at a time: its threads stride along it, and
block-wide shared-memory trees give the max and the sums, in float64 for both dtypes; rows
shorter than a block go one per thread instead (`launch.lanes_of`). A batch norm has few
channels of many values, so a block takes one part of a channel, and the op runs in stages
(one launch each: the stream orders them): each part's sums into a float64 scratch, then the
channel's totals, summed in part order so the result is deterministic, used by the next stage.
One kernel serves each family, the op picked by a mode (a uniform branch).

A row of a softmax along `axis` of shape s is the positions j * inner (j < s[axis]) from a base;
rows are numbered over (outer, inner). A channel c of x (N, C, ...) holds N * inner values
(inner: the product of the dims after C). Statistics are the mean and the biased variance (two
passes: the mean, then squared deviations from it, which cancels less than E[x^2] - E[x]^2).

softmax_ce with a label outside 0..K-1 (or NaN) writes NaN for that example's loss (and NaN
gradients), and never reads outside the logits: a kernel cannot raise on the GPU, so the NaN
carries the error to whatever reads the loss.
Units: elements.
"""

from __future__ import annotations

import math
from math import prod

from realexec.gpu.launch import (
    F64,
    MAX_BLOCKS,
    SCRATCH,
    THREADS,
    blocks,
    cuda,
    flat,
    float64,
    jit,
    lane_max,
    lane_sum,
    lanes_of,
    launch,
    parts_of,
    split_rows,
)

SOFTMAX, LOG_SOFTMAX, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD, CE, CE_GRAD = range(6)
NORMALISE, GRAD, GRAD_GAMMA, UPDATE_MEAN, UPDATE_VAR = range(5)
SUMS, DEVIATIONS, GRADS, APPLY = range(4)  # the stages of a batch norm op (`_channel_stage`)
STAGES = {UPDATE_MEAN: (SUMS, APPLY), UPDATE_VAR: (SUMS, DEVIATIONS, APPLY),
          NORMALISE: (SUMS, DEVIATIONS, APPLY), GRAD_GAMMA: (SUMS, DEVIATIONS, GRADS, APPLY),
          GRAD: (SUMS, DEVIATIONS, GRADS, APPLY)}


@jit(cache=True)
def _row_kernel(a, b, c, out, length, inner, mode, alone):
    """Rows of `length` (see `launch.lanes_of`). Modes and inputs: SOFTMAX / LOG_SOFTMAX (a:
    input); SOFTMAX_GRAD / LOG_SOFTMAX_GRAD (a: the forward's output, b: g); CE (a: logits
    (N, K) as rows, b: labels, out: (N,)); CE_GRAD (a: logits, b: labels, c: g (N,))."""
    buf = cuda.shared.array(THREADS, float64)
    first, step, lane, lanes = lanes_of(alone)
    rows = (a.shape[0] // length) if length else 0
    for r in range(first, rows, step):
        base = (r // inner) * length * inner + r % inner
        if mode == SOFTMAX_GRAD or mode == LOG_SOFTMAX_GRAD:
            acc = 0.0
            for j in range(lane, length, lanes):
                at = base + j * inner
                acc += float64(b[at]) * (float64(a[at]) if mode == SOFTMAX_GRAD else 1.0)
            total = lane_sum(buf, lane, acc, alone)
            for j in range(lane, length, lanes):
                at = base + j * inner
                y, g = float64(a[at]), float64(b[at])
                out[at] = y * (g - total) if mode == SOFTMAX_GRAD else g - math.exp(y) * total
            continue
        top = -math.inf
        for j in range(lane, length, lanes):
            v = float64(a[base + j * inner])
            if v > top or v != v:
                top = v
        top = lane_max(buf, lane, top, alone)
        acc = 0.0
        for j in range(lane, length, lanes):
            acc += math.exp(float64(a[base + j * inner]) - top)
        total = lane_sum(buf, lane, acc, alone)
        if mode == SOFTMAX:
            for j in range(lane, length, lanes):
                at = base + j * inner
                out[at] = math.exp(float64(a[at]) - top) / total
        elif mode == LOG_SOFTMAX:
            for j in range(lane, length, lanes):
                at = base + j * inner
                out[at] = float64(a[at]) - top - math.log(total)
        else:  # CE and CE_GRAD: row r is example r (inner == 1)
            label = float64(b[r])
            bad = not (0.0 <= label < length)  # NaN is bad too
            k = 0 if bad else int(label)
            if mode == CE:
                if lane == 0:
                    out[r] = math.nan if bad else math.log(total) + top - float64(a[base + k])
            else:
                scale = float64(c[r])
                for j in range(lane, length, lanes):
                    p = math.exp(float64(a[base + j]) - top) / total
                    hot = 1.0 if j == k else 0.0
                    out[base + j] = math.nan if bad else (p - hot) * scale


@jit(device=True, cache=True)
def _at(e, ch, channels, inner):
    """Where value e of channel ch lies in a flat (N, channels, inner) array."""
    return ((e // inner) * channels + ch) * inner + e % inner


@jit(device=True, cache=True)
def _total(stats, k, ch, parts):
    """Sum of statistic k of channel ch over its parts, in part order (deterministic)."""
    acc = 0.0
    for part in range(parts):
        acc += stats[k, ch, part]
    return acc


@jit(cache=True)
def _channel_stage(x, g, gamma, beta, out, stats, channels, inner, parts, eps, momentum, mode,
                   stage):
    """One stage of a batch norm op. Block b takes part b % parts of channel b // parts (a run
    of its N * inner values); `stats` (4, channels, parts), float64, holds each part's sums:
    SUMS of x (0), then DEVIATIONS, the squared deviations from the channel's mean (1), then
    GRADS, the sums of g and of g * x normalised (2, 3). APPLY uses the channels' totals: by
    mode NORMALISE (out = x normalised, scaled by gamma, shifted by beta), GRAD (out = x's
    gradient, g: the output's), GRAD_GAMMA (out[c] = sum of g * x normalised),
    UPDATE_MEAN / UPDATE_VAR (out[c], the running statistic, moves towards the batch's)."""
    buf = cuda.shared.array(THREADS, float64)
    lane = cuda.threadIdx.x
    count = x.shape[0] // channels
    span = (count + parts - 1) // parts
    for b in range(cuda.blockIdx.x, channels * parts, cuda.gridDim.x):
        ch, part = b // parts, b % parts
        lo, hi = part * span, min(count, part * span + span)
        if stage == SUMS:
            acc = 0.0
            for e in range(lo + lane, hi, THREADS):
                acc += float64(x[_at(e, ch, channels, inner)])
            acc = lane_sum(buf, lane, acc, False)
            if lane == 0:
                stats[0, ch, part] = acc
            continue
        mean = _total(stats, 0, ch, parts) / count
        if stage == DEVIATIONS:
            acc = 0.0
            for e in range(lo + lane, hi, THREADS):
                d = float64(x[_at(e, ch, channels, inner)]) - mean
                acc += d * d
            acc = lane_sum(buf, lane, acc, False)
            if lane == 0:
                stats[1, ch, part] = acc
            continue
        first = part == 0 and lane == 0  # the one thread that writes a per-channel output
        if mode == UPDATE_MEAN:
            if first:
                out[ch] = momentum * float64(out[ch]) + (1.0 - momentum) * mean
            continue
        var = _total(stats, 1, ch, parts) / count
        if mode == UPDATE_VAR:
            if first:
                out[ch] = momentum * float64(out[ch]) + (1.0 - momentum) * var
            continue
        inv = 1.0 / math.sqrt(var + eps)
        if stage == GRADS:
            sum_g = 0.0
            sum_gx = 0.0
            for e in range(lo + lane, hi, THREADS):
                at = _at(e, ch, channels, inner)
                gv = float64(g[at])
                sum_g += gv
                sum_gx += gv * (float64(x[at]) - mean) * inv
            sum_g = lane_sum(buf, lane, sum_g, False)
            sum_gx = lane_sum(buf, lane, sum_gx, False)
            if lane == 0:
                stats[2, ch, part] = sum_g
                stats[3, ch, part] = sum_gx
            continue
        if mode == NORMALISE:
            scale, shift = float64(gamma[ch]) * inv, float64(beta[ch])
            for e in range(lo + lane, hi, THREADS):
                at = _at(e, ch, channels, inner)
                out[at] = (float64(x[at]) - mean) * scale + shift
            continue
        sum_gx = _total(stats, 3, ch, parts)
        if mode == GRAD_GAMMA:
            if first:
                out[ch] = sum_gx
            continue
        mean_g = _total(stats, 2, ch, parts) / count
        mean_gx = sum_gx / count
        scale = float64(gamma[ch]) * inv
        for e in range(lo + lane, hi, THREADS):
            at = _at(e, ch, channels, inner)
            xhat = (float64(x[at]) - mean) * inv
            out[at] = scale * (float64(g[at]) - mean_g - xhat * mean_gx)


@jit(cache=True)
def _bn_infer_kernel(x, gamma, beta, mean, var, out, channels, inner, eps):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        c = (i // inner) % channels
        scale = float64(gamma[c]) / math.sqrt(float64(var[c]) + eps)
        out[i] = (float64(x[i]) - float64(mean[c])) * scale + float64(beta[c])


# ---- the ops ------------------------------------------------------------------------------------
def _rows(mode):
    def run(inputs, out, attrs, stream):
        a = inputs[0]
        if not a.size:
            return
        if mode in (CE, CE_GRAD):
            length, inner = a.shape[1], 1
        else:
            axis = attrs["axis"]
            length, inner = a.shape[axis], prod(a.shape[axis + 1:])
        b = flat(inputs[1]) if len(inputs) > 1 else flat(a)
        c = flat(inputs[2]) if len(inputs) > 2 else b
        grid, alone = split_rows(a.size // length, length)
        launch(_row_kernel, grid, THREADS, stream, flat(a), b, c, flat(out), length, inner, mode,
               alone)
    return run


def _channels(mode):
    """batch_norm (x, gamma, beta), batch_norm_grad (x, gamma, g), batch_norm_grad_gamma
    (x, g), bn_update (running, x; out is running)."""
    def run(inputs, out, attrs, stream):
        if mode in (UPDATE_MEAN, UPDATE_VAR):
            x = inputs[1]
            params = (x, x, x)
        elif mode == NORMALISE:
            x, gamma, beta = inputs
            params = (x, gamma, beta)
        elif mode == GRAD:
            x, gamma, g = inputs
            params = (g, gamma, x)
        else:
            x, g = inputs
            params = (g, x, x)
        if not x.size:
            return  # no values: out is empty, or (bn_update, grad_gamma) left as it is
        channels = x.shape[1]
        inner = prod(x.shape[2:])
        count = x.size // channels
        # enough blocks to fill the GPU: a channel of many values is cut in parts (8.5's first
        # stage: 64 channels of 200,000 values each, which a block apiece ran 4-5x slower than
        # the bytes allow on an H200)
        parts = parts_of(channels, count)
        stats = SCRATCH.view(stream, 0, (4, channels, parts), F64)
        grid = min(channels * parts, MAX_BLOCKS)
        args = (flat(x), *(flat(p) for p in params), flat(out), stats, channels, inner, parts,
                float(attrs.get("eps", 0.0)), float(attrs.get("momentum", 0.0)), mode)
        for stage in STAGES[mode]:
            launch(_channel_stage, grid, THREADS, stream, *args, stage)
    return run


def _bn_update(inputs, out, attrs, stream):
    mode = UPDATE_MEAN if attrs["stat"] == "mean" else UPDATE_VAR
    _channels(mode)(inputs, out, attrs, stream)


def _batch_norm_infer(inputs, out, attrs, stream):
    x = inputs[0]
    if out.size:
        launch(_bn_infer_kernel, blocks(out.size, MAX_BLOCKS), THREADS, stream,
               *(flat(a) for a in inputs), flat(out), x.shape[1], prod(x.shape[2:]),
               float(attrs["eps"]))


KERNELS = {
    "softmax": _rows(SOFTMAX),
    "log_softmax": _rows(LOG_SOFTMAX),
    "softmax_grad": _rows(SOFTMAX_GRAD),
    "log_softmax_grad": _rows(LOG_SOFTMAX_GRAD),
    "softmax_ce": _rows(CE),
    "softmax_ce_grad": _rows(CE_GRAD),
    "batch_norm": _channels(NORMALISE),
    "batch_norm_grad": _channels(GRAD),
    "batch_norm_grad_gamma": _channels(GRAD_GAMMA),
    "batch_norm_infer": _batch_norm_infer,
    "bn_update": _bn_update,
}
