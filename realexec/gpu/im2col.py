"""conv2d and its two gradients as matrix products on the GPU: im2col into a scratch buffer, the
tiled `dot` kernel of `realexec.gpu.matmul`, and a permute into (N, F, Ho, Wo).

For a chunk of nb images, `cols` (C*kh*kw, nb*Ho*Wo) holds every window as a column (zeros
where it covers padding), so that weight (F, C*kh*kw) @ cols = the chunk's outputs as
(F, nb*Ho*Wo), which a permute writes into out[n0:n0 + nb]. The weight gradient is
g (F, nb*Ho*Wo) @ cols^T summed over chunks; the data gradient is col2im(weight^T @ g), where
col2im gathers, for each input element, the window entries that read it (no atomics, so the
result is deterministic). The direct kernel
(`nn._conv2d_kernel`) re-reads each window from global memory for every filter; here the
product runs at the tiled kernel's rate (26 TFLOP/s in float32 for `dot` at 4096^3 on an H100),
for one extra write and read of `cols`. It should pay for layers with many filters and a long
window (`worth_it`; thresholds not yet measured on a GPU); LeNet-sized layers (6 filters) stay
direct.

Scratch: `cols` and the product live in per-stream buffers (`launch.SCRATCH`) that grow to the
largest request and are kept. Chunks are sized so that `cols` stays under SCRATCH_ELEMENTS.
Units: elements.
"""

from __future__ import annotations

from realexec.gpu.launch import MAX_BLOCKS, SCRATCH, SIM, THREADS, blocks, cuda, jit, launch
from realexec.gpu.matmul import matmul_launch, transposed

# Below these sizes the direct kernel is used (real GPU: a guess from the tile sizes, not yet
# measured; see the module docstring). Tests lower them to reach this path under the simulator.
MIN_FILTERS = 32  # rows of the product: a BM = 128 tile row should be mostly used
MIN_WINDOW = 32  # C * kh * kw: the depth of the product
SCRATCH_ELEMENTS = 4096 if SIM else 1 << 24  # cap of `cols` per chunk (64 MB in float32)


def worth_it(filters: int, window: int) -> bool:
    return filters >= MIN_FILTERS and window >= MIN_WINDOW


