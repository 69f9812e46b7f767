"""The textbook's figures of its training sections (8.1, 8.4, 8.5), drawn by the model from the
book profiles: deterministic, like the rest of `asyncsim.lab.book_figures`, which registers them.

- `hybridize`: 8.1.2's 1000 forwards of the 512-256-128-2 MLP before and after
  `net.hybridize()`, on the "book-zh" profile (the notebook's machine): where the time goes
  (the frontend issuing an op per layer step, against one graph op per forward), beside the
  book's printed times, and the timelines of three forwards each way;
- `data_parallel`: 8.4's LeNet and 8.5's ResNet-18 per epoch on one GPU and on two, on the
  "book-gpu" profile (`asyncsim.lab.presets`), beside the book's epochs, and the timelines of one
  training step of each.

Nothing is fitted here: every predicted bar is a simulated trace. The presets were fitted to a
few printed numbers (`Profile.fitted`: book-zh's t1 to the imperative 8.1.2 time, book-gpu's t1
and convolution peak to the one-GPU epoch 1 of each network); those bars are hatched and say so.
Simulating a whole epoch of 60000 images takes the model some 20 s for the four scenarios, so
`epoch_time` simulates 2 and 4 batches and extrapolates linearly
(`asyncsim.lab.scenarios.data_parallel.epochs_extrapolated`: within 1% of the whole epoch
simulated, 0.1-0.6% for the four).
Units: seconds in traces and returned values, milliseconds and seconds on the axes as labelled.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from asyncsim.lab import plot, scenarios
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.trace import Trace

TRAIN = 60000  # Fashion-MNIST's training images: the book's epoch
FORWARDS = 3  # forwards in each hybridize timeline: enough to see the pattern repeat
NETWORKS = (("LeNet (8.4)", "lenet_1gpu", "lenet_2gpu"),
            ("ResNet-18 (8.5)", "resnet18_1gpu", "resnet18_2gpu"))
PRED, BOOK, FRONT, BACK = "#DD8452", "#8C8C8C", "#4C72B0", "#55A868"


def _quiet(run):
    # the workloads' prints and the data loader's line; the book-gpu preset records workloads
    with contextlib.redirect_stdout(io.StringIO()):
        return run()


def _profile(name: str) -> Profile:
    sc = scenarios.get(name)
    profile = _quiet(lambda: Profile.preset(sc.book_profile))
    return profile.replace(gpus=sc.num_gpus) if profile.gpus < sc.num_gpus else profile


def _trace(name: str, **overrides) -> Trace:
    sc = scenarios.get(name)
    return _quiet(lambda: simulate(sc.record(**overrides), _profile(name)))


def _region(trace: Trace, label: str) -> tuple[float, float]:
    return next((a, b) for name, a, b in trace.marks if name == label)


def window(trace: Trace, label: str, rename: str | None = None) -> Trace:
    """The part of `trace` inside region `label` (renamed `rename`), its clock starting at the
    region's start and spans cut at its edges: one region drawn alone."""
    a, b = _region(trace, label)
    spans = [replace(s, start=max(s.start, a) - a, end=min(s.end, b) - a)
             for s in trace.spans if s.end > a and s.start < b]
    return Trace(spans=spans, marks=[(rename or label, 0.0, b - a)], meta=dict(trace.meta))


def epoch_time(name: str) -> float:
    """Predicted seconds of one epoch of 60000 images of data-parallel scenario `name` on its
    book profile, extrapolated from a few simulated batches (`Scenario.predict_regions`)."""
    return _quiet(lambda: scenarios.get(name).predict_regions(_profile(name), epochs=1,
                                                              num_train=TRAIN))["epoch 1"]


def step_trace(name: str) -> Trace:
    """One training step of `name` on its book profile: the second of two one-batch epochs, so
    the parameters' start-up and the first evaluation are over; clock from the step's start."""
    batch = scenarios.get(name).params["batch_size"]
    return window(_trace(name, epochs=2, num_train=batch, num_test=batch), "epoch 2",
                  "one step: epoch 2 of two one-batch epochs")


