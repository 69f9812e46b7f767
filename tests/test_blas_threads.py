"""Sessions set BLAS's thread count for their lifetime; overlapping sessions, in one thread or
several, give back the setting from before the first of them once the last one ends. (Each
session restored what it had found, so two overlapping sessions in threads left BLAS at the
first one's setting, one thread, for the rest of the process.)
"""

from __future__ import annotations

import threading

import pytest

import realexec
from realexec.cpu import kernels as cpu
from realexec.sessions import _blas_threads


@pytest.fixture
def outside():
    """BLAS at a count that no session here sets; put back afterwards."""
    before = _blas_threads()
    if before is None:
        pytest.skip("no BLAS that threadpoolctl can see")
    cpu.set_blas_threads(before + 1)
    yield _blas_threads()
    _release_threadpoolctl_control()
    cpu.set_blas_threads(before)


def _release_threadpoolctl_control():
    """threadpoolctl lets only the first thread that set OpenBLAS's limit set it again: start
    as a process whose first setting comes from a session's own thread."""
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:
        return
    OpenBLASController.clear_controlling_thread(force=True)


def session_in_thread(entered: threading.Event, leave: threading.Event, errors: list):
    def body():
        try:
            with realexec.session(workers=2) as nd:
                (nd.ones((2,)) + 1).asnumpy()
                entered.set()
                assert leave.wait(30)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
            entered.set()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_overlapping_sessions_in_two_threads_restore_blas(outside):
    """Session A (thread 1) enters, session B (thread 2) enters, A leaves and its thread ends,
    B leaves: BLAS is back at the setting from before A."""
    _release_threadpoolctl_control()
    a_in, b_in, a_out, b_out = (threading.Event() for _ in range(4))
    errors: list = []
    a = session_in_thread(a_in, a_out, errors)
    assert a_in.wait(30)
    inside = _blas_threads()
    b = session_in_thread(b_in, b_out, errors)
    assert b_in.wait(30)
    a_out.set()
    a.join(30)
    b_out.set()
    b.join(30)
    assert not errors
    assert inside != outside
    assert _blas_threads() == outside


def test_sessions_in_the_main_thread_and_another_restore_blas(outside):
    """The main thread's session enters, another thread's enters, the main one leaves first:
    BLAS is back at the setting from before both."""
    b_in, b_out = threading.Event(), threading.Event()
    errors: list = []
    with realexec.session(workers=2):
        b = session_in_thread(b_in, b_out, errors)
        assert b_in.wait(30)
    b_out.set()
    b.join(30)
    assert not errors
    assert _blas_threads() == outside


def test_nested_sessions_restore_blas(outside):
    """Nested in one thread, with different settings (async, then sync with all cores)."""
    with realexec.session(workers=2):
        with realexec.session(workers=1, mode="sync"):
            pass
    assert _blas_threads() == outside
