# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 8.4 Multi-GPU computation and 8.5 its concise implementation (Chinese edition)
#
# Data parallelism: every device holds a copy of the parameters, each batch is split across the
# devices (`split_and_load`), each computes the gradients of its part, and the gradients are
# summed and copied back (`allreduce`) before every device takes the same step.
#
# The book trains on one GPU and on two. Those cells are **predicted only**, on the `book-gpu`
# profile (the chapter's GPU machine, `asyncsim.lab.presets`), beside the times the chapter
# printed; nothing in this notebook runs on a GPU. The same code runs here for real on **CPU
# devices**: `nd.cpu(0)` and `nd.cpu(1)` are devices of their own (memory of their own; their
# ops run on the CPU's workers, the same cores, and show on lanes of their own), at tiny sizes
# (a few batches; synthetic Fashion-MNIST unless you have the files).

# %%
import inspect

import numpy as np
from IPython.display import display

import realexec
from asyncsim.lab import book_figures, book_figures_training, scenarios
from asyncsim.lab.exercises import lesson
from asyncsim.lab.scenarios.data_parallel import allreduce, get_params, split_and_load

QUICK = True  # False: the full calibration (about 40 s once, then cached)
HERE = realexec.calibrate(quick=QUICK, progress=False)
NETWORKS = {"LeNet": ("lenet_1gpu", "lenet_2gpu"),
            "ResNet-18": ("resnet18_1gpu", "resnet18_2gpu")}

# %% [markdown]
# ## 8.4.3 Copying parameters, summing gradients, splitting a batch
#
# The chapter's helpers: `get_params` copies the parameters to a device and gives them
# gradients, `allreduce` sums on the first device and copies the sum back, `split_and_load`
# cuts a batch into one slice per device.

# %%
for helper in (get_params, allreduce, split_and_load):
    print(inspect.getsource(helper))

# %% [markdown]
# The chapter's demo on two GPUs, predicted only (its regions on the book's GPU machine):

# %%
print(lesson.against_book("multi_gpu_helpers",
                          profile=scenarios.get("multi_gpu_helpers").book_profile))

# %% [markdown]
# The same demo run here, on the two CPU devices:

# %%
with realexec.session() as nd:
    ctx = [nd.cpu(0), nd.cpu(1)]
    data = [nd.ones((1, 2), ctx=ctx[i]) * (i + 1) for i in range(2)]
    print('before allreduce:', data)
    allreduce(data)
    print('after allreduce:', data)
    batch = nd.array(np.arange(24).reshape((6, 4)))
    splitted = split_and_load(batch, ctx)
    print('input: ', batch)
    print('load into', [str(c) for c in ctx])
    print('output:', splitted)
    summed = [d.asnumpy().tolist() for d in data]
assert summed == [[[3.0, 3.0]], [[3.0, 3.0]]]

# %% [markdown]
# ## 8.4.4-8.4.6 LeNet from scratch, and 8.5.2 ResNet-18 with Gluon
#
# 8.4 trains LeNet with the helpers above and a `waitall` after every batch; 8.5 trains the
# chapter's ResNet-18 with `net.initialize(ctx=[...])`, `gutils.split_and_load` and a `Trainer`
# that sums the gradients.

# %%
print(lesson.listing("lenet_1gpu"))
print(lesson.listing("resnet18_1gpu"))

# %% [markdown]
# ### On the book's GPUs (predicted only)
#
# An epoch is 60000 images: the model simulates 2 and 4 batches and extrapolates (within 1% of
# simulating the whole epoch, which takes it some 20 s for the four). The `book-gpu` profile
# took its t1 from LeNet's one-GPU epoch 1 and its convolution peak from ResNet-18's, so those
# rows agree by construction; the two-GPU rows are predictions. The book's column is the mean of
# its epochs 2-4 (its epoch 1 carries a warm-up).

