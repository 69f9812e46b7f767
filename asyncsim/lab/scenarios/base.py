"""What a scenario is: one of the chapters' experiments, packaged so tools can find and run it.

A `Scenario` names a workload function (`workload(nd, **params)`, the chapter's code written
against the shared `nd` surface), the parameters that reproduce the book (`params`) and tiny ones
for tests and CI (`quick`), the benchmark regions its program declares, the devices it needs, and
the numbers the chapter printed for it (`book`: region label -> seconds, measured on the book's
own machines; `book_source` says which file and section printed them) and `book_profile`, the
preset of the machine that printed them (`asyncsim.model.book`; by default the one its seed file
and section name). `asyncsim.model.printed` holds every printed number; `book` repeats the
scenario's timings for display.

Assumptions: a workload only branches on its parameters, never on data, so it records without
data (blockers hand back zeros). Region labels are the chapter's `Benchmark` labels where the
chapter gave one; unlabelled `Benchmark()` blocks (d2l prints them as "Done" or "time") get a
label saying what they time, so that every region of a program has a distinct label.
Units: seconds for the book's numbers; sizes are matrix sides and counts, as in the chapters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from asyncsim.model.book import preset_for

DEVICES = ("cpu", "cpu+gpu", "cpu+2gpu")


@dataclass(frozen=True)
class Scenario:
    """One experiment or exercise of the chapters."""

    name: str
    workload: Callable
    params: dict  # the book's sizes
    quick: dict  # tiny sizes with the same regions, for tests and CI
    description: str  # one line
    section: str  # chapter section and the seed file it is in
    regions: tuple[str, ...]  # benchmark labels the program has, in the order they begin
    devices: str = "cpu"  # "cpu", "cpu+gpu" (needs gpu0) or "cpu+2gpu" (gpu0 and gpu1)
    book: dict[str, float] = field(default_factory=dict)  # region label -> seconds
    book_source: str = ""  # the file and section the book's numbers come from
    book_note: str = ""  # how the book's run differs from this workload, other numbers
    measured_only: tuple[str, ...] = ()  # regions of plain-numpy work: a prediction sees none
    measure: dict = field(default_factory=dict)  # overrides of `params` for real runs (below)
    book_profile: str = ""  # the book machine's preset; "" = the one book_source (or section) names
    # (scenario, profile, **overrides) -> {region: seconds}: the regions predicted without
    # simulating the whole run, for runs too long to simulate in a report (data_parallel's
    # epochs, extrapolated from a few batches); None: simulate it all
    estimate: Callable | None = None

    def __post_init__(self):
        if self.devices not in DEVICES:
            raise ValueError(f"{self.name}: devices must be one of {DEVICES}, "
                             f"got {self.devices!r}")
        unknown = sorted(set(self.book) - set(self.regions))
        if unknown:
            raise ValueError(f"{self.name}: book numbers for undeclared regions {unknown}")
        if self.book and not self.book_source:
            raise ValueError(f"{self.name}: book numbers need a book_source")
        if not self.book_profile:
            object.__setattr__(self, "book_profile", preset_for(self.book_source or self.section))

    @property
    def num_gpus(self) -> int:
        """How many GPUs the scenario addresses (gpu0 .. gpu{n-1})."""
        return {"cpu": 0, "cpu+gpu": 1, "cpu+2gpu": 2}[self.devices]

    def kwargs(self, quick: bool = False, measure: bool = False, **overrides) -> dict:
        """The parameters to call the workload with: the book's (or quick ones, or the book's
        with the `measure` overrides that keep a real run within memory) plus overrides."""
        base = dict(self.quick if quick else self.params)
        if measure and not quick:
            base.update(self.measure)
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            raise TypeError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                            f"it takes: {', '.join(self.params) or 'none'}")
        base.update(overrides)
        return base

    def predict_regions(self, profile, **overrides) -> dict[str, float]:
        """Each region's predicted seconds on `profile` at the book's sizes (with overrides):
        by `estimate` where the scenario has one, else by simulating the whole program."""
        if self.estimate is not None:
            return self.estimate(self, profile, **overrides)
        from asyncsim.model.simulate import simulate

        return dict(simulate(self.record(**overrides), profile).regions)

    def record(self, quick: bool = False, **overrides):
        """The scenario's Program, recorded without data."""
        from asyncsim.nd.record import record

        return record(self.workload, **self.kwargs(quick, **overrides))


class UnknownScenarioError(KeyError):
    """A scenario name that is not registered; the message lists the names that are."""

    def __str__(self) -> str:
        return str(self.args[0])
