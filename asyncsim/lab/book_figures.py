"""The textbook's figures, drawn by the model from the chapters' own profiles: deterministic.

`FIGURES` maps a file name (no suffix) to a function that draws one figure; `make(out)` (the
`asyncsim book-figures [--out DIR]` command) writes each as PNG and SVG into `out`, by default the
tracked `figures/`, and a test holds those files to what `make` draws now. Nothing here measures
this machine: every trace is predicted on the "book" profile (machines A and B of the chapters,
`asyncsim.model.book`), or "book-zh" where the figure is the Chinese 8.1's or 8.2's, or
"book-gpu" for 8.4's and 8.5's (`asyncsim.lab.presets`), so the figures are the same wherever
they are drawn (with the same matplotlib).

- `dependencies`: the dependency graph of `z = x * y + 2` (12.2.1, Fig. 12.2.2), from its Program;
- `frontend_backend`: the same four lines on a timeline: the frontend issues, the backend
  computes, `print(z)` waits (Fig. 12.2.3);
- `sync_vs_async`: 12.2.3's loop (book: frontend-bound) and 8.2.3's (book-zh: backend-bound),
  with a blocker per op and with one waitall, simulated against the closed forms
  n (t1 + t2 + t3) and max(t1 + n t2, n t1 + t2) + t3, and the book's printed times at n = 1000;
- `memory`: live memory of 12.2.4's loop with a blocker per batch and without one;
- `cpu_gpu_parallel`: 8.3.1, ten products on the CPU and ten on the GPU, apart and together;
- `compute_copy_overlap`: 8.3.2, GPU products and their copies back, apart and overlapped;
- `hybridize` (8.1) and `data_parallel` (8.4, 8.5): drawn in `book_figures_training`, registered
  after the figures above.

A later chapter adds its figure as one entry: `@book_figure("name")` on a function returning a
Figure.
Units: time in milliseconds on the axes, memory in MiB.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from asyncsim.lab import book_figures_training, plot, scenarios
from asyncsim.model import analytic
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.program import Op
from asyncsim.nd.record import record

FIGURES: dict[str, Callable[[], Figure]] = {}
NS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # loop lengths of the closed-forms figure


def book_figure(name: str):
    """Register a function drawing one book figure, to be written as `name`.png/.svg; its
    docstring is the figure's line in the folder's README."""
    def register(draw: Callable[[], Figure]) -> Callable[[], Figure]:
        if name in FIGURES:
            raise ValueError(f"book figure {name!r} is registered twice")
        if not draw.__doc__:
            raise ValueError(f"book figure {name!r} needs a docstring: its line in the README")
        FIGURES[name] = draw
        return draw
    return register


def _book(scenario: str, profile: str = "book"):
    sc = scenarios.get(scenario)
    with contextlib.redirect_stdout(io.StringIO()):  # the workloads' print(z) blockers
        return simulate(sc.record(), Profile.preset(profile))


@book_figure("dependencies")
def dependencies() -> Figure:
    """The dependency graph of `z = x * y + 2` (12.2.1): ops by depth, edges by hazard."""
    with contextlib.redirect_stdout(io.StringIO()):
        program = scenarios.get("dependency").record()
    fig = plot.dependency_graph(program)
    fig.axes[0].set_title("z = x * y + 2: x and y are made independently; z needs both "
                          "(read after write)", fontsize=10)
    return fig


@book_figure("frontend_backend")
def frontend_backend() -> Figure:
    """`z = x * y + 2; print(z)` on a timeline: the frontend issues, the backend computes."""
    trace = _book("dependency")
    return plot.timeline(trace, title="z = x * y + 2, then print(z): the frontend (Python) "
                                      "issues, the backend computes (book profile)")


def _loop(nd, n=10, shape=(1, 2), sync=True):
    """The chapters' loop of n `y = x + 1` in one region, a blocker per op or one waitall."""
    x = nd.ones(shape)
    nd.waitall()
    with nd.benchmark('loop'):
        for _ in range(n):
            y = x + 1
            if sync:
                y.wait_to_read()
        if not sync:
            nd.waitall()
    del y


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} us" if seconds < 1e-3 else f"{seconds * 1e3:.3g} ms"


def _costs(profile: Profile, shape) -> tuple[float, float, float, float]:
    """(t1, t2, t3 of a wait_to_read, t3 of a waitall) of one `y = x + 1` on `profile`, as the
    closed forms take them (a profile may price the two blockers differently)."""
    program = record(_loop, n=1, shape=shape)
    op = [i for i in program.instrs if isinstance(i, Op)][-1]
    return (profile.issue(op), profile.cost(op), profile.blocker("wait_to_read"),
            profile.blocker("waitall"))


