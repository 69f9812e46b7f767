"""User mistakes on the `asyncsim` command line are one line on stderr and exit status 2, never
a traceback: outputs that cannot be written are refused before any work starts, a `--param` of
the wrong kind names the parameter, a shape too large for this machine names the op, and
Ctrl-C is one line with status 130; a pipe closed by its reader ends the command quietly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from asyncsim.lab import cli
from asyncsim.lab.cli import main


def must_not_run(*args, **kwargs):
    raise AssertionError("the work started before the output was checked")


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("in the way")
    return path


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_calibrate_out_is_checked_before_calibrating(monkeypatch, capsys, a_file):
    """`calibrate --out` under a file: refused at once, the calibration never starts."""
    import realexec.calibration.calibrate as calibrate_module

    monkeypatch.setattr(calibrate_module, "calibrate", must_not_run)
    assert main(["calibrate", "--quick", "--out", str(a_file / "host.json")]) == 2
    assert "--out" in one_line(capsys)


@pytest.mark.parametrize("command", ["predict", "run"])
def test_chrome_is_checked_before_the_work(monkeypatch, capsys, tmp_path, command):
    """`--chrome` into a directory that does not exist: refused before predicting or running."""
    monkeypatch.setattr(cli, "predict_one", must_not_run)
    monkeypatch.setattr(cli, "run_one", must_not_run)
    target = tmp_path / "missing" / "trace.json"
    assert main([command, "dependency", "--quick", "--chrome", str(target)]) == 2
    line = one_line(capsys)
    assert "--chrome" in line and "does not exist" in line


def test_chrome_onto_a_directory_is_refused(capsys, tmp_path):
    """`--chrome` naming a directory is refused before any work."""
    assert main(["predict", "dependency", "--quick", "--chrome", str(tmp_path)]) == 2
    assert "directory" in one_line(capsys)


@pytest.mark.parametrize("command", ["compare", "figures"])
def test_out_directory_under_a_file_is_refused(monkeypatch, capsys, a_file, command):
    """`compare --out` and `figures --out` where a file blocks the directory: refused before
    the work."""
    import asyncsim.lab.figures as figures

    monkeypatch.setattr(cli, "compare_one", must_not_run)
    monkeypatch.setattr(figures, "make_all", must_not_run)
    argv = [command, "--quick", "--out", str(a_file / "sub")]
    if command == "compare":
        argv.insert(1, "dependency")
    assert main(argv) == 2
    assert "is a file" in one_line(capsys)


@pytest.mark.parametrize("param, named", [
    ("n=abc", "--param n='abc'"),
    ("n=2.5", "--param n=2.5"),
    ("n=-1", "--param n=-1"),
    ("shape=abc", "--param shape='abc'"),
    ("shape=(2,-3)", "--param shape=(2, -3)"),
    ("shape=(2.0,3)", "--param shape=(2.0, 3)"),
])
def test_param_errors_name_the_parameter(capsys, param, named):
    """A `--param` value of the wrong kind names the parameter, the value and the kind it
    takes, in one line."""
    assert main(["predict", "sync_vs_async", "--quick", "--param", param]) == 2
    line = one_line(capsys)
    assert named in line and "takes" in line


def test_an_unknown_param_is_named(capsys):
    """An unknown parameter lists the ones the scenario takes."""
    assert main(["predict", "sync_vs_async", "--quick", "--param", "bogus=1"]) == 2
    line = one_line(capsys)
    assert "bogus" in line and "n, shape" in line


def test_a_huge_shape_on_run_names_the_op(capsys):
    """`run --param shape=(1000000,1000000)`: one line naming the op, the shape and memory."""
    assert main(["run", "sync_vs_async", "--quick", "--param", "shape=(1000000,1000000)"]) == 2
    line = one_line(capsys)
    assert "(1000000, 1000000)" in line and "memory" in line


def test_a_huge_shape_on_predict_is_no_traceback(capsys):
    """`predict` of a huge shape either predicts (the model has no data) or says why in one
    line; never a traceback."""
    status = main(["predict", "sync_vs_async", "--quick", "--param", "shape=(1000000,1000000)"])
    if status != 0:
        assert status == 2
        one_line(capsys)


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    """A KeyboardInterrupt anywhere in a command: 'interrupted', status 130."""
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "list", interrupted)
    assert main(["list"]) == 130
    assert one_line(capsys) == "asyncsim list: interrupted"


def test_a_reader_that_leaves_ends_the_listing_quietly():
    """`asyncsim list | head`: once the reader has closed the pipe, the command stops with the
    shell's status for a closed pipe (141) and says nothing on stderr (it said "Broken pipe")."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from asyncsim.lab import cli; "
                               "sys.exit(cli.main(['list']))"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # gone before the listing is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert err == b""