# %%
predicted = {}
print(f"{'scenario':<16s} {'batch':>6s} {'predicted':>10s} {'book':>8s}")
for names in NETWORKS.values():
    for name in names:
        predicted[name] = book_figures_training.epoch_time(name)
        book = book_figures_training.book_epochs(name)[0]
        batch = scenarios.get(name).params["batch_size"]
        print(f"{name:<16s} {batch:6d} {predicted[name]:9.2f}s {book:7.1f}s")

# %% [markdown]
# Why they go opposite ways: LeNet's kernels take microseconds, so the frontend issuing them is
# the bottleneck, and two GPUs issue twice the ops (plus the allreduce's copies); ResNet-18 keeps
# each GPU busy for tens of milliseconds a step, so two GPUs nearly halve the epoch. One step of
# each, lane by lane:

# %%
display(lesson.picture(book_figures.FIGURES["data_parallel"]()))

# %% [markdown]
# ### On this machine's CPU devices (predicted and measured)
#
# LeNet, two batches of 256 (one epoch of 512 images), on `cpu(0)` and then on `cpu(0)` and
# `cpu(1)`; ResNet-18, two batches of 8. Predicted from this machine's profile, measured by the
# engine. The CPU devices share this machine's cores, so two of them are not twice the hardware
# that two GPUs are.

# %%
sizes = {"lenet": dict(num_train=512, num_test=64),
         "resnet18": dict(num_train=16, num_test=8, batch_size=8)}
for net, small in sizes.items():
    for devices in (1, 2):
        print(lesson.here(f"{net}_cpu{devices}", HERE, **small)[0], "\n")

# %% [markdown]
# ## Check: one network slows down on two GPUs, the other speeds up
#
# The chapters' point, read off the model's predictions for the book's machine (the two-GPU
# epochs are not fitted to anything) and held against the book's printed epochs.

# %%
lenet, resnet = ([predicted[name] for name in names] for names in NETWORKS.values())
book_lenet, book_resnet = ([book_figures_training.book_epochs(name)[0] for name in names]
                           for names in NETWORKS.values())
assert book_lenet[1] > book_lenet[0] and book_resnet[1] < book_resnet[0]
assert lenet[1] > lenet[0], "the model should predict LeNet slower on two GPUs"
assert resnet[1] < resnet[0], "the model should predict ResNet-18 faster on two GPUs"
print(f"passed: the model predicts LeNet slower on two GPUs ({lenet[0]:.2f} s -> "
      f"{lenet[1]:.2f} s an epoch; the book: {book_lenet[0]:.1f} s -> {book_lenet[1]:.1f} s) "
      f"and ResNet-18 faster ({resnet[0]:.1f} s -> {resnet[1]:.1f} s; the book: "
      f"{book_resnet[0]:.1f} s -> {book_resnet[1]:.1f} s)")

# %% [markdown]
# ## Exercises
#
# `exercises.check(key, answer)` runs your answer and says why it passes or not;
# `exercises.reference(key)` is a worked answer. GPU questions are checked on the model (this
# machine needs no GPU); those whose answer computes values also run it here on CPU devices.

# %%
from asyncsim import exercises  # noqa: E402

for key, title in exercises.list().items():
    if key.startswith(("8.4-", "8.5-")):
        print(f"{key}: {title}")

# %% [markdown]
# ### 8.4-3
# A faster allreduce: your answer is a function `allreduce(grads)` taking, per parameter, the
# list of its gradients on every device, leaving the sum in each. Here is the section's own,
# which the check refuses (it is the baseline to beat), then the worked answer.

# %%
print(exercises.check("8.4-3", allreduce_lists := exercises.reference("8.4-3")))
from asyncsim.lab.exercises.multi_device_allreduce import section_allreduce  # noqa: E402

print(exercises.check("8.4-3", section_allreduce))
print(inspect.getsource(allreduce_lists))

# %% [markdown]
# ### 8.4-1, 8.4-4 and 8.5-2
# Scale the minibatch with the number of GPUs; compute test accuracy on every GPU; divide a
# minibatch between two GPUs and the CPU. Each reference answer, checked:

# %%
for key in ("8.4-1", "8.4-4", "8.5-2"):
    result = exercises.check(key, exercises.reference(key))
    print(f"{key}: {result}")
    assert result.passed
