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
# # 12.2 Asynchronous computation (8.2 in the Chinese edition)
#
# Each experiment of the section three ways:
#
# 1. **the listing**: the book's code, written against `nd` (the same code runs on the model and
#    on the real engine);
# 2. **the book**: the times the chapter printed, beside what the model predicts for the book's
#    machine (the `book` profile, derived from those very tables) at the book's sizes;
# 3. **this machine**: at sizes small enough for a class, the prediction from this machine's
#    profile beside the engine's measurement.
#
# Then the section's four exercises, each with its check. `QUICK` calibrates this machine in a
# few seconds; set it to `False` for the full calibration (about 40 s once, then cached), which
# predicts more closely.

# %%
import inspect

from IPython.display import display

import asyncsim
import realexec
from asyncsim import exercises
from asyncsim.lab import book_figures, plot
from asyncsim.lab.exercises import lesson
from asyncsim.lab.scenarios.memory import memory_barrier, memory_no_barrier

QUICK = True
HERE = realexec.calibrate(quick=QUICK, progress=False)
BOOK = asyncsim.Profile.preset("book")
print(f"this machine: t1 = {HERE.t1 * 1e6:.1f} us, t3 = {HERE.t3 * 1e6:.1f} us, "
      f"{HERE.workers} CPU workers")

# %% [markdown]
# ## 12.2.1 Asynchrony via the backend
#
# Ten random matrices and their products. `mxnet.np` only queues them; `Done` waits with
# `waitall`. (The `numpy` block is plain NumPy on the frontend: a prediction sees no op in it.)

# %%
print(lesson.listing("warmup"))

# %%
print(lesson.against_book("warmup"))

# %%
text, pred, meas = lesson.here("warmup", HERE, n=4, size=200)
print(text)
display(lesson.picture(plot.side_by_side(pred, meas, title="warmup, n=4, size=200")))

# %% [markdown]
# The dependency graph of `z = x * y + 2`, and the same lines on a timeline: the frontend issues
# the four ops and waits only when `print(z)` needs the value.

# %%
display(lesson.picture(book_figures.FIGURES["dependencies"]()))
display(lesson.picture(book_figures.FIGURES["frontend_backend"]()))

# %% [markdown]
# ## 12.2.2 Barriers and blockers

# %%
print(lesson.listing("blockers"))
print(lesson.against_book("blockers"))
print(lesson.here("blockers", HERE, size=200)[0])

# %% [markdown]
# ## 12.2.3 Improving computation
#
# A thousand `y = x + 1`, waiting for each or once at the end: n (t1 + t2 + t3) against
# max(t1 + n t2, n t1 + t2) + t3. On the book's (1, 2) array the frontend is the bottleneck.

# %%
print(lesson.listing("sync_vs_async_12_2"))
print(lesson.against_book("sync_vs_async_12_2"))
print(lesson.here("sync_vs_async_12_2", HERE, n=200)[0])
display(lesson.picture(book_figures.FIGURES["sync_vs_async"]()))

# %% [markdown]
# ## 12.2.4 Memory
#
# The training loop with a blocker per batch keeps memory flat; without one, the frontend issues
# every batch at once and the intermediate results pile up (the book's profile, book sizes):

# %%
print(lesson.listing("memory_no_barrier"))
display(lesson.picture(book_figures.FIGURES["memory"]()))

# %% [markdown]
# The same on this machine, with 20 batches of 128:

# %%
sizes = dict(num_batches=20, batch_size=128)
for name in ("memory_barrier", "memory_no_barrier"):
    text, pred, meas = lesson.here(name, HERE, **sizes)
    print(text, "\n")

# %% [markdown]
# ## Exercises
#
# `exercises.check(key, answer)` runs your answer and says why it passes or not; the cells below
# check the reference answers. Replace `answer` with your own workload to try yours.

# %%
for key, title in exercises.list().items():
    if key.startswith("12.2"):
        print(f"{key}: {title}")

# %% [markdown]
# ### 12.2-1 (open)
# Why must 1000 t2 > 999 t1 for the total to be t1 + 1000 t2 + t3?

# %%
worked = exercises.reference("12.2-1")
print(worked.text)
print()
print(worked.demo())

# %% [markdown]
# ### 12.2-2
# Modify the training loop for an overlap of one minibatch: batch t finishes before batch t+2
# begins. The chapter's own loops fail, each for its own reason:

# %%
print(exercises.check("12.2-2", memory_barrier))
print(exercises.check("12.2-2", memory_no_barrier))

# %%
answer = exercises.reference("12.2-2")
print(inspect.getsource(answer))
result = exercises.check("12.2-2", answer)
print(result)
assert result.passed

# %% [markdown]
# ### 12.2-3
# CPU and GPU together: should you still synchronise after every minibatch? This machine needs
# no GPU for it: the check predicts on the book's profile (it only predicts; nothing runs on a
# GPU).

# %%
answer = exercises.reference("12.2-3")
print(answer.__doc__)
result = exercises.check("12.2-3", answer)
print(result)
assert result.passed

# %% [markdown]
# ### 12.2-4
# Measure the difference between `waitall` and `wait_to_read` (predicted for the book's machine,
# measured here).

# %%
answer = exercises.reference("12.2-4")
result = exercises.check("12.2-4", answer)
print(result)
assert result.passed
