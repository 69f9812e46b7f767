"""Figures of Traces: per-lane timelines, memory curves, prediction beside measurement.

Every function builds on an explicit `matplotlib.figure.Figure` with an Agg canvas and returns
that Figure; nothing touches pyplot's global state (pyplot is never imported), so figures can be
made from threads, tests and servers alike, and must be saved with `save` or `fig.savefig`.

- `timeline(trace, ax=None)`: one row per lane (frontend, CPU workers, GPU compute and copy), spans
  coloured by kind (issue, exec, copy, wait), benchmark regions shaded and labelled above the rows;
- `memory(traces, device='cpu', ax=None)`: live memory over time as step curves, one per trace;
- `side_by_side(pred, meas, title=None)`: both timelines on one shared time axis, plus a memory
  panel with both curves; the title names the machine that produced the measurement;
- `save(fig, path_without_suffix, formats=('png', 'svg'))`: PNG and SVG, without dates.

Spans are drawn as one `broken_barh` per (lane, kind), so lanes with many thousands of spans
stay fast. Units: time in milliseconds, memory in MiB (2**20 bytes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import ScaledTranslation

from asyncsim.nd.trace import KINDS, Trace

__all__ = ["KIND_COLORS", "dependency_graph", "memory", "new_figure", "save", "side_by_side",
           "timeline"]

KIND_COLORS = {"issue": "#4C72B0", "exec": "#DD8452", "copy": "#55A868", "wait": "#A9A9A9"}
REGION_COLORS = ("#8172B3", "#64B5CD", "#CCB974", "#DA8BC3", "#937860", "#8C8C8C")
DEVICE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3")
RSS = ":rss"  # the suffix of a process-RSS pseudo-device in a measured Trace's memory
RSS_LABEL_IN = 0.6  # inches a legend moves right to clear that axis's numbers and label
LINESTYLES = ("--", "-", ":", "-.")  # per trace when colours mark devices
BAR_HEIGHT = 0.7  # of a lane row
REGION_ROW = 0.5  # height of one row of region labels, in lane rows
# a region label's character, as a share of the time axis: 7-point text on the ~10 inch axes of
# the timelines (a narrower axis makes labels wider than this and they may still touch)
LABEL_CHAR = 1 / 170
MS = 1e3
MIB = 2.0**20
# spans of one lane and kind beyond which an SVG holds them as one embedded image: thousands of
# vector rectangles thinner than a pixel take seconds to write and to open, and show nothing more
RASTER_SPANS = 2000
# spans of a lane and kind closer than the run's duration over this are drawn as one bar: some
# twenty times finer than the pixels of the widest figure
MERGE_STEPS = 20000
SVG_SALT = "asyncsim"  # fixed ids in SVG files, so the same figure gives the same text


def new_figure(width: float = 10.0, height: float = 4.0) -> Figure:
    """A Figure with an Agg canvas and constrained layout, outside pyplot."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _region_levels(marks, duration: float = 0.0) -> list[int]:
    """A row per region so that regions overlapping in time get different rows, and so do
    regions whose labels would: a label runs on past a region shorter than itself (its width
    about `LABEL_CHAR` of the run's `duration` a character; 8.2.2's 0.05 ms "Workloads are
    finished." wrote over the "waitall" right after it).

    Greedy in order of start time (in that order it uses as few rows as any assignment can).
    Regions that start within a character's width of each other count as starting together,
    the longest first (lengths, too, to a character's width), then by label: a loop's "time
    per epoch", "batch 150", "batch 100" and "batch 50" start microseconds apart in a measured
    run and at one instant in a predicted one, and the two panels of a comparison stacked them
    in opposite orders. Any order keeps rows free of overlaps: a region joins a row only after
    the end of everything already in it."""
    quantum = LABEL_CHAR * duration

    def order(k: int):
        label, start, end = marks[k]
        if quantum <= 0:
            return start, start - end, label
        return math.floor(start / quantum), -math.floor((end - start) / quantum), label

    ends: list[float] = []  # end time of the last region placed in each row
    levels = [0] * len(marks)
    for i in sorted(range(len(marks)), key=order):
        label, start, end = marks[i]
        end = max(end, start + (len(label) + 1) * LABEL_CHAR * duration)
        row = next((r for r, last in enumerate(ends) if start >= last), len(ends))
        if row == len(ends):
            ends.append(end)
        else:
            ends[row] = end
        levels[i] = row
    return levels


