"""Figures from hand-made Traces: rows per lane, spans in ms, memory in MiB, files, no pyplot.

The Traces here are written by hand (a few spans, memory samples and regions), so the figures
are checked without a simulator or an engine.
"""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.collections import PolyCollection

from asyncsim.lab import plot
from asyncsim.nd.trace import Span, Trace

MIB = 2**20


def make_trace(source="measured", scale=1.0):
    """Frontend issue/wait spans, a CPU worker, a GPU stream and copy engine, two regions."""
    ms = 1e-3 * scale
    spans = [
        Span("frontend", "dot", 0, 0.0, 0.1 * ms, "issue"),
        Span("frontend", "dot", 1, 0.1 * ms, 0.2 * ms, "issue"),
        Span("cpu/w0", "dot", 0, 1 * ms, 3 * ms, "exec"),
        Span("gpu0/compute", "dot", 1, 0.2 * ms, 2 * ms, "exec"),
        Span("gpu0/copy", "copyto", 2, 2 * ms, 2.5 * ms, "copy"),
        Span("frontend", "waitall", -1, 0.2 * ms, 3.1 * ms, "wait"),
    ]
    memory = [(0.0, "cpu", 4 * MIB), (0.1 * ms, "cpu", 12 * MIB), (3.1 * ms, "cpu", 4 * MIB),
              (0.1 * ms, "gpu0", 8 * MIB), (3.1 * ms, "gpu0", 0)]
    marks = [("queued", 0.0, 0.2 * ms), ("all", 0.0, 3.1 * ms)]
    meta = {"source": source, "workload": "hand", "profile": "ideal", "machine": "test box"}
    return Trace(spans=spans, memory=memory, marks=marks, meta=meta)


