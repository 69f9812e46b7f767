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
# # 8.1 Hybrid programming (Chinese edition)
#
# Imperative code issues every op from Python: each costs the frontend its issue time t1, however
# small the op. `net.hybridize()` traces a `HybridBlock` once into a graph, and every later call
# issues that graph as **one** op. The section's experiment runs a small MLP 1000 times on one
# example, before and after `hybridize()`:
#
# 1. **the listing**: the book's code, written against `nd`;
# 2. **the book**: the times the chapter printed, beside what the model predicts on the
#    notebook's machine (the `book-zh` profile) at the book's sizes;
# 3. **this machine**: a smaller MLP and fewer forwards, the prediction from this machine's
#    profile beside the engine's measurement on the CPU.
#
# `QUICK` calibrates this machine in a few seconds; set it to `False` for the full calibration
# (about 40 s once, then cached).

# %%
import inspect

from IPython.display import display

import asyncsim
import realexec
from asyncsim.lab import book_figures, plot, scenarios
from asyncsim.lab.exercises import lesson
from asyncsim.lab.scenarios.training import get_net

QUICK = True
HERE = realexec.calibrate(quick=QUICK, progress=False)
SCENARIO = scenarios.get("hybridize_mlp")
BOOK = asyncsim.Profile.preset(SCENARIO.book_profile)
print(f"the book's machine ({BOOK.name}): t1 = {BOOK.t1 * 1e6:.1f} us; "
      f"this machine: t1 = {HERE.t1 * 1e6:.1f} us, {HERE.workers} CPU workers")

# %% [markdown]
# ## 8.1.2 HybridSequential, before and after `hybridize()`
#
# `get_net` builds a `HybridSequential` of `Dense` layers; `benchmark` times 1000 forwards with
# a `waitall` at the end, then again after `net.hybridize()`.

# %%
print(inspect.getsource(get_net))
print(lesson.listing("hybridize_mlp"))

# %% [markdown]
# The book's times beside the prediction for its machine. The `book-zh` profile took its t1 from
# the imperative time (so that row agrees by construction); the hybridized time is a prediction.

# %%
print(lesson.against_book("hybridize_mlp", profile=BOOK.name))

# %% [markdown]
# Where the time goes: imperatively the frontend issues the layers' ops one by one while the
# backend's work (a 512-256-128-2 MLP on one example) takes microseconds; hybridized, it issues
# one graph op per forward.

# %%
display(lesson.picture(book_figures.FIGURES["hybridize"]()))

# %% [markdown]
# ## On this machine
#
# 200 forwards of the book's MLP, predicted from this machine's profile and measured:

# %%
text, pred, meas = lesson.here("hybridize_mlp", HERE, n=200)
print(text)
display(lesson.picture(plot.side_by_side(pred, meas, title="hybridize_mlp, n=200")))

# %% [markdown]
# ## 8.1.3 What hybridize does to Python code
#
# `hybrid_forward` prints `F`, its input and its hidden layer. Imperatively, every call runs the
# Python and prints. The first call after `hybridize()` traces the block: the Python runs once,
# printing symbols; later calls replay the graph and print nothing of it.

# %%
print(lesson.listing("hybrid_net"))
print(inspect.getsource(scenarios.training.HybridNet))

# %%
trace = realexec.run(scenarios.get("hybrid_net").workload)
for label, seconds in trace.regions.items():
    print(f"{label:<18s} {seconds * 1e3:8.3f} ms (measured here)")

# %% [markdown]
# ## Check: hybridizing is faster, predicted and measured
#
# The section's claim, three ways: the book measured it, the model predicts it for the book's
# machine and for this one, and this machine's engine shows it.

# %%
BEFORE, AFTER = SCENARIO.regions
book = SCENARIO.book[BEFORE] / SCENARIO.book[AFTER]
at_book = asyncsim.predict(SCENARIO.workload, BOOK, **SCENARIO.params).regions
on_book = at_book[BEFORE] / at_book[AFTER]
predicted = pred.regions[BEFORE] / pred.regions[AFTER]
measured = meas.regions[BEFORE] / meas.regions[AFTER]
assert on_book > 1 and predicted > 1, "the model should predict hybridized forwards faster"
assert measured > 1, "hybridized forwards should run faster on this machine too"
print(f"passed: hybridize() speeds the loop up {on_book:.1f}x predicted on the book's machine "
      f"(the book measured {book:.1f}x), {predicted:.1f}x predicted here and {measured:.1f}x "
      f"measured here")

# %% [markdown]
# ## Exercises
#
# `exercises.check(key, answer)` runs your answer and says why it passes or not;
# `exercises.reference(key)` is a worked answer. The first two are open questions: read the
# worked answer, then run its demonstration (it runs here, on the engine).

# %%
from asyncsim import exercises  # noqa: E402

for key, title in exercises.list().items():
    if key.startswith("8.1-"):
        print(f"{key}: {title}")

# %%
for key in ("8.1-1", "8.1-2"):
    worked = exercises.reference(key)
    print(f"--- {key}\n{worked.text}\n\n{worked.demo()}\n")

# %% [markdown]
# ### 8.1-3
# Rewrite a model of an earlier chapter as HybridBlocks: is it faster? Your answer is a workload
# `workload(nd, hybridize, num_batches)` timing a region 'predict'; the check runs it both ways
# on the 8.1 machine's profile. The reference is LeNet predicting one image at a time.

# %%
answer = exercises.reference("8.1-3")
print(inspect.getsource(answer))
result = exercises.check("8.1-3", answer)
print(result)
assert result.passed
