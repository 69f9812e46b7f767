"""Ctrl-C: the time from SIGINT to the end of the process, where a user would press it.

    python benchmarks/interrupt.py [--repeat 3] [--timeout 60]

Each case runs in a fresh Python process that queues many seconds of work (in-place additions
on a 2000x2000 array, a few ms each) and prints "ready" once it is where the case wants it; this
script then waits `SETTLE_S`, sends SIGINT and times the process's exit. Cases:

- waitall: the frontend sleeps in `nd.waitall()` behind the queue;
- max_inflight: the frontend is blocked in a push by `max_inflight=4`;
- session exit: the `with realexec.session()` block ends and its close drains the queue;
- exit drain: a session left open is drained by the interpreter's exit hook;
- second Ctrl-C: as waitall, with another SIGINT 50 ms after the first;
- CLI: `asyncsim run sync_vs_async_12_2 --param n=300000` (a minute of small ops; it prints
  nothing before it ends, so the signal goes `CLI_DELAY_S` after the start, inside its run);
- baseline: a process that imported realexec and sleeps: the floor (Python's own exit).

Target: under 1 s each. A process still alive after `--timeout` seconds is killed and reported
as hung. Times are wall-clock seconds on this machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time

SETTLE_S = 0.5  # after "ready": the frontend is asleep in its blocker by then
CLI_DELAY_S = 6.0  # imports, kernel warm-up and the first iterations of the CLI's run
N_OPS = 5000  # ~3 ms each here: a queue of 15-25 s

# every script starts so: `queue(nd)` pushes N_OPS in-place additions and returns at once
_PRELUDE = f"""
import realexec

def queue(nd):
    x = nd.ones((2000, 2000))
    for _ in range({N_OPS}):
        x += 1
    return x
"""

SCRIPTS = {
    "baseline": """
        import time
        print("ready", flush=True)
        time.sleep(600)
    """,
    "waitall": """
        with realexec.session(workers=2) as nd:
            x = queue(nd)
            print("ready", flush=True)
            nd.waitall()
    """,
    "max_inflight": """
        with realexec.session(workers=2, max_inflight=4) as nd:
            x = nd.ones((2000, 2000))
            x += 1
            print("ready", flush=True)
            while True:
                x += 1
    """,
    "session exit": """
        with realexec.session(workers=2) as nd:
            x = queue(nd)
            print("ready", flush=True)
    """,
    "exit drain": """
        open_session = realexec.session(workers=2)
        nd = open_session.__enter__()
        x = queue(nd)
        print("ready", flush=True)
    """,
}
SCRIPTS["second Ctrl-C"] = SCRIPTS["waitall"]


def _spawn(argv: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def time_case(name: str, timeout: float) -> tuple[float | None, int | None]:
    """(seconds from the first SIGINT to exit or None if hung, exit status)."""
    if name == "CLI":
        proc = _spawn([sys.executable, "-m", "asyncsim.lab.cli", "run", "sync_vs_async_12_2",
                       "--param", "n=300000"])
        time.sleep(CLI_DELAY_S)
    else:
        proc = _spawn([sys.executable, "-c", _PRELUDE + textwrap.dedent(SCRIPTS[name])])
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            raise RuntimeError(f"{name}: the script did not get ready: {proc.stderr.read()}")
        time.sleep(SETTLE_S)
    if proc.poll() is not None:
        raise RuntimeError(f"{name}: the process ended before the signal; make the work longer")
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    if name == "second Ctrl-C":
        time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, None
    finally:
        proc.stdout.close()
        proc.stderr.close()
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    cases = [*SCRIPTS, "CLI"]
    print(f"SIGINT to exit, {args.repeat} run(s) each; target < 1 s\n")
    print(f"{'case':<16s} {'median':>9s} {'max':>9s} {'status':>7s}  verdict")
    for name in cases:
        times, status = [], None
        for _ in range(args.repeat):
            seconds, status = time_case(name, args.timeout)
            times.append(float("inf") if seconds is None else seconds)
        worst = max(times)
        median = statistics.median(times)
        verdict = "hung" if worst == float("inf") else "ok" if worst < 1.0 else "slow"
        shown = [f"{t:8.3f}s" if t != float("inf") else f">{args.timeout:.0f}s".rjust(9)
                 for t in (median, worst)]
        print(f"{name:<16s} {shown[0]} {shown[1]} {status!s:>7s}  {verdict}")


if __name__ == "__main__":
    main()
