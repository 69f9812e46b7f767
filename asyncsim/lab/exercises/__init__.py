"""The chapters' exercises, each with a reference answer and, unless it is an open question, a
check that runs a student's answer and explains the verdict from the trace.

    from asyncsim import exercises
    exercises.list()                        # {key: one-line title}, in the book's order
    exercises.check("12.2-2", my_loop)      # Result(passed, reason)
    exercises.reference("12.2-2")           # the worked answer: a workload to read and check
    exercises.reference("12.2-1").demo()    # an open question: text and a demonstration

Keys are the book's numbering: "8.1-1" .. "8.1-3" (the Chinese 8.1 prints no exercises: these
are the English 12.1's, also reachable as "12.1-1" ..), "12.2-1" .. "12.2-4" (English 12.2; the
Chinese 8.2's one exercise is 12.2-1, also reachable as "8.2-1"), "8.3-1" .. "8.3-3" (Chinese
8.3), "8.4-1" .. "8.4-4" and "8.5-1", "8.5-2" (the English 12.5's and 12.6's, also reachable as
"12.5-1" .., "12.6-1" ..) and "pytorch-1" (the PyTorch edition's page). An answer that is code
is a workload `workload(nd, **params)`, as the scenarios' are (`asyncsim.lab.scenarios`); each
question says the parameters its check calls it with. Where the exercise asks for one function
(8.4-3's allreduce, 8.4-4's accuracy, 8.5-2's split), the answer is that function, called by
the check inside its own workload; the question gives its signature.

The registry is built from the modules in `_MODULES`, each with a list `EXERCISES` of
`Exercise`s (see `base.py`): a chapter's exercises are added as one module, each exercise as one
entry. Modules: `hybridize` (8.1), `async_compute` (12.2-1, 12.2-4), `minibatches` (12.2-2,
12.2-3), `auto_parallel` (8.3), `multi_device_scaling` (8.4-2, 8.5), `multi_device` (8.4-1, and
the functions the 8.4 and 8.5 modules share), `multi_device_allreduce` (8.4-3),
`multi_device_accuracy` (8.4-4), `pytorch` (the PyTorch page).
"""

from __future__ import annotations

from asyncsim.lab.exercises import (
    async_compute,
    auto_parallel,
    hybridize,
    minibatches,
    multi_device,
    multi_device_accuracy,
    multi_device_allreduce,
    multi_device_scaling,
    pytorch,
)
from asyncsim.lab.exercises.base import (
    Exercise,
    Fail,
    OpenQuestionError,
    Result,
    UnknownExerciseError,
    WorkedAnswer,
)

__all__ = ["EXERCISES", "Exercise", "OpenQuestionError", "Result", "UnknownExerciseError",
           "WorkedAnswer", "check", "get", "list", "reference"]

_MODULES = (hybridize, async_compute, minibatches, auto_parallel, multi_device_scaling,
            multi_device, multi_device_allreduce, multi_device_accuracy, pytorch)


def _collect() -> tuple[dict[str, Exercise], dict[str, str]]:
    table: dict[str, Exercise] = {}
    aliases: dict[str, str] = {}
    for module in _MODULES:
        for exercise in module.EXERCISES:
            if exercise.key in table or exercise.key in aliases:
                raise ValueError(f"exercise {exercise.key!r} is registered twice")
            table[exercise.key] = exercise
            aliases.update(dict.fromkeys(exercise.aliases, exercise.key))
    # sections in the order their modules come, each section's exercises by number
    sections = {}
    for key in table:
        sections.setdefault(key.rpartition("-")[0], len(sections))

    def rank(key: str) -> tuple:
        section, _, number = key.rpartition("-")
        return sections[section], int(number) if number.isdigit() else 0, key

    return {k: table[k] for k in sorted(table, key=rank)}, aliases


EXERCISES, _ALIASES = _collect()


def get(key: str) -> Exercise:
    """The exercise called `key` (or one of its aliases), or an error that lists every key."""
    exercise = EXERCISES.get(_ALIASES.get(key, key)) if isinstance(key, str) else None
    if exercise is None:
        raise UnknownExerciseError(f"unknown exercise {key!r}; the exercises are: "
                                   f"{', '.join(EXERCISES)}")
    return exercise


def list() -> dict[str, str]:  # noqa: A001 (the documented name)
    """Every exercise's key and one-line title: sections in the order of `_MODULES`, each
    section's exercises by number."""
    return {key: exercise.title for key, exercise in EXERCISES.items()}


def check(key: str, answer) -> Result:
    """Run `answer` (a workload) through the exercise's check: Result(passed, reason).

    An open question has no check (OpenQuestionError: see `reference(key)`); a workload that
    fails while it runs, or is not a function, gives a failed Result saying so."""
    exercise = get(key)
    if not exercise.graded:
        raise OpenQuestionError(f"{exercise.key} is an open question, without a check: "
                                f"exercises.reference({exercise.key!r}) gives the worked answer "
                                f"and its .demo() the demonstration")
    try:
        return exercise.grade(answer)
    except Fail as verdict:
        return Result(False, str(verdict), verdict.traces)


def reference(key: str):
    """The worked answer: a workload that passes the check (its docstring says why), or, for an
    open question, a WorkedAnswer (its text, and `demo()` to run)."""
    return get(key).reference
