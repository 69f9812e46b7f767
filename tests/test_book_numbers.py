"""Every number the book printed: the data (`asyncsim.model.printed`), the presets fitted to a
declared few of them (`asyncsim.model.book`, `Profile.fitted`) and the table that predicts the
rest (`asyncsim.lab.booktable`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from asyncsim.lab import booktable, scenarios
from asyncsim.model import book
from asyncsim.model.printed import BY_KEY, PRINTED, RSS
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
PRESETS = ("book", "book-zh", "book-torch")


def test_the_seeds_print_61_numbers_each_listed_once():
    """61 rows, one per printed number, each key once, each value the number in its line."""
    assert len(PRINTED) == 61 and len(BY_KEY) == 61
    for row in PRINTED:
        numbers = [float(x) for x in re.findall(r"-?\d+\.\d+", row.text)]
        assert row.value in numbers, row.text
        assert row.unit == ("MB" if row.label == RSS else "s")


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed chapters are not beside the repository")
def test_every_line_is_printed_verbatim_in_its_seed():
    """Each row's text is found, as written, in the seed file it names."""
    texts = {}
    for row in PRINTED:
        if row.file not in texts:
            texts[row.file] = (SEEDS / row.file).read_text()
        assert row.text in texts[row.file], (row.file, row.text)


@pytest.mark.parametrize("name", PRESETS)
def test_a_preset_reproduces_the_numbers_it_declares_fitted(name):
    """Simulating each scenario a preset was fitted to gives back the printed number (to 0.5%):
    the declared fits are the ones the derivations in asyncsim.model.book use."""
    profile = Profile.preset(name)
    assert profile.fitted == book.FITTED[name] and profile.fitted
    traces = {}
    for scenario, label in sorted(profile.fitted):
        sc = scenarios.get(scenario)
        if scenario not in traces:
            prof = profile if profile.gpus >= sc.num_gpus else profile.replace(gpus=sc.num_gpus)
            traces[scenario] = simulate(sc.record(), prof)
        printed = BY_KEY[scenario, label].value
        assert traces[scenario].regions[label] == pytest.approx(printed, rel=0.005), label


def test_fitted_rows_are_their_machines_and_fit_no_one_twice():
    """A preset is fitted only to numbers its own machine printed, each a covered time row, and
    no number serves two presets; a calibrated-style profile declares none."""
    seen = set()
    for name, pairs in book.FITTED.items():
        for key in pairs:
            row = BY_KEY[key]
            assert book.MACHINES[row.machine] == name, key
            assert row.label != RSS and not row.needs, key
            assert key not in seen
            seen.add(key)
    assert Profile.ideal().fitted == frozenset()
    assert Profile.preset("book").replace(t1=1e-4).fitted == book.FITTED["book"]


def test_scenarios_agree_with_the_printed_rows():
    """A scenario's `book` numbers are the printed rows of that scenario, and its book_profile is
    the preset of the machine that printed them."""
    for sc in scenarios.SCENARIOS.values():
        for label, seconds in sc.book.items():
            row = BY_KEY[sc.name, label]
            assert row.value == seconds, (sc.name, label)
            assert sc.book_profile == book.MACHINES[row.machine], sc.name
    for row in PRINTED:
        sc = scenarios.SCENARIOS.get(row.scenario)
        if sc is not None:
            assert sc.book_profile == book.MACHINES[row.machine], row.scenario


def test_preset_for_reads_seed_and_section():
    """Seed 003's 8.1 and 8.2 are the notebook's machine, its 8.3-8.5 the book's GPU machine."""
    assert book.preset_for("003_3c45022c8209ddba.txt 8.2.1") == "book-zh"
    assert book.preset_for("8.4.3 (003_3c45022c8209ddba.txt)") == "book"  # 8.4's helpers demo
    assert book.preset_for("12.2 exercise 4 (001_c4db6a957a3c16a4.txt)") == "book"
    assert book.preset_for("PyTorch (004_344996d425b31308.txt)") == "book-torch"


