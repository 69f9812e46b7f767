"""The tracked figures/ folder: the textbook's figures drawn by the model from the book profiles.

Drawing them again must give the same files: the SVG text byte for byte and the PNG pixels
within one level of 255 when this matplotlib is the one that drew them (figures/README.md names
it); with another matplotlib, only the pixels are compared, within a small tolerance, since fonts
and path output change between its releases. One level, not none: Agg's anti-aliasing rounds
differently on another CPU (the same matplotlib and the same SVG gave 97 of sync_vs_async.png's
1650 x 630 pixels one level apart on the AMD EPYC VM from the Intel Xeon VM's drawing).
"""

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.image import imread

from asyncsim.lab import book_figures
from asyncsim.lab.cli import main

TRACKED = Path(__file__).resolve().parent.parent / "figures"
RMS_TOLERANCE = 2.0  # of 255, for PNGs drawn by another matplotlib
LEVEL = 1 / 255  # a pixel channel's rounding on another CPU, for PNGs of this matplotlib


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """figures/ drawn again by the command, into a temporary folder."""
    out = tmp_path_factory.mktemp("book-figures")
    assert main(["book-figures", "--out", str(out)]) == 0
    return out


def same_matplotlib() -> bool:
    return f"matplotlib {matplotlib.__version__}." in (TRACKED / "README.md").read_text()


def test_every_figure_is_tracked_and_nothing_else(fresh):
    """figures/ holds exactly what the command writes: a PNG and an SVG per registered figure
    and the README (a stale or missing figure fails)."""
    made = sorted(p.name for p in fresh.iterdir())
    assert made == sorted(p.name for p in TRACKED.iterdir())
    assert made == sorted(["README.md"] + [f"{n}.{ext}" for n in book_figures.FIGURES
                                           for ext in ("png", "svg")])


@pytest.mark.parametrize("name", list(book_figures.FIGURES))
def test_tracked_figure_matches_a_fresh_drawing(fresh, name):
    """Each tracked figure is what the command draws now (regenerate with
    `asyncsim book-figures` when the model or the book profiles change)."""
    old, new = imread(TRACKED / f"{name}.png"), imread(fresh / f"{name}.png")
    assert old.shape == new.shape, f"{name}.png changed size: run `asyncsim book-figures`"
    if same_matplotlib():
        assert (TRACKED / f"{name}.svg").read_text() == (fresh / f"{name}.svg").read_text(), \
            f"{name}.svg differs from a fresh drawing: run `asyncsim book-figures`"
        worst = float(np.abs(old - new).max())
        assert worst <= LEVEL + 1e-6, \
            f"{name}.png differs by {worst * 255:.0f} levels: run `asyncsim book-figures`"
    else:
        rms = float(np.sqrt(np.mean((old - new) ** 2))) * 255
        assert rms <= RMS_TOLERANCE, f"{name}.png differs (rms {rms:.2f}): regenerate it"


def test_readme_lists_every_figure(fresh):
    """The README names each figure with its line and says how the folder is made; apart from
    the matplotlib version it is the tracked one."""
    text = (fresh / "README.md").read_text()
    assert "asyncsim book-figures" in text
    for name in book_figures.FIGURES:
        assert f"`{name}`" in text
    strip = [line for line in text.splitlines() if "matplotlib" not in line]
    tracked = [line for line in (TRACKED / "README.md").read_text().splitlines()
               if "matplotlib" not in line]
    assert strip == tracked


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    """Saving holds no date, version or random id: one figure drawn twice is the same file."""
    first = book_figures.make(tmp_path / "a", ["dependencies"])
    second = book_figures.make(tmp_path / "b", ["dependencies"])
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_unknown_figure_is_refused(tmp_path):
    """Asking for a figure that is not registered names it and lists the figures."""
    with pytest.raises(ValueError, match="nope.*dependencies"):
        book_figures.make(tmp_path, ["nope"])