def _label_bars(ax, bars, fmt: str) -> None:
    for bar in bars:
        ax.annotate(fmt.format(bar.get_height()), (bar.get_x() + bar.get_width() / 2,
                                                   bar.get_height()),
                    ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                    textcoords="offset points")


def _busy(trace: Trace, label: str, kind: str) -> float:
    a, b = _region(trace, label)
    return sum(min(s.end, b) - max(s.start, a) for s in trace.spans_of(kind=kind)
               if s.end > a and s.start < b)


def _legend(ax, hatched: bool) -> None:
    """The axes' legend, with a hatched entry for bars the preset was fitted to: a hatched
    patch would otherwise stand for its whole series."""
    handles, labels = ax.get_legend_handles_labels()
    handles = [Patch(color=h.patches[0].get_facecolor()) if hasattr(h, "patches") else h
               for h in handles]
    if hatched:
        handles.append(Patch(facecolor=PRED, hatch="//"))
        labels.append("predicted; the preset was fitted to it")
    ax.legend(handles, labels, fontsize=7, loc="upper right")


def hybridize() -> Figure:
    """8.1.2: 1000 forwards of the MLP imperative and hybridized (book-zh profile): the frontend
    issues an op per layer step, or one graph op per forward; beside the book's times."""
    sc = scenarios.get("hybridize_mlp")
    profile = _profile(sc.name)
    n = sc.params["n"]
    full, few = _trace(sc.name), _trace(sc.name, n=FORWARDS)
    fig = plot.new_figure(12.5, 6.0)
    grid = fig.add_gridspec(2, 2, width_ratios=(1.0, 1.5))
    ax = fig.add_subplot(grid[:, 0])
    width = 0.2
    x = np.arange(len(sc.regions))
    series = (("frontend issuing", FRONT, lambda r: _busy(full, r, "issue")),
              ("backend computing", BACK, lambda r: _busy(full, r, "exec")),
              ("region, predicted", PRED, lambda r: full.regions[r]),
              ("the book's time", BOOK, lambda r: sc.book[r]))
    hatched = False
    for i, (label, color, value) in enumerate(series):
        heights = [value(r) * 1e3 for r in sc.regions]
        bars = ax.bar(x + (i - 1.5) * width, heights, width, color=color, label=label)
        if label == "region, predicted":
            for bar, region in zip(bars, sc.regions, strict=True):
                if (sc.name, region) in profile.fitted:
                    bar.set_hatch("//")
                    hatched = True
        _label_bars(ax, bars, "{:.0f}")
    ticks = []
    for region in sc.regions:
        issues = [s for s in window(full, region).spans if s.kind == "issue"]
        # the profile may issue some ops for free (book-zh: the bias add inside Dense's op)
        priced = [s.duration for s in issues if s.duration > 0]
        ops, paid = round(len(issues) / n), round(len(priced) / n)
        ticks.append(f"{region}\n{ops} op{'s' if ops > 1 else ''} issued per forward,\n"
                     f"{paid} at {np.mean(priced) * 1e6:.0f} us"
                     + (", the others free" if paid < ops else ""))
    ax.set_xticks(x, ticks, fontsize=8)
    ax.set_ylabel(f"time of {n} forwards (ms)")
    ax.set_title(f"8.1.2: {n} forwards of a 512-256-128-2 MLP on one example\n"
                 f"profile {profile.name}", fontsize=10)
    _legend(ax, hatched)
    ax.grid(axis="y", alpha=0.3)
    end = max(few.regions.values()) * 1e3 * 1.01
    for row, region in enumerate(sc.regions):
        axis = fig.add_subplot(grid[row, 1])
        part = window(few, region)
        plot.timeline(part, ax=axis, title=f"{region}: {FORWARDS} forwards, then the "
                                            f"waitall (white ticks part the priced issues)")
        # back-to-back issues draw as one bar; the ticks show how many ops it is
        starts = [s.start * 1e3 for s in part.spans
                  if s.kind == "issue" and s.start > 0 and s.duration > 0]
        row = part.lanes.index("frontend")
        axis.vlines(starts, row - 0.35, row + 0.35, color="white", linewidth=0.8)
        axis.set_xlim(0, end)
        if row:
            axis.get_legend().remove()
    fig.suptitle("hybridize(): the frontend's cost per op is what it saves "
                 "(predicted on the book's profile)", fontsize=11)
    return fig


