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
# # Asynchronous computation, the PyTorch edition's page
#
# PyTorch queues GPU ops on a stream and returns; `torch.cuda.synchronize(device)` waits for all
# of them (`nd.waitall()` here). The page's experiments run on a GPU, so here they are
# **predicted only**, on the `book` profile; nothing in this notebook runs on a GPU. Its
# exercise is about the CPU, and runs on this machine.

# %%
import inspect

from asyncsim import exercises
from asyncsim.lab.exercises import lesson

# %% [markdown]
# ## Asynchrony via the backend (predicted only: GPU)
#
# `torch` only queues ten products on the GPU; `Done` synchronises. (`numpy` is plain NumPy on
# the frontend, which a prediction does not see.)

# %%
print(lesson.listing("torch_warmup"))
print(lesson.against_book("torch_warmup"))

# %% [markdown]
# ## The dependency graph (predicted only: GPU)

# %%
print(lesson.listing("torch_dependency"))
print(lesson.against_book("torch_dependency"))

# %% [markdown]
# ## Improving computation (predicted only: GPU)
#
# 10000 `y = x + 1`: 10000 (t1 + t2 + t3) with a synchronize each, and t1 + 10000 t2 + t3 with
# one, provided 10000 t2 > 9999 t1. A kernel launch of a tiny op costs less than issuing it, so
# on the book's machine the frontend is the bottleneck, as 12.2-1's worked answer explains:

# %%
print(lesson.listing("torch_sync_vs_async"))
print(lesson.against_book("torch_sync_vs_async"))
print(exercises.reference("12.2-1").demo(n=10000, ratios=(0.1, 1.0, 10.0)))

# %% [markdown]
# ## Exercise pytorch-1
# On the CPU, benchmark the same matrix products. Can you still observe asynchrony through the
# backend? The check runs the answer both ways here: as PyTorch runs CPU ops (inside each call:
# `mode='sync'`) and through a backend queue (MXNet's engine).

# %%
answer = exercises.reference("pytorch-1")
print(inspect.getsource(answer))
result = exercises.check("pytorch-1", answer)
print(result)
assert result.passed

# %% [markdown]
# Leaving the page's code on the GPU does not answer the question:

# %%
print(exercises.check("pytorch-1", lesson.scenarios.get("torch_warmup").workload))
