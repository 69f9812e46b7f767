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
# # 8.3 Automatic parallelism (Chinese edition)
#
# The section's two experiments need a GPU: here they are **predicted only**, on the `book`
# profile (the chapter's own machines), beside the times the chapter printed. Nothing in this
# notebook runs on a GPU. The exercises are about parallelism on one device, so they run on
# this machine's CPU too.

# %%
import inspect

from IPython.display import display

import asyncsim
import realexec
from asyncsim import exercises
from asyncsim.lab import book_figures, scenarios
from asyncsim.lab.exercises import lesson

QUICK = True  # False: the full calibration (about 40 s once, then cached)
HERE = realexec.calibrate(quick=QUICK, progress=False)
BOOK = asyncsim.Profile.preset("book")

# %% [markdown]
# ## 8.3.1 CPU and GPU in parallel (predicted only: GPU)
#
# Ten products on the CPU, then ten on the GPU, then both without a `waitall` between them: the
# two devices work at once, so the last region takes about as long as the GPU's alone.

# %%
print(lesson.listing("cpu_gpu_parallel"))
print(lesson.against_book("cpu_gpu_parallel"))
display(lesson.picture(book_figures.FIGURES["cpu_gpu_parallel"]()))

# %% [markdown]
# ## 8.3.2 Computation and communication in parallel (predicted only: GPU)
#
# Copying y[i] back to the CPU can overlap computing y[i+1] on the GPU: the copy engine is a lane
# of its own.

# %%
print(lesson.listing("compute_copy_overlap"))
print(lesson.against_book("compute_copy_overlap"))
display(lesson.picture(book_figures.FIGURES["compute_copy_overlap"]()))

# %% [markdown]
# With copies into pageable host memory (a plain `.to('cpu')` in PyTorch) the copy runs on the
# compute stream and cannot overlap (`pageable=1`):

# %%
program = scenarios.get("compute_copy_overlap").record()
for profile in (BOOK, BOOK.replace(pageable=1)):
    trace = asyncsim.simulate(program, profile)
    print(f"pageable={profile.pageable}:")
    for label, seconds in trace.regions.items():
        print(f"  {label:<28s} {seconds * 1e3:9.1f} ms")

# %% [markdown]
# ## Exercises

# %%
for key, title in exercises.list().items():
    if key.startswith("8.3"):
        print(f"{key}: {title}")

# %% [markdown]
# ### 8.3-1
# `run` does ten products with no dependencies between them. Design an experiment to see whether
# they run in parallel. The reference times them against the same ten products chained:

# %%
answer = exercises.reference("8.3-1")
print(inspect.getsource(answer))
result = exercises.check("8.3-1", answer)
print(result)
assert result.passed

# %% [markdown]
# On this machine at a class-sized side of 300, predicted from this machine's profile and
# measured:

# %%
print(lesson.here("independent_products", HERE, n=10, size=300)[0])

# %% [markdown]
# ### 8.3-2
# A computation with richer dependencies: does the engine get the right result, and faster?

# %%
answer = exercises.reference("8.3-2")
print(inspect.getsource(answer))
result = exercises.check("8.3-2", answer)
print(result)
assert result.passed

# %% [markdown]
# ### 8.3-3
# Small ops can gain from running side by side on one device. Products of 2000 per side are not
# small, and the check says so:

# %%
print(exercises.check("8.3-3", exercises.reference("8.3-1")))
answer = exercises.reference("8.3-3")
result = exercises.check("8.3-3", answer)
print(result)
assert result.passed