def span_collections(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_timeline_has_one_row_per_lane():
    """The y axis lists every lane once, frontend first, and nothing else."""
    trace = make_trace()
    ax = plot.timeline(trace).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == trace.lanes == ["frontend", "cpu/w0", "gpu0/compute", "gpu0/copy"]


def test_timeline_batches_spans_per_lane_and_kind():
    """Thousands of spans on one lane and kind become one collection, not one artist each."""
    spans = [Span("cpu/w0", "add", i, i * 1e-5, i * 1e-5 + 5e-6, "exec") for i in range(5000)]
    spans += [Span("frontend", "add", i, i * 1e-5, i * 1e-5 + 1e-6, "issue") for i in range(5000)]
    ax = plot.timeline(Trace(spans=spans)).axes[0]
    collections = span_collections(ax)
    assert len(collections) == 2
    assert sorted(len(c.get_paths()) for c in collections) == [5000, 5000]


def test_timeline_draws_spans_in_milliseconds():
    """A span from 1 ms to 3 ms covers x = 1..3 on the axis; the axis reaches the run's end."""
    trace = make_trace()
    ax = plot.timeline(trace).axes[0]
    # one collection per (lane, kind) plus one bar per region
    assert len(span_collections(ax)) == 5 + len(trace.marks)
    xs = sorted((p.vertices[:, 0].min(), p.vertices[:, 0].max())
                for c in span_collections(ax) for p in c.get_paths())
    assert any(a == pytest.approx(1.0) and b == pytest.approx(3.0) for a, b in xs)
    assert ax.get_xlim()[1] >= 3.1
    assert ax.get_xlabel() == "time (ms)"


def test_timeline_labels_regions():
    """Each benchmark region's label is written on the axes."""
    ax = plot.timeline(make_trace()).axes[0]
    texts = {t.get_text().strip() for t in ax.texts}
    assert {"queued", "all"} <= texts


def test_timeline_draws_into_a_given_axes():
    """With ax given, the timeline goes into that axes and its figure is returned."""
    fig = plot.new_figure()
    first, second = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    assert plot.timeline(make_trace(), ax=second) is fig
    assert len(second.get_yticklabels()) == 4
    assert not first.collections


def test_empty_trace_still_draws():
    """A trace without spans, samples or regions gives a figure saying so, not an error."""
    fig = plot.timeline(Trace())
    assert any("no spans" in t.get_text() for t in fig.axes[0].texts)
    assert plot.memory(Trace()).axes


def test_memory_is_a_step_curve_in_mib():
    """The cpu curve starts at 0 ms, peaks at the largest sample in MiB and lasts the run."""
    trace = make_trace()
    ax = plot.memory(trace, device="cpu").axes[0]
    (line,) = ax.get_lines()
    x, y = line.get_xdata(), line.get_ydata()
    assert x[0] == 0.0 and x[-1] == pytest.approx(trace.duration * 1e3)
    assert max(y) == pytest.approx(trace.peak_bytes("cpu") / MIB) == pytest.approx(12.0)
    assert line.get_drawstyle() == "steps-post"


def test_memory_labels_several_traces():
    """Several traces give one labelled curve each; device=None draws every device."""
    traces = {"predicted": make_trace("predicted", 0.5), "measured": make_trace()}
    ax = plot.memory(traces, device="cpu").axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["predicted", "measured"]
    ax_all = plot.memory(traces, device=None).axes[0]
    assert len(ax_all.get_lines()) == 4
    styles = {(line.get_color(), line.get_linestyle()) for line in ax_all.get_lines()}
    assert len(styles) == 4  # every curve can be told apart


def test_process_rss_gets_its_own_axis_and_live_bytes_keep_their_scale():
    """A measured trace's process RSS ("cpu:rss", GBs) is drawn on a second y axis, so the live
    bytes (MiB) keep a scale on which they can be read; the legend names every curve."""
    meas = make_trace()
    meas.memory += [(0.0, "cpu:rss", 1800 * MIB), (3.1 * 1e-3, "cpu:rss", 1805 * MIB)]
    ax = plot.memory(meas, device=None).axes[0]
    twins = [a for a in ax.figure.axes if a is not ax]
    assert len(twins) == 1
    (rss,) = twins[0].get_lines()
    assert rss.get_label().endswith(" cpu:rss")
    assert sorted(line.get_label().split()[-1] for line in ax.get_lines()) == ["cpu", "gpu0"]
    assert ax.get_ylim()[1] < 100  # MiB of live bytes, not the RSS's 1800
    assert twins[0].get_ylim()[1] >= 1805
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert rss.get_label() in legend and len(legend) == 3


def test_side_by_side_shares_time_and_names_the_machine():
    """Two timelines and a memory panel on one time axis; the title names the measuring machine."""
    pred, meas = make_trace("predicted", 0.5), make_trace("measured", 1.0)
    fig = plot.side_by_side(pred, meas, "hand")
    ax_pred, ax_meas, ax_mem = fig.axes[:3]
    shared = ax_pred.get_shared_x_axes()
    assert shared.joined(ax_pred, ax_meas) and shared.joined(ax_pred, ax_mem)
    assert ax_pred.get_xlim() == ax_meas.get_xlim()
    assert ax_pred.get_xlim()[1] >= meas.duration * 1e3
    assert "test box" in fig.get_suptitle() and "hand" in fig.get_suptitle()
    labels = {line.get_label() for line in ax_mem.get_lines()}
    assert labels == {"predicted cpu", "measured cpu", "predicted gpu0", "measured gpu0"}
    assert len(ax_pred.get_yticklabels()) == len(pred.lanes)


def test_save_writes_png_and_svg(tmp_path):
    """save writes <path>.png and <path>.svg, creating folders, and returns both paths."""
    paths = plot.save(plot.side_by_side(make_trace(), make_trace()), tmp_path / "sub" / "fig")
    assert [p.name for p in paths] == ["fig.png", "fig.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in paths[1].read_text()


def test_save_drops_a_suffix_it_writes_itself(tmp_path):
    """`save(fig, "fig.png")` writes fig.png and fig.svg, not fig.png.png; another suffix stays."""
    paths = plot.save(plot.side_by_side(make_trace(), make_trace()), tmp_path / "fig.png")
    assert [p.name for p in paths] == ["fig.png", "fig.svg"]
    assert all(p.exists() for p in paths)
    kept = plot.save(plot.side_by_side(make_trace(), make_trace()), tmp_path / "run.1",
                     formats=("png",))
    assert [p.name for p in kept] == ["run.1.png"]


def test_plot_leaves_pyplot_alone(tmp_path):
    """Building and saving figures never imports matplotlib.pyplot (no global state)."""
    code = (
        "import sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from test_plot import make_trace\n"
        "from asyncsim.lab import plot\n"
        "t = make_trace()\n"
        f"plot.save(plot.side_by_side(t, t), {str(tmp_path / 'f')!r})\n"
        "plot.save(plot.memory([t, t], device=None), "
        f"{str(tmp_path / 'g')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=plot.__file__.rsplit("/asyncsim/", 1)[0])
    assert result.returncode == 0, result.stderr


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), max_size=30),
       st.sampled_from([0.0, 100.0, 1000.0]))
