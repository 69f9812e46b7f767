"""asyncsim: predict asynchronous execution of deep-learning workloads.

record(workload, **params) -> Program; simulate(Program, Profile) -> Trace; predict(workload,
Profile, **params) does both. Profile.ideal(...) / Profile.preset("book") give costs.
compare(predicted, measured) pairs a prediction with a `realexec.run` measurement.
"""

from asyncsim.compare import compare
from asyncsim.profile import Profile
from asyncsim.program import Program
from asyncsim.record import record
from asyncsim.simulate import predict, simulate
from asyncsim.trace import Trace

__all__ = ["Profile", "Program", "Trace", "compare", "predict", "record", "simulate"]
