"""A kernel failure that no blocker ever reported is not dropped silently when its session
closes: close warns (RuntimeWarning, naming the op); a failure a blocker did report, or that
waitall raised, closes quietly.
"""

from __future__ import annotations

import time
import warnings

import pytest

import realexec
from realexec import OpError
from realexec.cpu import kernels as cpu


def broken_kernel(inputs, out, attrs):
    raise ZeroDivisionError("injected failure")


def test_an_unobserved_failure_is_a_warning_at_close():
    """A relu fails and nothing waits on it: leaving the session warns, naming relu and the
    original error."""
    with pytest.warns(RuntimeWarning, match=r"'relu'.*ZeroDivisionError"):
        with realexec.session(workers=1) as nd:
            nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
            nd.relu(nd.ones((3,)))


def test_an_unobserved_failure_is_a_warning_when_an_error_cancels_the_session():
    """The same when the session is left by another exception: the exception propagates, and
    the failure it may explain is still reported."""
    with pytest.warns(RuntimeWarning, match="relu"):
        with pytest.raises(KeyError):
            with realexec.session(workers=1) as nd:
                nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
                nd.relu(nd.ones((3,)))
                while nd._backend.engine.pending:  # the relu has run (and failed)
                    time.sleep(0.001)
                raise KeyError("elsewhere")


@pytest.mark.parametrize("observe", ["asnumpy", "waitall"])
def test_a_reported_failure_closes_quietly(observe):
    """A failure that surfaced at a blocker (asnumpy of a dependent array, or waitall) is not
    reported again at close."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with realexec.session(workers=1) as nd:
            nd._backend.kernels = {**cpu.KERNELS, "relu": broken_kernel}
            y = nd.relu(nd.ones((3,))) + 1
            with pytest.raises(OpError, match="relu"):
                if observe == "asnumpy":
                    y.asnumpy()
                else:
                    nd.waitall()
