"""The answer layer: one place decides "is speculation paying now, at this load?", and every
surface renders what it decided. Pure: no I/O, no clock, no daemon state.

Its input is what was measured (a window's acceptance figures and load, the window compared
with a twin's, a profile's or a past epoch's step times, the configuration); its output is one
immutable :class:`Answer` per target, model and window: the basis and why each better basis
was refused, the speed-up with its 95 % interval and how it was read, the draft cost and
where it came from, break-even, margin and best chain length at that same c, the crossover
and the best chain length per load, the load it was read at, and the answer in words.

- :mod:`.model`: the records (:class:`Answer`, :class:`Evidence`, :class:`ReadState`, ...);
- :mod:`.crossover`: the one crossover function (the daemon, ``recommend``, ``measure``);
- :mod:`.reads`: a window against its baseline at the load it runs at now: measured, off
  the cost curve, or measuring;
- :mod:`.canary`: the ``canary`` basis: which members of a group on the old configuration
  are a live twin for a member on the new one, pooled;
- :mod:`.decide`: the ranking of the evidence, the answer, and a window's figures at one
  draft cost (every figure beside an answer is at the answer's own c);
- :mod:`.words`: the answer in words.

The daemon (:mod:`specmon.daemon`) keeps the state and gathers the evidence; the status page,
the target page, the terminal view, the JSON API, ``/metrics``, ``specmon recommend --from``
and the alert rules' inputs only render answers.
"""

from __future__ import annotations

from specmon.answer import words
from specmon.answer.canary import Canary, Member, canary, canary_words
from specmon.answer.crossover import (
    Crossover,
    crossover,
    crossover_at_acceptance,
    curve_crossover,
    profile_crossover,
    speedup_at_cost,
)
from specmon.answer.decide import (
    AtCost,
    Comparison,
    Setting,
    at_cost,
    best_at_cost,
    decide,
    standing,
)
from specmon.answer.model import (
    COMPARED,
    MEASURED_C,
    Answer,
    Earlier,
    Evidence,
    PerLoad,
    ReadState,
    Refusal,
    Standing,
)
from specmon.answer.reads import CurveReading, Read, read_comparison, read_concurrency, read_curve

__all__ = [
    "COMPARED",
    "MEASURED_C",
    "Answer",
    "AtCost",
    "Canary",
    "Comparison",
    "Crossover",
    "CurveReading",
    "Earlier",
    "Evidence",
    "Member",
    "PerLoad",
    "Read",
    "ReadState",
    "Refusal",
    "Setting",
    "Standing",
    "at_cost",
    "best_at_cost",
    "canary",
    "canary_words",
    "crossover",
    "crossover_at_acceptance",
    "curve_crossover",
    "decide",
    "profile_crossover",
    "read_comparison",
    "read_concurrency",
    "read_curve",
    "speedup_at_cost",
    "standing",
    "words",
]
