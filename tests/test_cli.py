"""The `asyncsim` command line: each subcommand on tiny sizes, and its errors.

`main(argv)` is the console script's entry point; tests call it in-process and read what it
prints. Predictions use presets, so no calibration runs here (test_calibrate covers that).
"""

import json

import pytest

from asyncsim.lab.cli import main


def test_list_names_every_scenario(capsys):
    """`asyncsim list` prints one line per registered scenario."""
    from asyncsim.lab.scenarios import SCENARIOS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in SCENARIOS:
        assert name in out


def test_predict_prints_summary_and_book_table(capsys, tmp_path):
    """`predict` prints the trace summary and, where the chapter printed numbers, a book table;
    `--chrome` writes a Chrome trace."""
    chrome = tmp_path / "t.json"
    assert main(["predict", "sync_vs_async", "--profile", "book", "--chrome", str(chrome)]) == 0
    out = capsys.readouterr().out
    assert "synchronous" in out and "against the book" in out
    assert json.loads(chrome.read_text())["traceEvents"]


def test_predict_says_how_the_books_run_differs(capsys):
    """A scenario's book note (how the book's run differs from the workload) is printed under
    its book table, and by itself where the scenario has no book numbers of its own."""
    assert main(["predict", "memory_no_barrier", "--profile", "book", "--quick"]) == 0
    out = capsys.readouterr().out
    table_at, note_at = out.index("against the book"), out.index("the book's run:")
    assert table_at < note_at and "delay_alloc" in out[note_at:]
    assert main(["predict", "memory_asscalar_8_2", "--profile", "book-zh", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "against the book" not in out and "train_asscalar_8_2" in out


def test_predict_set_changes_the_prediction(capsys):
    """`--set t1=...` overrides a profile value: a frontend-bound loop gets slower."""
    main(["predict", "sync_vs_async_12_2", "--profile", "ideal", "--quick"])
    fast = capsys.readouterr().out
    main(["predict", "sync_vs_async_12_2", "--profile", "ideal", "--quick", "--set", "t1=0.01"])
    slow = capsys.readouterr().out
    total = [float(s.split(":")[1].split("ms")[0]) for s in (fast, slow)]
    assert total[1] > total[0]


def test_run_and_compare_quick(capsys, tmp_path):
    """`run` measures a scenario; `compare --out` tables it against the prediction and writes the
    side-by-side figure (PNG and SVG) and both Chrome traces."""
    assert main(["run", "dependency", "--quick", "--workers", "2"]) == 0
    assert "measured" in capsys.readouterr().out
    assert main(["compare", "dependency", "--quick", "--profile", "book", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "measured" in out and "total" in out
    for suffix in (".png", ".svg"):
        assert (tmp_path / f"dependency{suffix}").stat().st_size > 1000
    assert (tmp_path / "traces" / "dependency.measured.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["predict", "no_such_scenario"], "known scenarios"),
    (["predict", "dependency", "--set", "bogus=1"], "bogus"),
    (["predict", "dependency", "--set", "t1=-1"], "t1"),
    (["predict", "dependency", "--param", "nope=1"], "nope"),
])
def test_bad_input_gives_one_clear_line(capsys, argv, message):
    """Unknown scenario, profile key, negative cost or workload parameter: exit code 2 and one
    line on stderr naming what was wrong."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unknown_profile_file_is_refused():
    """`--profile` that is neither a preset nor a file stops with a message naming it."""
    with pytest.raises(SystemExit, match="nowhere.json"):
        main(["predict", "dependency", "--profile", "nowhere.json"])


def test_measured_figures_do_not_go_to_the_tracked_folder():
    """`figures` writes this machine's measurements to out/ unless told otherwise; figures/
    (tracked) is `book-figures`' default."""
    from asyncsim.lab.cli import parser

    assert parser().parse_args(["figures"]).out == "out"
    assert parser().parse_args(["book-figures"]).out == "figures"


def test_book_figures_refuses_an_unwritable_out(capsys, tmp_path):
    """`book-figures --out` naming a file stops with one line naming the flag, before drawing."""
    target = tmp_path / "a-file"
    target.write_text("")
    assert main(["book-figures", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out" in err and len(err.splitlines()) == 1
