"""The public surface: the two packages export a small, fixed set of names."""

import asyncsim
import realexec


def test_asyncsim_all_is_small_and_importable():
    """asyncsim's __all__ is exactly the documented entry points, and each one exists."""
    assert sorted(asyncsim.__all__) == ["Profile", "Program", "Trace", "autograd", "compare",
                                        "exercises", "gluon", "init", "predict", "record",
                                        "simulate"]
    for name in asyncsim.__all__:
        assert getattr(asyncsim, name) is not None


def test_realexec_all_is_small_and_importable():
    """realexec's __all__ is exactly the documented entry points, and each one exists."""
    assert sorted(realexec.__all__) == ["Engine", "NativeEngine", "OpError", "calibrate", "run",
                                       "session"]
    for name in realexec.__all__:
        assert getattr(realexec, name) is not None