@book_figure("sync_vs_async")
def sync_vs_async() -> Figure:
    """The loops of 12.2.3 and 8.2.3, a blocker per op and one waitall, against the closed
    forms and the book's times."""
    fig = plot.new_figure(11, 4.2)
    axes = fig.subplots(1, 2)
    panels = (("book", (1, 2), "sync_vs_async_12_2", ("synchronous", "asynchronous"),
               "12.2.3: x of shape (1, 2)"),
              ("book-zh", (2000, 2000), "sync_vs_async", ("synchronous.", "asynchronous."),
               "8.2.3: x of shape (2000, 2000)"))
    ns = np.array(NS)
    for ax, (name, shape, scenario, labels, title) in zip(axes, panels, strict=True):
        profile = Profile.preset(name)
        t1, t2, t3, t3_all = _costs(profile, shape)
        ax.plot(ns, analytic.sync_time(ns, t1, t2, t3) * 1e3, "-", color="#4C72B0",
                label="n (t1 + t2 + t3)")
        ax.plot(ns, analytic.async_time(ns, t1, t2, t3_all) * 1e3, "-", color="#DD8452",
                label="max(t1 + n t2, n t1 + t2) + t3")
        ax.plot(ns, analytic.book_async_time(ns, t1, t2, t3_all) * 1e3, ":", color="#DD8452",
                label="t1 + n t2 + t3 (the book's)")
        for sync, color, marker in ((True, "#4C72B0", "o"), (False, "#DD8452", "s")):
            times = [simulate(record(_loop, n=int(n), shape=shape, sync=sync), profile)
                     .regions["loop"] * 1e3 for n in ns]
            ax.plot(ns, times, marker, color=color, mfc="none",
                    label=f"simulated, {'wait_to_read each' if sync else 'one waitall'}")
        book = scenarios.get(scenario).book
        ax.plot([1000, 1000], [book[labels[0]] * 1e3, book[labels[1]] * 1e3], "k*",
                markersize=9, label="the book's times, n = 1000")
        bound = "backend" if analytic.regime(2, t1, t2) == "backend-bound" else "frontend"
        ax.set(xscale="log", yscale="log", xlabel="n ops", ylabel="time (ms)")
        ax.set_title(f"{title}, profile {name}: {bound}-bound\nt1 {_time(t1)}, t2 "
                     f"{_time(t2)}, t3 {_time(t3)} (of a waitall: {_time(t3_all)})",
                     fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


@book_figure("memory")
def memory() -> Figure:
    """Live memory of 12.2.4's loop with a blocker per batch and without one."""
    traces = {"l.wait_to_read() per batch": _book("memory_barrier"),
              "no blocker in the loop": _book("memory_no_barrier")}
    fig = plot.memory(traces, device="cpu")
    fig.axes[0].set_title("12.2.4: 150 batches of a 512-2048-512-1 MLP, live memory "
                          "(book profile)", fontsize=10)
    return fig


@book_figure("cpu_gpu_parallel")
def cpu_gpu_parallel() -> Figure:
    """8.3.1: ten products on the CPU and ten on the GPU, apart and together."""
    return plot.timeline(_book("cpu_gpu_parallel"),
                         title="8.3.1: ten products on the CPU, then on the GPU, then both "
                               "(book profile)")


@book_figure("compute_copy_overlap")
def compute_copy_overlap() -> Figure:
    """8.3.2: GPU products and their copies to the CPU, apart and overlapped."""
    return plot.timeline(_book("compute_copy_overlap"),
                         title="8.3.2: ten GPU products, then their copies to the CPU, then "
                               "both overlapped (book profile)")


book_figure("hybridize")(book_figures_training.hybridize)
book_figure("data_parallel")(book_figures_training.data_parallel)


def readme() -> str:
    """The folder's README.md: what each figure shows and how the folder is made."""
    import matplotlib

    rows = "\n".join(f"| `{name}` | {' '.join(draw.__doc__.split())} |"
                     for name, draw in FIGURES.items())
    return (f"# figures\n\nThe textbook's figures, drawn by the model from the chapters' own "
            f"profiles (`book`, `book-zh`, `book-gpu`), so they are the same on every "
            f"machine. "
            f"`asyncsim book-figures` draws them again (PNG and SVG), and the tests check that "
            f"this folder matches what it draws. Measured figures are machine-specific: "
            f"`asyncsim figures --out DIR` writes them where you say.\n\nDrawn with "
            f"matplotlib {matplotlib.__version__}.\n\n| figure | what it shows |\n"
            f"| --- | --- |\n{rows}\n")


def make(out: str | Path = "figures", names: list[str] | None = None) -> list[Path]:
    """Draw the book figures (all, or `names`) into `out` as PNG and SVG, with a README.md;
    the figure files written."""
    unknown = sorted(set(names or []) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown book figure(s) {', '.join(unknown)}; the figures are: "
                         f"{', '.join(FIGURES)}")
    paths: list[Path] = []
    for name in names or list(FIGURES):
        paths += plot.save(FIGURES[name](), Path(out) / name)
    (Path(out) / "README.md").write_text(readme())
    return paths
