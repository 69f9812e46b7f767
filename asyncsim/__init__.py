"""asyncsim: predict asynchronous execution of deep-learning workloads.

record(workload, **params) -> Program; simulate(Program, Profile) -> Trace; predict(workload,
Profile, **params) does both. Profile.ideal(...) / Profile.preset("book") give costs.
compare(predicted, measured) pairs a prediction with a `realexec.run` measurement.
Training as the chapters write it: `from asyncsim import autograd, gluon, init`.
"""

from asyncsim import gluon
from asyncsim.gluon import init
from asyncsim.lab import exercises
from asyncsim.lab.compare import compare
from asyncsim.model.profile import Profile
from asyncsim.model.simulate import predict, simulate
from asyncsim.nd import autograd
from asyncsim.nd.program import Program
from asyncsim.nd.record import record
from asyncsim.nd.trace import Trace

__all__ = ["Profile", "Program", "Trace", "autograd", "compare", "exercises", "gluon", "init",
           "predict", "record", "simulate"]
