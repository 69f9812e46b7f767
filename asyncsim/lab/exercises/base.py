"""What an exercise is, what a check returns, and how a check runs a student's answer.

An `Exercise` is one exercise of the chapters, keyed as the book numbers it ("12.2-2"): its
question (the book's words; the Chinese editions' in English), a one-line title, and either a
grader (`grade(answer) -> Result`) with a reference answer that is a workload
(`workload(nd, **params)`, as the scenarios' are), or, for an open question, no grader and a
`WorkedAnswer`: the answer as text and a demonstration to run.

A `Result` says whether the answer passed and why, in a sentence read off the trace (spans per
lane, regions, memory), plus the traces it was read from so a notebook can draw them.

A check runs the answer on the model (`asyncsim.record` + `asyncsim.simulate`, on a preset
profile: deterministic) and, when the question is about this machine, on the real engine
(`run_on_engine`, small sizes). Whatever the student's code raises while it runs becomes a
`StudentError`, which the registry turns into a failed Result naming the error, so that a bug in
an answer reads as feedback, not as a traceback into the toolkit.
Units: seconds in traces; `ms` formats them as milliseconds for the reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from asyncsim.model.profile import Profile
from asyncsim.model.simulate import simulate
from asyncsim.nd.program import Program
from asyncsim.nd.record import check_workload, record
from asyncsim.nd.trace import Trace


@dataclass(frozen=True)
class Result:
    """The verdict of a check: `passed`, the `reason` in words, and the traces behind it."""

    passed: bool
    reason: str
    traces: dict[str, Trace] = field(default_factory=dict, repr=False, compare=False)

    def __str__(self) -> str:
        return f"{'passed' if self.passed else 'not yet'}: {self.reason}"


@dataclass(frozen=True)
class WorkedAnswer:
    """An open question's answer: `text` to read and `demo(**kw) -> str` to run and vary."""

    text: str
    demo: Callable[..., str]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Exercise:
    """One exercise. `grade` is None for an open question, whose `reference` is a WorkedAnswer;
    otherwise `reference` is a workload that `grade` passes. `machine`: the check also runs the
    answer on this machine's engine. `aliases`: the same exercise's key in another edition."""

    key: str
    title: str  # one line
    question: str  # the book's words
    source: str  # section and seed file
    reference: Callable | WorkedAnswer
    grade: Callable[[Callable], Result] | None = None
    machine: bool = False
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        if (self.grade is None) != isinstance(self.reference, WorkedAnswer):
            raise ValueError(f"exercise {self.key}: an open question has a WorkedAnswer and no "
                             f"grader; a graded one has a workload as its reference")

    @property
    def graded(self) -> bool:
        return self.grade is not None


class UnknownExerciseError(KeyError):
    """A key that is not registered; the message lists the keys that are."""

    def __str__(self) -> str:
        return str(self.args[0])


class OpenQuestionError(ValueError):
    """`check` on an open question: it has a worked answer and a demonstration, no grader."""


class Fail(Exception):
    """Raised by a grader: the answer does not pass, for the reason in the message (the traces
    it was read from go along, for a notebook to draw)."""

    def __init__(self, reason: str, traces: dict[str, Trace] | None = None):
        super().__init__(reason)
        self.traces = traces or {}


class StudentError(Fail):
    """The student's workload failed while a check ran it; the message says how, for them."""


def _explain(exc: Exception, where: str) -> StudentError:
    return StudentError(f"your workload raised {type(exc).__name__} {where}: {exc}")


def record_answer(workload, **params) -> Program:
    """The answer's Program, recorded without data; its failures as a StudentError."""
    try:
        check_workload(workload)
    except TypeError as exc:
        raise StudentError(str(exc)) from None
    try:
        return record(workload, **params)
    except Exception as exc:  # the student's code: any error is feedback
        raise _explain(exc, f"when called with {_params(params)}") from None


def predict(program: Program, profile: Profile, mode: str = "async") -> Trace:
    """The model's Trace of an answer's Program (its errors, e.g. a device the profile lacks,
    are the answer's too)."""
    try:
        return simulate(program, profile, mode=mode)
    except Exception as exc:
        raise _explain(exc, "on the model") from None


def run_on_engine(workload, workers: int = 2, mode: str = "async", repeats: int = 3,
                  **params):
    """Run the answer on this machine's engine `repeats` times: (the measured Trace of median
    duration, what the workload returned the last time).

    A shared machine's timings jump from run to run; the median run is the one reported. The
    Trace's clock starts at the run's first event, as a prediction's does."""
    import realexec

    meta = {"workload": getattr(workload, "__name__", "answer"), "params": dict(params)}
    traces = []
    for _ in range(repeats):
        try:
            with realexec.session(workers=workers, mode=mode) as nd:
                backend = nd._backend  # as realexec.run does: the backend holds the trace
                value = workload(nd, **params)
                backend.drain()  # what the workload left queued still belongs to its run
        except Exception as exc:
            raise _explain(exc, f"on the engine ({mode}, {workers} workers)") from None
        traces.append(backend.trace(meta).from_first_event())
    return sorted(traces, key=lambda t: t.duration)[len(traces) // 2], value


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items()) or "no parameters"


def ms(seconds: float) -> str:
    """Seconds as a short millisecond string for a reason: '4.7 ms', '0.012 ms', '187.2 ms'."""
    value = seconds * 1e3
    return f"{value:.3g} ms" if value < 10 else f"{value:.1f} ms"