def _describe(trace: Trace) -> str:
    meta = trace.meta
    return " ".join(str(meta[k]) for k in ("source", "workload") if meta.get(k)) or "trace"


def _machine(trace: Trace) -> str:
    meta = trace.meta
    for key in ("machine", "device", "host"):
        if meta.get(key):
            return str(meta[key])
    return "an unnamed machine"


def _lane_rows(trace: Trace) -> float:
    """Height of a timeline in lane rows: the lanes plus the rows of region labels."""
    region_rows = max(_region_levels(trace.marks, trace.duration), default=-1) + 1
    return max(len(trace.lanes), 1) + REGION_ROW * region_rows


def _merged(spans: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) bars of the (start, end) spans, with spans closer than `gap` drawn as one:
    a gap far under a pixel shows nothing, and 300 000 back-to-back ops take seconds to draw."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b - a) for a, b in out]


def _draw_timeline(ax, trace: Trace, title: str | None) -> None:
    lanes = trace.lanes
    row = {lane: i for i, lane in enumerate(lanes)}
    bars: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for s in trace.spans:
        bars.setdefault((s.lane, s.kind), []).append((s.start * MS, s.end * MS))
    gap = trace.duration * MS / MERGE_STEPS
    for (lane, kind), spans in bars.items():
        xranges = _merged(spans, gap)
        color = KIND_COLORS.get(kind, "#777777")
        # a thin edge in the face colour keeps sub-pixel spans visible
        ax.broken_barh(xranges, (row[lane] - BAR_HEIGHT / 2, BAR_HEIGHT), facecolors=color,
                       edgecolors=color, linewidth=0.2, rasterized=len(xranges) > RASTER_SPANS)

    levels = _region_levels(trace.marks, trace.duration)
    for i, ((label, start, end), level) in enumerate(zip(trace.marks, levels, strict=True)):
        color = REGION_COLORS[i % len(REGION_COLORS)]
        ax.axvspan(start * MS, end * MS, color=color, alpha=0.08, linewidth=0)
        y = -0.5 - REGION_ROW * (level + 0.5)
        ax.broken_barh([(start * MS, (end - start) * MS)], (y - 0.4 * REGION_ROW, 0.8 * REGION_ROW),
                       facecolors=color, alpha=0.45, linewidth=0)
        ax.text(start * MS, y, f" {label}", va="center", ha="left", fontsize=7, clip_on=True)

    top = -0.5 - REGION_ROW * (max(levels, default=-1) + 1)
    ax.set_ylim(max(len(lanes), 1) - 0.5, top)  # inverted: the frontend is the top row
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    if trace.duration > 0:
        ax.set_xlim(0, trace.duration * MS * 1.01)
    if not lanes:
        ax.text(0.5, 0.5, "no spans", transform=ax.transAxes, ha="center", va="center")
    kinds = {kind for _, kind in bars}
    handles = [Patch(color=KIND_COLORS[k], label=k) for k in KINDS if k in kinds]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False)
    ax.set_title(title if title is not None else _describe(trace), fontsize=10)


def timeline(trace: Trace, ax=None, title: str | None = None) -> Figure:
    """One row per lane, spans coloured by kind, regions shaded; into `ax` or a new Figure."""
    if ax is None:
        fig = new_figure(10.0, 1.2 + 0.4 * _lane_rows(trace))
        ax = fig.add_subplot()
    _draw_timeline(ax, trace, title)
    return ax.figure