@jit(device=True, cache=True)
def covering(pos, pad, k, stride, count):
    """(first, last + 1) of the output positions along one axis whose window covers input
    position `pos`: o * stride - pad <= pos <= o * stride - pad + k - 1, 0 <= o < count."""
    lo = pos + pad - k + 1
    first = 0 if lo <= 0 else (lo + stride - 1) // stride
    last = min((pos + pad) // stride, count - 1)
    return first, last + 1


@jit(device=True, cache=True)
def nchw(e, c_, h_, w_):
    """(n, c, h, w) of flat position e of a C-order (N, c_, h_, w_) array."""
    return e // (w_ * h_ * c_), (e // (w_ * h_)) % c_, (e // w_) % h_, e % w_


@jit(cache=True)
def _im2col_kernel(x, cols, n0, sh, sw, ph, pw, kh, kw, ho_, wo_, zero):
    rows, width = cols.shape
    h_, w_ = x.shape[2], x.shape[3]
    for e in range(cuda.grid(1), rows * width, cuda.gridsize(1)):
        r, col = e // width, e % width
        j = r % kw
        i = (r // kw) % kh
        c = r // (kw * kh)
        wo = col % wo_
        ho = (col // wo_) % ho_
        n = n0 + col // (wo_ * ho_)
        h, w = ho * sh - ph + i, wo * sw - pw + j
        cols[r, col] = x[n, c, h, w] if 0 <= h < h_ and 0 <= w < w_ else zero


@jit(cache=True)
def _col2im_kernel(dcols, dx, n0, sh, sw, ph, pw, kh, kw, ho_, wo_, zero):
    """dx[n0 + n, c, h, w] = the sum of dcols over the windows of image n that cover (h, w):
    `_im2col_kernel` turned around, one thread per element of the chunk's images."""
    c_, h_, w_ = dx.shape[1], dx.shape[2], dx.shape[3]
    images = dcols.shape[1] // (ho_ * wo_)
    for e in range(cuda.grid(1), images * c_ * h_ * w_, cuda.gridsize(1)):
        n, c, h, col = nchw(e, c_, h_, w_)
        ho0, ho1 = covering(h, ph, kh, sh, ho_)
        wo0, wo1 = covering(col, pw, kw, sw, wo_)
        acc = zero
        for ho in range(ho0, ho1):
            row = (c * kh + h + ph - ho * sh) * kw
            for wo in range(wo0, wo1):
                acc += dcols[row + col + pw - wo * sw, (n * ho_ + ho) * wo_ + wo]
        dx[n0 + n, c, h, col] = acc


@jit(cache=True)
def _permute_kernel(product, out, n0):
    """out[n0 + n, f, p] = product[f, n * P + p] (P = Ho * Wo; out viewed as (N, F, P))."""
    filters, width = product.shape
    pixels = out.shape[2]
    for e in range(cuda.grid(1), filters * width, cuda.gridsize(1)):
        f, col = e // width, e % width
        out[n0 + col // pixels, f, col % pixels] = product[f, col]


@jit(cache=True)
def _gather_kernel(g, gmat, n0):
    """gmat[f, n * P + p] = g[n0 + n, f, p] (g viewed as (N, F, P)): `_permute_kernel`'s
    inverse, so that a chunk's output gradients are one (F, nb * P) operand."""
    filters, width = gmat.shape
    pixels = g.shape[2]
    for e in range(cuda.grid(1), filters * width, cuda.gridsize(1)):
        f, col = e // width, e % width
        gmat[f, col] = g[n0 + col // pixels, f, col % pixels]


@jit(cache=True)
def _accumulate_kernel(total, part):
    rows, width = total.shape
    for e in range(cuda.grid(1), rows * width, cuda.gridsize(1)):
        total[e // width, e % width] += part[e // width, e % width]


def _im2col_chunks(x, kernel, out_hw, geometry, stream, dtype):
    """(first image, cols) per chunk of x's images, each chunk's im2col enqueued on `stream`
    into scratch slot 2: cols is (C*kh*kw, nb*Ho*Wo), a column per window, for as many images
    as keep it under SCRATCH_ELEMENTS. The caller enqueues its use of cols before asking for
    the next chunk (stream order keeps the slot's reuse safe)."""
    n_, c_ = x.shape[0], x.shape[1]
    (kh, kw), (ho_, wo_) = kernel, out_hw
    window, pixels = c_ * kh * kw, ho_ * wo_
    chunk = max(1, min(n_, SCRATCH_ELEMENTS // max(window * pixels, 1)))
    zero = dtype.type(0)
    for n0 in range(0, n_, chunk):
        cols = SCRATCH.view(stream, 2, (window, min(chunk, n_ - n0) * pixels), dtype)
        launch(_im2col_kernel, blocks(cols.size, MAX_BLOCKS), THREADS, stream,
               x, cols, n0, *geometry, kh, kw, ho_, wo_, zero)
        yield n0, cols


def conv2d_gemm(x, w, out, geometry, stream) -> None:
    """Enqueue out = conv2d(x, w) (geometry: sh, sw, ph, pw) by chunks of images."""
    n_, f_ = x.shape[0], w.shape[0]
    weight = w.reshape(f_, w.size // f_)
    out3 = out.reshape(n_, f_, out.shape[2] * out.shape[3])
    zero = out.dtype.type(0)
    for n0, cols in _im2col_chunks(x, w.shape[2:], out.shape[2:], geometry, stream, out.dtype):
        product = SCRATCH.view(stream, 3, (f_, cols.shape[1]), out.dtype)
        kernel, grid, block = matmul_launch(f_, cols.shape[1])
        launch(kernel, grid, block, stream, weight, cols, product, zero)
        launch(_permute_kernel, blocks(product.size, MAX_BLOCKS), THREADS, stream,
               product, out3, n0)


def conv2d_grad_weight_gemm(x, g, dw, geometry, stream) -> None:
    """Enqueue dw = conv2d's weight gradient (x the input, g the output's gradient) by chunks of
    images: dw as (F, C*kh*kw) = the sum over chunks of g (F, nb*P) @ cols(x)^T, the forward's
    im2col and tiled product turned around (the direct kernel reduced N * P terms per weight
    element in one block: 64 ms a layer of 8.5's ResNet-18 at batch 256 on an H200, against
    1.6 ms for the forward). Scratch: cols in slot 2, g's chunk in 3, cols^T in 0 (`transposed`),
    a later chunk's product in 1, added into dw."""
    n_, f_ = x.shape[0], dw.shape[0]
    g3 = g.reshape(n_, f_, g.shape[2] * g.shape[3])
    dw2 = dw.reshape(f_, dw.size // f_)
    zero = dw.dtype.type(0)
    kernel, grid, block = matmul_launch(*dw2.shape)
    for n0, cols in _im2col_chunks(x, dw.shape[2:], g.shape[2:], geometry, stream, dw.dtype):
        gmat = SCRATCH.view(stream, 3, (f_, cols.shape[1]), dw.dtype)
        launch(_gather_kernel, blocks(gmat.size, MAX_BLOCKS), THREADS, stream, g3, gmat, n0)
        target = dw2 if n0 == 0 else SCRATCH.view(stream, 1, dw2.shape, dw.dtype)
        launch(kernel, grid, block, stream, gmat, transposed(cols, stream, 0), target, zero)
        if n0:
            launch(_accumulate_kernel, blocks(dw2.size, MAX_BLOCKS), THREADS, stream,
                   dw2, target)


def conv2d_grad_data_gemm(g, w, dx, geometry, stream) -> None:
    """Enqueue dx = conv2d's data gradient (g the output's gradient, w the weight) by chunks of
    images: dcols (C*kh*kw, nb*P) = w^T (C*kh*kw, F) @ g's chunk (F, nb*P), then col2im into
    dx[n0:n0 + nb]. The direct kernel re-read the filters for every input element: 22.6 ms a
    layer of 8.5's ResNet-18 at batch 256 on an H200. Scratch: w^T in slot 0 (`transposed`,
    made once), g's chunk in 3, dcols in 2."""
    n_, f_ = dx.shape[0], w.shape[0]
    (kh, kw), (ho_, wo_) = w.shape[2:], g.shape[2:]
    window, pixels = w.size // f_, ho_ * wo_
    g3 = g.reshape(n_, f_, pixels)
    weight_t = transposed(w.reshape(f_, window), stream, 0)
    chunk = max(1, min(n_, SCRATCH_ELEMENTS // max(window * pixels, 1)))
    zero = dx.dtype.type(0)
    for n0 in range(0, n_, chunk):
        width = min(chunk, n_ - n0) * pixels
        gmat = SCRATCH.view(stream, 3, (f_, width), dx.dtype)
        launch(_gather_kernel, blocks(gmat.size, MAX_BLOCKS), THREADS, stream, g3, gmat, n0)
        dcols = SCRATCH.view(stream, 2, (window, width), dx.dtype)
        kernel, grid, block = matmul_launch(window, width)
        launch(kernel, grid, block, stream, weight_t, gmat, dcols, zero)
        launch(_col2im_kernel, blocks(width // pixels * (dx.size // n_), MAX_BLOCKS), THREADS,
               stream, dcols, dx, n0, *geometry, kh, kw, ho_, wo_, zero)