def test_overlapping_regions_and_labels_get_different_label_rows(intervals, duration):
    """For any regions, two that overlap in time, or whose labels would, never share a row of
    labels (a label takes `LABEL_CHAR` of the run's duration a character, and one more)."""
    marks = [(f"r{i}", a, a + w) for i, (a, w) in enumerate(intervals)]
    levels = plot._region_levels(marks, duration)

    def drawn(label, a, b):
        return a, max(b, a + (len(label) + 1) * plot.LABEL_CHAR * duration)

    for i, mark in enumerate(marks):
        a1, b1 = drawn(*mark)
        for j, other in enumerate(marks[:i]):
            a2, b2 = drawn(*other)
            if a1 < b2 and a2 < b1:
                assert levels[i] != levels[j]


def test_a_short_regions_label_does_not_share_a_row_with_the_next_region():
    marks = [("Workloads are finished.", 0.0, 0.05), ("waitall", 0.05, 100.0)]
    assert plot._region_levels(marks) == [0, 0]  # without a duration: their times only
    first, second = plot._region_levels(marks, 400.0)
    assert first != second


def test_spans_closer_than_a_pixel_are_drawn_as_one_bar():
    """Back-to-back spans of one lane and kind become one bar covering them all; spans with a
    visible gap between them stay apart."""
    spans = [Span("gpu0/compute", "conv", i, i * 1e-6, (i + 1) * 1e-6, "exec") for i in range(1000)]
    spans.append(Span("gpu0/compute", "conv", 1000, 2e-3, 3e-3, "exec"))
    ax = plot.timeline(Trace(spans=spans)).axes[0]
    (bars,) = span_collections(ax)
    extents = sorted((p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in bars.get_paths())
    assert len(extents) == 2
    assert extents[0] == pytest.approx((0.0, 1.0)) and extents[1] == pytest.approx((2.0, 3.0))


def test_regions_starting_together_stack_alike_in_predicted_and_measured_panels():
    """A loop's regions start at one instant in a prediction and microseconds apart, in either
    order, in a measurement: each region gets the same row in both panels."""
    predicted = [("batch 50", 0.5, 11.2), ("batch 100", 0.5, 21.9), ("batch 150", 0.5, 32.6),
                 ("time per epoch", 0.5, 32.6)]
    measured = [("batch 50", 4.633, 14.824), ("batch 100", 4.631, 24.7),
                ("batch 150", 4.628, 34.631), ("time per epoch", 4.62, 34.655)]
    rows = [dict(zip([m[0] for m in marks], plot._region_levels(marks, duration), strict=True))
            for marks, duration in ((predicted, 33.0), (measured, 35.0))]
    assert rows[0] == rows[1]
    assert sorted(rows[0].values()) == [0, 1, 2, 3]  # they overlap: a row each


def test_the_memory_legend_clears_the_rss_axis():
    """With a process-RSS axis on the right, the memory panel's legend starts past that axis's
    numbers and label, however wide they are (it used to cover the label)."""
    for rss in (1800 * MIB, 180_500 * MIB):
        meas = make_trace()
        meas.memory += [(0.0, "cpu:rss", rss), (3.1 * 1e-3, "cpu:rss", rss)]
        fig = plot.side_by_side(make_trace("predicted", 0.5), meas)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (ax,) = [a for a in fig.axes if a.get_ylabel() == "live memory (MiB)"]
        (twin,) = [a for a in fig.axes if a.get_ylabel() == "process RSS (MiB)"]
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= twin.get_tightbbox(renderer).x1
        assert legend.x1 <= fig.bbox.x1  # and stays on the figure