def _as_labelled(traces) -> list[tuple[str, Trace]]:
    if isinstance(traces, Trace):
        return [(_describe(traces), traces)]
    if isinstance(traces, Mapping):
        return [(str(k), v) for k, v in traces.items()]
    if isinstance(traces, Sequence):
        return [(_describe(t), t) for t in traces]
    raise TypeError(f"expected a Trace, a sequence of Traces or a {{label: Trace}} mapping, "
                    f"got {type(traces).__name__}")


def _step(ax, trace: Trace, device: str, **style) -> None:
    t, live = trace.memory_curve(device)
    t, live = [0.0, *t.tolist()], [0.0, *live.tolist()]  # nothing is live before the run
    t.append(max(trace.duration, t[-1]))  # hold the last value to the end of the run
    live.append(live[-1])
    ax.step([x * MS for x in t], [b / MIB for b in live], where="post", **style)


def _draw_memory(ax, labelled, device) -> None:
    devices = sorted({d for _, tr in labelled for d in tr.devices}) if device is None else [device]
    by_device = len(devices) > 1 or len(labelled) == 1
    # a process's resident set (realexec's "cpu:rss") is not live bytes and dwarfs them (GBs of
    # interpreter and libraries against KBs of arrays): it gets an axis of its own, on the right
    rss_ax = ax.twinx() if any(d.endswith(RSS) for d in devices) else None
    for j, dev in enumerate(devices):
        for i, (label, tr) in enumerate(labelled):
            if dev not in tr.devices:
                continue
            # several devices: a colour per device and a line style per trace
            color = DEVICE_COLORS[(j if by_device else i) % len(DEVICE_COLORS)]
            several = by_device and len(labelled) > 1
            style = LINESTYLES[i % len(LINESTYLES)] if several else "-"
            name = label if device is not None else f"{label} {dev}"
            target = rss_ax if dev.endswith(RSS) else ax
            _step(target, tr, dev, color=color, linestyle=style, linewidth=1.2, label=name)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("live memory (MiB)")
    ax.grid(alpha=0.3)
    lines = ax.get_lines() + (rss_ax.get_lines() if rss_ax is not None else [])
    if rss_ax is not None:
        rss_ax.set_ylabel("process RSS (MiB)")
        rss_ax.set_ylim(bottom=0.0)
    if lines:
        anchor = ax.transAxes
        if rss_ax is not None:  # past the right axis's numbers and label, whatever the width
            anchor = anchor + ScaledTranslation(RSS_LABEL_IN, 0.0, ax.figure.dpi_scale_trans)
        ax.legend(handles=lines, loc="upper left", bbox_to_anchor=(1.06, 1.0),
                  bbox_transform=anchor, fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no memory samples", transform=ax.transAxes, ha="center",
                va="center")


def memory(traces, device: str | None = "cpu", ax=None) -> Figure:
    """Live memory of `device` (None: every device) over time, one step curve per trace.

    `traces` is a Trace, a sequence of Traces (labelled by their meta) or {label: Trace}.
    """
    labelled = _as_labelled(traces)
    if ax is None:
        ax = new_figure(10.0, 3.0).add_subplot()
    _draw_memory(ax, labelled, device)
    ax.set_title(f"memory ({device or 'all devices'})", fontsize=10)
    return ax.figure


def side_by_side(pred: Trace, meas: Trace, title: str | None = None) -> Figure:
    """Predicted and measured timelines on one time axis, and both memory curves beneath."""
    rows = [_lane_rows(pred), _lane_rows(meas), 3.0]
    fig = new_figure(11.0, 1.5 + 0.4 * sum(rows))
    grid = fig.add_gridspec(3, 1, height_ratios=rows)
    ax_pred = fig.add_subplot(grid[0])
    ax_meas = fig.add_subplot(grid[1], sharex=ax_pred)
    ax_mem = fig.add_subplot(grid[2], sharex=ax_pred)
    _draw_timeline(ax_pred, pred, f"predicted ({pred.meta.get('profile', 'profile ?')})")
    _draw_timeline(ax_meas, meas, f"measured on {_machine(meas)}")
    _draw_memory(ax_mem, [("predicted", pred), ("measured", meas)], None)
    for ax in (ax_pred, ax_meas):
        ax.set_xlabel("")  # the memory panel beneath labels the shared axis
    end = max(pred.duration, meas.duration)
    if end > 0:
        ax_pred.set_xlim(0, end * MS * 1.01)
    name = title or meas.meta.get("workload") or pred.meta.get("workload") or "run"
    fig.suptitle(f"{name}: measured on {_machine(meas)}", fontsize=11)
    return fig