@pytest.fixture(scope="module")
def table():
    quick = {"warmup", "blockers", "queued_vs_finished", "blockers_8_2", "torch_warmup",
             "memory_barrier", "cpu_gpu_parallel"}
    return booktable.rows(only=quick)


def test_the_table_has_a_row_per_printed_number(table):
    """One row per printed number, in order; fitted rows are those the preset declares, plain
    NumPy lines are never predicted, and every computed row has a value and an error."""
    assert [r.printed for r in table] == list(PRINTED)
    for r in table:
        if r.printed.needs == "numpy":
            assert r.status.startswith("not predictable") and not r.covered
        elif r.covered:
            profile = Profile.preset(r.preset)
            fitted = r.printed.key in profile.fitted
            # a memory change under what the allocator may keep is its state, not a prediction
            below = r.printed.label == RSS and abs(r.printed.value) * booktable.MB < \
                profile.rss_keep
            assert r.status == ("fitted" if fitted else "explained" if below else "predicted")
            assert r.error is not None
        else:
            assert r.status.startswith("not")
    memory = [r for r in table if r.printed.label == RSS and r.covered]
    assert memory and all(r.peak is not None and r.peak >= r.predicted for r in memory)


def test_summary_counts_add_up(table):
    """Counts split by unit add up to the whole; predicted within 10% <= within 25%."""
    whole = booktable.summary(table)
    parts = [booktable.summary(table, unit) for unit in ("s", "MB")]
    for key in ("printed", "covered", "fitted", "explained", "predicted", "within_10"):
        assert whole[key] == sum(p[key] for p in parts)
    assert whole["within_10"] <= whole["within_25"] <= whole["predicted"]
    assert whole["fitted"] + whole["explained"] + whole["predicted"] == whole["covered"]
    assert whole["printed"] == 61
    text = booktable.format_table(table)
    assert text.count("\n") >= 61 and "increased memory" in text


def test_gpu_preset_issues_scalar_ops_at_its_own_t1():
    """No chapter times a scalar op's issue on the GPU machine: book-gpu prices it at its own
    fitted t1, as book-zh does, not at machine A's absolute x + 1 price (which was dearer than
    B's t1, the reverse of the fast path it stands for)."""
    profile = Profile.preset("book-gpu")
    scalar = [key for key in profile.costs if key.startswith("frontend:") and "_scalar" in key]
    assert scalar == []
    assert Profile.preset("book").costs["frontend:add_scalar"].latency < book.T1


def test_the_reports_book_section_says_why_the_memory_lines_differ(tmp_path, monkeypatch):
    """The report's section on the book's numbers draws the memory figure and quotes each
    12.2.4 loop's book note under it, so a reader sees why ps's numbers are not the peak. (Its
    table is the other tests' business: here a stand-in, which spares 6 s of predictions.)"""
    monkeypatch.setattr(booktable, "report", lambda: "the table")
    text = booktable.section(tmp_path)
    assert "```\nthe table\n```" in text
    assert (tmp_path / "book_memory.png").stat().st_size > 0
    figure_at = text.index("book_memory.png")
    for name in ("memory_barrier", "memory_no_barrier"):
        note = scenarios.get(name).book_note
        assert note and text.index(note) > figure_at


def test_a_memory_change_under_what_the_allocator_keeps_is_explained_not_predicted():
    """12.2.4's two "increased memory" lines: +23.7 MB is more than the freed buffers the
    allocator may keep (the preset's rss_keep), a prediction judged in percent; -8.2 MB is less,
    the allocator's state, shown with its error in MB and left out of the predicted counts."""
    table = booktable.rows(only={"memory_barrier", "memory_no_barrier"})
    memory = {r.printed.scenario: r for r in table if r.printed.label == RSS and r.covered}
    assert memory["memory_barrier"].status == "predicted"
    explained = memory["memory_no_barrier"]
    assert explained.status == "explained"
    barrier = memory["memory_barrier"].printed.value
    assert abs(explained.printed.value) < explained.keep < abs(barrier)
    counts = booktable.summary([memory["memory_barrier"], explained])
    assert (counts["predicted"], counts["explained"], counts["covered"]) == (1, 1, 2)
    assert "explained (" in booktable.format_table(table)
