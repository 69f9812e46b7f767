"""The preset of the book's GPU machine as 8.4 and 8.5 use it ("book-gpu"), derived from the
chapter's own one-GPU epochs and registered beside the model's presets.

It lives in the lab because its derivation reads the chapter's workloads (how many ops a LeNet
batch issues, how many flops a ResNet-18 batch convolves), which the model layer must not import.
Machine B's GPU, links and CPU are the "book" preset's (8.3's matrix products and copies); two
values are fitted, each to one printed number (declared in `FITTED`, read by `Profile.fitted`):

- t1, from 8.4's LeNet on one GPU, 'epoch 1' (1.5 s): LeNet's kernels are microseconds, so the
  epoch is the frontend issuing every op of its 235 batches: epoch = batches x (Python-issued ops
  x t1 + backward's ops x their issue). 12.2.1's t1 (machine A's numpy interface) is 3x slower
  than what this epoch allows.
- the GPU's convolution peak, from 8.5's ResNet-18 on one GPU, 'epoch 1' (14.0 s): the epoch is
  the GPU running every batch: peak = conv flops / (epoch / batches - the other ops' time).

The two-GPU epochs of both networks, and the later one-GPU epochs, are then predictions.
ASSUMED (MXNet's structure, not measured by any chapter): gpu->gpu copies at 4x the pageable
gpu->cpu copy 8.3.2 measures (peer to peer on one board: about 11 GB/s against 2.7 GB/s); an op
that autograd's backward or a Trainer's allreduce and update issues costs the frontend 5 us
("frontend:backward", "frontend:kvstore"): MXNet pushes those from C++, while this toolkit's are
Python (the realexec profile prices its own); the bias reshape of `nd.Convolution` and the
running statistics of `nd.BatchNorm` cost no issue (MXNet's ops do them inside); the
book's `load_data_fashion_mnist` makes each batch with Gluon's DataLoader, whose ToTensor
transform runs in Python per image, in 4 worker processes on Linux (d2lzh's `num_workers`); the
frontend still pays per batch it takes from them (a batch handed over between processes and
copied in): 15 us an image, paid by the frontend with the batch's copy in ("frontend:array"),
the same on one GPU or two. No printed number isolates that cost, but one of about that size is
needed: with none, t1 refits to 124 us and the two-GPU LeNet epoch comes out 48% slow. Note
that 8.4's allreduce and SGD are the chapter's own Python, so they pay t1 per op.

An op with a scalar operand (8.4's SGD: `lr * grad / batch_size`) issues at t1 here, as on
machine C ("book-zh"): no chapter times one on machine B. The "book" preset's cheaper price for
12.2.3's x + 1 (`book.T1_ADD_SCALAR`, 77 us) is machine A's, where it is a third of A's t1 (220
us); B's t1, fitted here, is 34 us with that price and 48 us without, so A's absolute price
would make B's scalar ops dearer than its other ops, the reverse of the fast path it stands for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math

from asyncsim.model import book
from asyncsim.model.cost import Cost
from asyncsim.model.printed import value
from asyncsim.model.profile import Profile
from asyncsim.nd.program import Mark, Op

FITTED = frozenset({("lenet_1gpu", "epoch 1"), ("resnet18_1gpu", "epoch 1")})
TRAIN = 60000  # Fashion-MNIST's training images
PEER_LINK = 4.0  # ASSUMED: gpu->gpu over gpu->cpu bandwidth
LOADER_IMAGE = 15e-6  # ASSUMED: the frontend's seconds per image of a batch from the DataLoader
IMAGE_BYTES = 28 * 28 * 4  # a Fashion-MNIST image as float32
ASSUMED = ("gpu->gpu at 4x gpu->cpu; backward's and the kvstore's ops pushed from C++ at 5 us; "
           "Convolution's bias reshape and BatchNorm's statistics inside their ops; the data "
           "loader's batch taken at 15 us per image")


def _batch_ops(name: str) -> list[Op]:
    """The ops one training batch of scenario `name` issues inside its 'epoch 1' region."""
    from asyncsim.lab import scenarios

    scenario = scenarios.get(name)
    batch = scenario.params["batch_size"]
    with contextlib.redirect_stdout(io.StringIO()):  # the chapter's prints: not the preset's
        program = scenario.record(epochs=1, num_train=batch, num_test=batch)
    ops, inside = [], False
    for ins in program.instrs:
        if isinstance(ins, Mark) and ins.label == "epoch 1":
            inside = ins.begin
        elif inside and isinstance(ins, Op):
            ops.append(ins)
    return ops


@functools.cache
def book_gpu() -> Profile:
    """Machine B running the chapter's 8.4 and 8.5 (see the module docstring)."""
    base = book.book()
    costs = dict(base.costs)
    # ops MXNet issues from C++ or folds into another op: backward's ops and a Trainer's
    # kvstore work, the bias's reshape inside Convolution, the running statistics inside
    # BatchNorm
    costs["frontend:backward"] = costs["frontend:kvstore"] = Cost(latency=book.CXX_ISSUE)
    costs["frontend:reshape"] = costs["frontend:bn_update"] = Cost()
    # the frontend takes each batch from the book's data loader (see LOADER_IMAGE)
    costs["frontend:array"] = Cost(bandwidth=IMAGE_BYTES / LOADER_IMAGE)
    # machine A's absolute price of x + 1 is not B's: scalar ops pay B's t1 (module docstring)
    del costs["frontend:add_scalar"]
    links = dict(base.links)
    links["gpu->gpu"] = Cost(bandwidth=base.links["gpu->cpu"].bandwidth * PEER_LINK)
    draft = Profile(**{**_fields(base), "costs": costs, "links": links})

    # t1: the LeNet epoch is the frontend issuing its batches' ops
    lenet = _batch_ops("lenet_1gpu")
    batches = math.ceil(TRAIN / 256)
    priced = [draft.issue_rule(op) for op in lenet]
    known = sum(rule.time(op.nbytes, op.flops) for op, rule in zip(lenet, priced, strict=True)
                if rule is not None)
    generic = sum(1 for rule in priced if rule is None)
    t1 = (value("lenet_1gpu", "epoch 1") / batches - known) / generic

    # the convolution peak: the ResNet-18 epoch is the GPU running its batches' ops
    resnet = _batch_ops("resnet18_1gpu")
    on_gpu = [op for op in resnet if op.device.startswith("gpu") and op.name != "copyto"]
    conv = [op for op in on_gpu if op.name.startswith("conv2d")]
    others = sum(draft.cost(op) for op in on_gpu if not op.name.startswith("conv2d"))
    per_batch = value("resnet18_1gpu", "epoch 1") / batches
    if per_batch <= others:
        raise ValueError("book-gpu: ResNet-18's non-convolution ops alone exceed its epoch")
    costs["gpu:conv"] = Cost(latency=book.GPU_LAUNCH,
                             peak=sum(op.flops for op in conv) / (per_batch - others))
    meta = dict(base.meta, fitted=sorted([list(pair) for pair in FITTED]),
                machines="the d2l-zh book's GPU machine, 8.4 and 8.5 (seed 003)",
                assumed=base.meta.get("assumed", "") + "; " + ASSUMED)
    return Profile(**{**_fields(draft), "name": "book-gpu", "t1": t1, "costs": costs,
                      "meta": meta})


def _fields(profile: Profile) -> dict:
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile) if f.init}


def register() -> None:
    """Make `Profile.preset("book-gpu")` and the book's machine table know this preset."""
    book.PRESETS.setdefault("book-gpu", book_gpu)
    book.FITTED.setdefault("book-gpu", FITTED)
    book.MACHINES.setdefault("G", "book-gpu")


__all__ = ["FITTED", "book_gpu", "register"]