_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def save(fig: Figure, path_without_suffix: str | Path, formats=("png", "svg")) -> list[Path]:
    """Write `<path>.png` and `<path>.svg` (or the `formats` asked for; folders made as needed);
    returns the paths. A path given with one of those suffixes ("fig.png") loses it first, so
    it does not become "fig.png.png".

    The files hold no date and no software version, and the SVG's ids are salted with a fixed
    string, so the same figure drawn by the same matplotlib gives the same bytes."""
    import matplotlib

    unknown = sorted(set(formats) - set(_METADATA))
    if unknown:
        raise ValueError(f"save: unknown format(s) {', '.join(unknown)}; use png and/or svg")
    base = Path(path_without_suffix)
    if base.suffix[1:].lower() in _METADATA:
        base = base.with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.with_name(f"{base.name}.{fmt}") for fmt in formats]
    with matplotlib.rc_context({"svg.hashsalt": SVG_SALT}):
        for fmt, path in zip(formats, paths, strict=True):
            fig.savefig(path, dpi=150 if fmt == "png" else "figure", metadata=_METADATA[fmt])
    return paths


def dependency_edges(program) -> list[tuple[int, int, str]]:
    """(earlier op, later op, hazard) for every ordering the per-var rules impose."""
    from asyncsim.nd.program import Op

    last_write: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    edges = []
    for op in (i for i in program.instrs if isinstance(i, Op)):
        for var in op.reads:
            if var in last_write and last_write[var] != op.id:
                edges.append((last_write[var], op.id, "RAW"))
        for var in op.writes:
            for r in readers.get(var, []):
                if r != op.id:
                    edges.append((r, op.id, "WAR"))
            if var in last_write and not readers.get(var) and var not in op.reads:
                edges.append((last_write[var], op.id, "WAW"))
            last_write[var] = op.id
            readers[var] = []
        for var in op.reads:
            if var not in op.writes:
                readers.setdefault(var, []).append(op.id)
    return edges


def dependency_graph(program, ax=None) -> Figure:
    """The program's ops as a graph (Fig. 12.2.2 of the chapter), laid out by dependency depth."""
    import networkx as nx

    from asyncsim.nd.program import Op

    fig, ax = (new_figure(6, 3.5), None) if ax is None else (ax.figure, ax)
    ax = ax or fig.add_subplot()
    graph = nx.DiGraph()
    for op in (i for i in program.instrs if isinstance(i, Op)):
        extra = f" {op.attrs['scalar']:g}" if "scalar" in op.attrs else ""
        graph.add_node(op.id, label=f"{op.name}{extra}\n-> v{op.out}")
    for a, b, hazard in dependency_edges(program):
        graph.add_edge(a, b, hazard=hazard)
    for depth, layer in enumerate(nx.topological_generations(graph)):
        for node in layer:
            graph.nodes[node]["depth"] = depth
    pos = nx.multipartite_layout(graph, subset_key="depth")
    nx.draw_networkx(graph, pos, ax=ax, labels=nx.get_node_attributes(graph, "label"),
                     node_color="#DD8452", node_size=2200, font_size=8, arrowsize=15)
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, font_size=7,
                                 edge_labels=nx.get_edge_attributes(graph, "hazard"))
    ax.set_title(f"dependencies of {program.name}: ops left to right by depth")
    ax.margins(0.18)  # room for the outer nodes and their labels
    ax.set_axis_off()
    return fig
