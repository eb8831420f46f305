"""Load-aware figures: concurrency, step time, time per output token, the measured draft cost,
the realized speed-up against a baseline and the crossover concurrency. Pure: no I/O.

The engines' load series and what they mean are in docs/load-signals.md; in short, from two
readings of one model (``Context`` + ``SpecCounters``):

- concurrency = request-slots / engine steps (requests decoded together, as batched);
- step time = decode seconds / request-steps (one step as a request sees it);
- time per output token (TPOT) = decode seconds / decode tokens.

Against a baseline at matched concurrency (a twin server's bucket, or a profile written by
``specmon measure --profile-out``):

- realized speed-up = TPOT(baseline) / TPOT(target);
- measured draft cost c = (T_step(target) / T_step(baseline) - 1) / k̄, k̄ = drafted tokens per
  step: the cost model (docs/background.md) T_spec = T_base (1 + k̄ c) solved for c;
- break-even alpha, margin and best chain length at that c, through :mod:`specmon.report`;
- speculation pays while (1 + A/D) / (1 + c T/D) > 1 (A accepted, D drafts, T draft tokens), i.e.
  while c < A / T; the crossover concurrency is where the speed-up falls through 1, read off
  the cost curve (:mod:`.curve`: both sides' step times fitted over an hour of buckets) where
  measured buckets bracket it, never extrapolated past them.

Figures that rest on too little data are None ("no value"), with the reason; see
:class:`Thresholds`.

The package, floors without circles (each module imports only those listed before it):

- :mod:`.counters`: one reading's counters in engine-neutral terms, with their rounding;
- :mod:`.laws`: the laws an interval between two readings obeys before it counts;
- :mod:`.interval`: two readings, an interval's increases and figures;
- :mod:`.rows`: the row layout intervals are held in, and the sliding sums;
- :mod:`.buckets`: concurrency buckets and the data thresholds a bucket needs;
- :mod:`.compare`: a target against a twin's bucket or a profile's level;
- :mod:`.curve_sums`: the cost curve's memory (an hour of intervals per minute slot and
  bucket, kept sums, the signature of the buckets measured);
- :mod:`.curve`: the cost curve (the shape fitted to those buckets), the verdict's 95 %
  interval and the crossover's range;
- :mod:`.matched`: two configuration epochs of one server compared at matched load (the
  ``history`` basis, "did the change help?");
- :mod:`.history`: one model's rolling history for the daemon;
- :mod:`.pool`: several servers' windows pooled (a group's members on the old configuration,
  a canary's baseline);
- :mod:`.profile`: profiles written by ``specmon measure --profile-out`` and their JSON.
"""

from __future__ import annotations

from specmon.arithmetic import rounding_error
from specmon.load.buckets import (
    DEFAULT_SCHEME,
    Bucket,
    BucketScheme,
    BucketTotals,
    Thresholds,
    accumulate,
)
from specmon.load.compare import (
    BaselinePoint,
    BucketComparison,
    BucketVerdict,
    CompareMemo,
    compare,
    compare_with_profile,
    compare_with_twin,
    measured_costs,
    twin_point,
)
from specmon.load.counters import MAX_ROUNDING_ERROR, LoadCounters, load_counters
from specmon.load.history import LoadHistory, LoadWindow
from specmon.load.interval import LoadInterval, Speeds
from specmon.load.profile import (
    PROFILE_FORMAT,
    PROFILE_VERSION,
    Profile,
    ProfileError,
    ProfileLevel,
    ProfileSide,
    profile_from_json,
    profile_to_json,
)
from specmon.load.rows import interval

__all__ = [
    "DEFAULT_SCHEME",
    "MAX_ROUNDING_ERROR",
    "PROFILE_FORMAT",
    "PROFILE_VERSION",
    "BaselinePoint",
    "Bucket",
    "BucketComparison",
    "BucketScheme",
    "BucketTotals",
    "BucketVerdict",
    "CompareMemo",
    "LoadCounters",
    "LoadHistory",
    "LoadInterval",
    "LoadWindow",
    "Profile",
    "ProfileError",
    "ProfileLevel",
    "ProfileSide",
    "Speeds",
    "Thresholds",
    "accumulate",
    "compare",
    "compare_with_profile",
    "compare_with_twin",
    "interval",
    "load_counters",
    "measured_costs",
    "profile_from_json",
    "profile_to_json",
    "rounding_error",
    "twin_point",
]