def book_epochs(name: str) -> tuple[float, float, float]:
    """(mean of epochs 2-4, lowest, highest of all four) of the book's printed epochs: its
    first epoch carries a warm-up the later three do not."""
    book = scenarios.get(name).book
    times = [book[f"epoch {k}"] for k in range(1, 5)]
    return float(np.mean(times[1:])), min(times), max(times)


def data_parallel() -> Figure:
    """8.4/8.5: LeNet and ResNet-18 per epoch on 1 and 2 GPUs (book-gpu profile; 2 and 4
    batches simulated, the epoch extrapolated) beside the book's, and one step's timelines."""
    fig = plot.new_figure(14.0, 12.0)
    grid = fig.add_gridspec(3, 2, height_ratios=(3.2, 4.0, 5.0))
    for col, (title, *names) in enumerate(NETWORKS):
        ax = fig.add_subplot(grid[0, col])
        profile = _profile(names[0])
        predicted = [epoch_time(name) for name in names]
        book = [book_epochs(name) for name in names]
        x = np.arange(len(names))
        bars = ax.bar(x - 0.18, predicted, 0.36, color=PRED, label="predicted")
        hatched = False
        for bar, name in zip(bars, names, strict=True):
            if (name, "epoch 1") in profile.fitted:
                bar.set_hatch("//")
                hatched = True
        _label_bars(ax, bars, "{:.2f} s")
        mean = [b[0] for b in book]
        # clipped at 0: a mean of equal floats can land a rounding error past them
        spread = np.clip([[m - lo for m, lo, _ in book], [hi - m for m, _, hi in book]],
                         0.0, None)
        ax.bar(x + 0.18, mean, 0.36, color=BOOK, yerr=spread, capsize=3,
               label="the book's (epochs 2-4; whisker: all four)")
        for xi, (m, _, hi) in zip(x, book, strict=True):
            ax.annotate(f"{m:.1f} s", (xi + 0.18, hi), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
        batch = [scenarios.get(name).params["batch_size"] for name in names]
        ax.set_xticks(x, [f"{k} GPU{'s' if k > 1 else ''}, batch {b}"
                          for k, b in zip((1, 2), batch, strict=True)])
        ax.set_ylabel("seconds per epoch")
        ax.set_ylim(0, max(max(predicted), max(b[2] for b in book)) * 1.5)
        _legend(ax, hatched)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{title}: an epoch of {TRAIN} images, profile {profile.name}",
                     fontsize=10)
        steps = [step_trace(name) for name in names]
        end = max(s.duration for s in steps) * 1e3 * 1.01
        for row, (name, step) in enumerate(zip(names, steps, strict=True), start=1):
            axis = fig.add_subplot(grid[row, col])
            gpus = scenarios.get(name).num_gpus
            loader = sum(s.duration for s in step.spans_of("frontend", "issue")
                         if s.name == "array")
            plot.timeline(step, ax=axis, title=f"{title}, one step on {gpus} GPU"
                          f"{'s' if gpus > 1 else ''}: {step.duration * 1e3:.1f} ms, the "
                          f"first {loader * 1e3:.1f} ms taking the batch from the loader")
            axis.set_xlim(0, end)
            if (row, col) != (1, 1):
                axis.get_legend().remove()
    fig.suptitle("Data parallelism: LeNet's tiny kernels leave the frontend the bottleneck, so "
                 "two GPUs issue twice the ops; ResNet-18 is compute-bound and nearly halves",
                 fontsize=11)
    return fig


__all__ = ["book_epochs", "data_parallel", "epoch_time", "hybridize", "step_trace",
           "window"]
