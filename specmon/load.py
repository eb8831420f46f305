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
  step: the lesson's cost model T_spec = T_base (1 + k̄ c) solved for c;
- break-even alpha, margin and best chain length at that c, through :mod:`specmon.report`;
- speculation pays while (1 + A/D) / (1 + c T/D) > 1 (A accepted, D drafts, T draft tokens), i.e.
  while c < A / T; the crossover concurrency is where c(n) rises through it, interpolated
  linearly between measured concurrencies and never extrapolated past them.

Figures that rest on too little data are None ("no value"), with the reason; see
:class:`Thresholds`.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon import arithmetic
from specmon.engines.model import Context, SpecCounters
from specmon.records import record
from specmon.report import AcceptanceReport, report_from_counters
from specmon.rows import Rows

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
    "Crossover",
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
    "best_chain",
    "compare",
    "compare_with_profile",
    "compare_with_twin",
    "crossover",
    "crossover_at_acceptance",
    "interval",
    "load_counters",
    "measured_costs",
    "profile_from_json",
    "profile_to_json",
    "speedup_at_cost",
    "twin_point",
]

#: A window's live figures as :meth:`LoadHistory.speeds` reads them: (concurrency, step
#: seconds, time per output token), each None when the window cannot give it.
Speeds = tuple[float | None, float | None, float | None]

#: A figure whose worst-case error from the engine's printed precision exceeds this share of
#: its value is not reported (llama.cpp prints 6 significant digits).
MAX_ROUNDING_ERROR = 0.01


# --------------------------------------------------------------------------------------------
# One reading: engine-neutral cumulative counters
# --------------------------------------------------------------------------------------------


def _rounding(value: float | None, digits: int | None, *, integer: bool = False) -> float:
    """Worst-case absolute error of ``value`` printed with ``digits`` significant digits.

    ``integer``: the true value is a whole number (a count), so it prints exactly while it
    has at most ``digits`` digits."""
    if digits is None or value is None or value == 0 or not math.isfinite(value):
        return 0.0
    exponent = math.floor(math.log10(abs(value)))
    unit = 10.0 ** (exponent - digits + 1)
    if integer and unit <= 1.0:
        return 0.0
    return unit / 2.0


@record
class LoadCounters:
    """One model's lifetime load counters at one scrape, in engine-neutral terms.

    ``engine_steps`` and ``slot_steps`` are None when the engine publishes no step counter.
    ``errors`` holds the worst-case rounding of (request_steps, decode_seconds, decode_tokens,
    engine_steps, slot_steps) from the printed precision (all 0 for exact engines).
    """

    request_steps: float
    decode_seconds: float
    decode_tokens: float
    engine_steps: float | None = None
    slot_steps: float | None = None
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = ()
    requests_running: float | None = None
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    #: Which mapping produced it: "inter_token_latency" (vLLM) or "predicted_seconds"
    #: (llama.cpp).
    source: str = ""


_NO_COUNTERS = SpecCounters(0, 0, 0)


def load_counters(context: Context, counters: SpecCounters | None = None) -> LoadCounters | None:
    """The engine-neutral counters of one reading, or None when the page lacks the series.

    - vLLM-style (``inter_token_latency`` sum and count present): request-steps = ITL count,
      decode seconds = ITL sum, decode tokens = generated - first tokens, engine steps =
      ``iteration_tokens_total`` count, slot-steps = ITL count + first tokens.
    - llama.cpp-style (``tokens_predicted_seconds`` present): request-steps = tokens -
      accepted, decode seconds = predicted seconds, decode tokens = tokens, engine steps =
      ``n_decode_total``, slot-steps = ``n_busy_slots_per_decode`` x ``n_decode_total``.
    """
    spec = counters or _NO_COUNTERS
    digits = context.significant_digits
    c = context
    for v in (
        c.inter_token_latency_sum_seconds,
        c.generation_seconds,
        c.busy_slots_per_decode,
        c.requests_running,
    ):
        if v is not None and (not math.isfinite(v) or v < 0):
            return None  # an adapter let a broken value through: no load figures, no guess
    if c.inter_token_latency_sum_seconds is not None and c.inter_token_latency_count is not None:
        if c.generation_tokens is None:
            return None
        first = c.first_token_count or 0
        slots = None
        if c.engine_steps is not None and c.first_token_count is not None:
            slots = float(c.inter_token_latency_count + c.first_token_count)
        return LoadCounters(
            request_steps=float(c.inter_token_latency_count),
            decode_seconds=c.inter_token_latency_sum_seconds,
            decode_tokens=float(max(c.generation_tokens - first, 0)),
            engine_steps=None if c.engine_steps is None else float(c.engine_steps),
            slot_steps=slots,
            drafts=spec.drafts,
            draft_tokens=spec.draft_tokens,
            accepted_tokens=spec.accepted_tokens,
            accepted_per_position=spec.accepted_per_position,
            requests_running=c.requests_running,
            source="inter_token_latency",
        )
    if c.generation_seconds is not None and c.generation_tokens is not None:
        tokens = float(c.generation_tokens)
        accepted = float(spec.accepted_tokens)
        # The accepted count is exact when it came from the per-position sum.
        accepted_error = (
            0.0 if spec.accepted_per_position else _rounding(accepted, digits, integer=True)
        )
        tokens_error = _rounding(tokens, digits, integer=True)
        slots = slots_error = None
        steps_error = 0.0
        if c.engine_steps is not None:
            steps_error = _rounding(c.engine_steps, digits, integer=True)
            if c.busy_slots_per_decode is not None:
                ratio = c.busy_slots_per_decode
                ratio_error = _rounding(ratio, digits)
                slots = ratio * c.engine_steps
                slots_error = (
                    ratio * steps_error + c.engine_steps * ratio_error + ratio_error * steps_error
                )
        return LoadCounters(
            request_steps=max(tokens - accepted, 0.0),
            decode_seconds=c.generation_seconds,
            decode_tokens=tokens,
            engine_steps=None if c.engine_steps is None else float(c.engine_steps),
            slot_steps=slots,
            drafts=spec.drafts,
            draft_tokens=spec.draft_tokens,
            accepted_tokens=spec.accepted_tokens,
            accepted_per_position=spec.accepted_per_position,
            requests_running=c.requests_running,
            errors=(
                tokens_error + accepted_error,
                _rounding(c.generation_seconds, digits),
                tokens_error,
                steps_error,
                slots_error or 0.0,
            ),
            source="predicted_seconds",
        )
    return None


# --------------------------------------------------------------------------------------------
# Two readings: an interval
# --------------------------------------------------------------------------------------------


def _ratio(numerator: float, denominator: float, error: float) -> float | None:
    """numerator / denominator, or None when the denominator is 0 or the relative rounding
    error bound exceeds MAX_ROUNDING_ERROR."""
    if denominator <= 0 or numerator < 0:
        return None
    if error > MAX_ROUNDING_ERROR:
        return None
    return numerator / denominator


def _relative(error: float, value: float) -> float:
    if error == 0.0:
        return 0.0
    return math.inf if value <= 0 else error / value


def _bounded(
    numerator: float, denominator: float, numerator_error: float, denominator_error: float
) -> float | None:
    """numerator / denominator (see :func:`_ratio`) with the relative error bound of both;
    exact counters (vLLM's: both errors 0) skip the bound."""
    if numerator_error == 0.0 and denominator_error == 0.0:
        return _ratio(numerator, denominator, 0.0)
    error = _relative(numerator_error, numerator) + _relative(denominator_error, denominator)
    return _ratio(numerator, denominator, error)


@record
class LoadInterval:
    """Increases over an interval (or a sum of intervals) and the figures they give."""

    request_steps: float
    decode_seconds: float
    decode_tokens: float
    engine_steps: float | None
    slot_steps: float | None
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = ()
    #: Wall seconds the interval covers (None when the readings carried no time).
    seconds: float | None = None
    #: Engine restarts detected (a counter that went down).
    resets: int = 0
    #: Worst-case absolute rounding of the five increases above (same order as LoadCounters).
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    intervals: int = 1

    @property
    def concurrency(self) -> float | None:
        """Requests per engine step (request-slots / engine steps)."""
        if self.engine_steps is None or self.slot_steps is None:
            return None
        return _bounded(self.slot_steps, self.engine_steps, self.errors[4], self.errors[3])

    @property
    def step_seconds(self) -> float | None:
        """Mean decoding step as a request sees it."""
        e = self.errors
        return _bounded(self.decode_seconds, self.request_steps, e[1], e[0])

    @property
    def time_per_output_token_seconds(self) -> float | None:
        e = self.errors
        return _bounded(self.decode_seconds, self.decode_tokens, e[1], e[2])

    @property
    def tokens_per_step(self) -> float | None:
        """K: decode tokens per request-step (1 without speculation)."""
        e = self.errors
        return _bounded(self.decode_tokens, self.request_steps, e[2], e[0])

    @property
    def drafted_per_step(self) -> float | None:
        """k̄: drafted tokens per request-step (all steps, with a draft or not)."""
        return _ratio(
            float(self.draft_tokens),
            self.request_steps,
            _relative(self.errors[0], self.request_steps),
        )

    @property
    def counters(self) -> SpecCounters:
        return SpecCounters(
            drafts=self.drafts,
            draft_tokens=self.draft_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=self.accepted_per_position,
        )

    def __add__(self, other: LoadInterval) -> LoadInterval:
        def opt(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        width = max(len(self.accepted_per_position), len(other.accepted_per_position))
        a = self.accepted_per_position + (0,) * (width - len(self.accepted_per_position))
        b = other.accepted_per_position + (0,) * (width - len(other.accepted_per_position))
        e1, e2 = self.errors, other.errors
        return LoadInterval(
            request_steps=self.request_steps + other.request_steps,
            decode_seconds=self.decode_seconds + other.decode_seconds,
            decode_tokens=self.decode_tokens + other.decode_tokens,
            engine_steps=opt(self.engine_steps, other.engine_steps),
            slot_steps=opt(self.slot_steps, other.slot_steps),
            drafts=self.drafts + other.drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted_tokens=self.accepted_tokens + other.accepted_tokens,
            accepted_per_position=tuple(x + y for x, y in zip(a, b, strict=True)),
            seconds=opt(self.seconds, other.seconds),
            resets=self.resets + other.resets,
            errors=(e1[0] + e2[0], e1[1] + e2[1], e1[2] + e2[2], e1[3] + e2[3], e1[4] + e2[4]),
            intervals=self.intervals + other.intervals,
        )


def interval(
    before: LoadCounters, after: LoadCounters, *, seconds: float | None = None
) -> LoadInterval:
    """The increases from ``before`` to ``after``, reset-aware.

    A counter that went down (by more than its printed rounding) means the engine restarted:
    the new values are then the increase, as Prometheus's ``increase()`` counts them.
    Per-position series that appear later count from zero.
    """
    return _interval_of(_interval_row(before, after, seconds, 0.0), strip_positions=False)


# --------------------------------------------------------------------------------------------
# Concurrency buckets
# --------------------------------------------------------------------------------------------


@record
class Bucket:
    """Concurrencies in [low, high); ``label`` is what an operator reads ("4": about four)."""

    index: int
    low: float
    high: float
    label: str

    def contains(self, concurrency: float) -> bool:
        return self.low <= concurrency < self.high

    @property
    def batch_sizes(self) -> tuple[int, int | None]:
        """The integer batch sizes in the bucket: (first, last); last None when unbounded."""
        first = max(1, math.ceil(self.low))
        if math.isinf(self.high):
            return first, None
        last = math.ceil(self.high) - 1
        return first, max(first, last)


@functools.lru_cache(maxsize=64)
def _buckets(edges: tuple[float, ...], labels: tuple[str, ...]) -> tuple[Bucket, ...]:
    """A scheme's buckets, built once per scheme (every scrape asks for them)."""
    lows = (0.0, *edges)
    highs = (*edges, math.inf)
    return tuple(
        Bucket(i, lo, hi, label)
        for i, (lo, hi, label) in enumerate(zip(lows, highs, labels, strict=True))
    )


@record
class BucketScheme:
    """Concurrency buckets from increasing upper edges; the last bucket is unbounded.

    The default (:meth:`powers_of_two`) centres a bucket on each power of two, with edges at
    1.5 x 2^i: "1" = below 1.5, "2" = [1.5, 3), "4" = [3, 6), "8" = [6, 12), ... An engine
    kept at n requests in flight measures a little below n (requests between their end and
    the next start), and a centred bucket keeps it in the bucket named n, where an operator
    looks for it; the ratio between neighbours is constant because the cost of a step grows
    with the batch roughly geometrically in the regimes that matter (see the lesson).
    """

    edges: tuple[float, ...]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.edges or any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError("bucket edges must be a non-empty increasing sequence")
        if any(e <= 0 or not math.isfinite(e) for e in self.edges):
            raise ValueError("bucket edges must be positive and finite")
        if len(self.labels) != len(self.edges) + 1:
            raise ValueError("one label per bucket (edges + 1)")

    @staticmethod
    def powers_of_two(max_power: int = 12) -> BucketScheme:
        edges = tuple(1.5 * 2**i for i in range(max_power + 1))
        labels = (*tuple(str(2**i) for i in range(max_power + 1)), f"{2 ** (max_power + 1)}+")
        return BucketScheme(edges, labels)

    @staticmethod
    def from_edges(edges: Sequence[float]) -> BucketScheme:
        """Buckets [0, e1), [e1, e2), ..., [en, inf), labelled "<e1", "e1-e2", ..., "en+"."""
        values = tuple(float(e) for e in edges)
        labels = [f"<{values[0]:g}"] if values else []
        labels += [f"{a:g}-{b:g}" for a, b in itertools.pairwise(values)]
        labels += [f"{values[-1]:g}+"] if values else []
        return BucketScheme(values, tuple(labels))

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        return _buckets(self.edges, self.labels)

    def index_of(self, concurrency: float) -> int:
        """The index of the bucket holding ``concurrency``."""
        return bisect.bisect_right(self.edges, concurrency)

    def bucket_of(self, concurrency: float) -> Bucket:
        return self.buckets[self.index_of(concurrency)]


DEFAULT_SCHEME = BucketScheme.powers_of_two()


@record
class Thresholds:
    """What counts as enough data for a figure (else it is not reported).

    - ``min_engine_steps`` per side and bucket: consecutive steps of one engine are the
      independent samples of its step time (the requests of one step share it). With a
      per-step coefficient of variation around 0.3 (typical here), 200 steps put the
      standard error of the mean step time near 2 %, and of c near 0.01-0.02 at k̄ = 3-4.
      Engines without a step counter need ``min_request_steps`` instead.
    - ``min_drafts`` on the speculative side: the acceptance the verdict uses.
    - ``min_intervals`` per side and bucket: scrape intervals. An interval is bucketed by its
      mean concurrency, so the one that straddles a change of load (2 requests, then 16) lands
      in a bucket between the two with a mixture the other side's interval does not share
      (its change fell elsewhere in its own interval); alone, such an interval passes the
      step count and gives a draft cost and a crossover that are the mixture's, not the
      load's. Three intervals make a bucket a load that lasted, not a passage.
    """

    min_engine_steps: int = 200
    min_request_steps: int = 500
    min_drafts: int = 100
    min_intervals: int = 3

    def short_of(self, totals: LoadInterval, *, speculative: bool) -> str | None:
        """Why ``totals`` is not enough, or None when it is."""
        if totals.engine_steps is not None:
            if totals.engine_steps < self.min_engine_steps:
                return f"{totals.engine_steps:.0f} engine steps (needs {self.min_engine_steps})"
        elif totals.request_steps < self.min_request_steps:
            return f"{totals.request_steps:.0f} request-steps (needs {self.min_request_steps})"
        if speculative and totals.drafts < self.min_drafts:
            return f"{totals.drafts} drafts (needs {self.min_drafts})"
        if totals.intervals < self.min_intervals:
            return f"{totals.intervals} scrape intervals (needs {self.min_intervals})"
        if totals.step_seconds is None or totals.time_per_output_token_seconds is None:
            return "no step time (no decoding, or printed precision too coarse)"
        return None


DEFAULT_THRESHOLDS = Thresholds()


@record
class BucketTotals:
    bucket: Bucket
    totals: LoadInterval

    @property
    def concurrency(self) -> float | None:
        return self.totals.concurrency


def accumulate(
    intervals: Iterable[LoadInterval], *, scheme: BucketScheme = DEFAULT_SCHEME
) -> tuple[BucketTotals, ...]:
    """Sum intervals per concurrency bucket (each interval by its own concurrency); intervals
    without a concurrency (no step counter, or idle) are left out. Sorted by bucket."""
    sums: dict[int, LoadInterval] = {}
    buckets: dict[int, Bucket] = {}
    for item in intervals:
        concurrency = item.concurrency
        if concurrency is None or item.request_steps <= 0:
            continue
        bucket = scheme.bucket_of(concurrency)
        buckets[bucket.index] = bucket
        sums[bucket.index] = sums[bucket.index] + item if bucket.index in sums else item
    return tuple(BucketTotals(buckets[i], sums[i]) for i in sorted(sums))


# --------------------------------------------------------------------------------------------
# Rolling history (for the daemon): intervals between consecutive scrapes
# --------------------------------------------------------------------------------------------


@record
class LoadWindow:
    """A window's load: all its intervals summed, and per concurrency bucket."""

    totals: LoadInterval | None
    buckets: tuple[BucketTotals, ...]
    #: Mean of the requests-running gauge over the window's readings (a point-sampled
    #: fallback for engines without step counters).
    requests_running_mean: float | None
    #: The most recent interval: the load the engine is under now (read by a comparison
    #: with a baseline only: None for a window read without its buckets).
    latest: LoadInterval | None = None


# One interval as a row of doubles (an ``array('d')``, held end to end with the others in one
# array, :class:`_Intervals`: a fraction of the memory of a LoadInterval object and its floats,
# issue 15, and one object a history for the cycle collector): end time, seconds, the
# increases (an optional figure the interval lacks as 0 plus a 1 in its "missing" column, so
# that rows add up column by column), whether a count is big (below), resets; then, from
# _LEAN on, what only a comparison with a baseline reads: the bucket (-1: none), the drafts,
# the seconds' "missing" column and the accepted drafts per position. A lean history (a
# target compared with nothing) keeps the first _LEAN columns only. A reading's counters are at most 2**53 (``engines._common.MAX_COUNT``), so the
# increases are exact; their sums stay exact as long as they stay below 2**53, which every
# real engine's do by many orders of magnitude. A row with a count of 2**32 or more (only a
# hostile or broken page) is "big": a sliding sum it leaves is summed again from scratch.
_END, _SECONDS, _REQUEST_STEPS, _DECODE_SECONDS, _DECODE_TOKENS = 0, 1, 2, 3, 4
_ENGINE_STEPS, _SLOT_STEPS, _ERRORS, _INTERVALS = 5, 6, 7, 12
_ENGINE_MISSING, _SLOT_MISSING, _BIG, _RESETS, _LEAN = 13, 14, 15, 16, 17
_BUCKET, _DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _SECONDS_MISSING, _POSITIONS = 17, 18, 19, 20, 21, 22
_BIG_COUNT = float(2**32)
_ADD, _SUB = operator.add, operator.sub


def _interval_row(
    before: LoadCounters, after: LoadCounters, seconds: float | None, end: float
) -> array[float]:
    """The increases from ``before`` to ``after`` (see :func:`interval`) as a row ending at
    ``end``, in no bucket (-1): the history computes it straight from the two readings, with
    no :class:`LoadInterval` in between (issue 13's cost per scrape)."""
    eb, ea = before.errors, after.errors
    engine_before, engine_after = before.engine_steps, after.engine_steps
    if (
        before.decode_seconds - after.decode_seconds > eb[1] + ea[1]
        or before.decode_tokens - after.decode_tokens > eb[2] + ea[2]
        or before.request_steps - after.request_steps > eb[0] + ea[0]
        or float(before.drafts) > float(after.drafts)
        or float(before.draft_tokens) > float(after.draft_tokens)
        or float(before.accepted_tokens) > float(after.accepted_tokens)
        or (
            engine_before is not None
            and engine_after is not None
            and engine_before - engine_after > eb[3] + ea[3]
        )
    ):  # the engine restarted: its new values are the increase
        request_steps, decode_seconds = after.request_steps, after.decode_seconds
        decode_tokens, engine, slots = after.decode_tokens, engine_after, after.slot_steps
        drafts, draft_tokens, accepted = after.drafts, after.draft_tokens, after.accepted_tokens
        per_pos = after.accepted_per_position
        resets = 1
        errors = ea
    else:
        request_steps = max(after.request_steps - before.request_steps, 0.0)
        decode_seconds = max(after.decode_seconds - before.decode_seconds, 0.0)
        decode_tokens = max(after.decode_tokens - before.decode_tokens, 0.0)
        engine = (
            None
            if engine_before is None or engine_after is None
            else max(engine_after - engine_before, 0.0)
        )
        slots_before, slots_after = before.slot_steps, after.slot_steps
        slots = (
            None
            if slots_before is None or slots_after is None
            else max(slots_after - slots_before, 0.0)
        )
        drafts = max(after.drafts - before.drafts, 0)
        draft_tokens = max(after.draft_tokens - before.draft_tokens, 0)
        accepted = max(after.accepted_tokens - before.accepted_tokens, 0)
        old = before.accepted_per_position
        width = len(old)
        per_pos = tuple(
            max(new - old[i], 0) if i < width else new
            for i, new in enumerate(after.accepted_per_position)
        )
        resets = 0
        errors = (eb[0] + ea[0], eb[1] + ea[1], eb[2] + ea[2], eb[3] + ea[3], eb[4] + ea[4])
    big = max(drafts, draft_tokens, accepted, resets, 1, *per_pos) >= _BIG_COUNT
    return array(
        "d",
        (
            end,
            seconds or 0.0,
            request_steps,
            decode_seconds,
            decode_tokens,
            engine or 0.0,
            slots or 0.0,
            *errors,
            1.0,
            1.0 if engine is None else 0.0,
            1.0 if slots is None else 0.0,
            1.0 if big else 0.0,
            float(resets),
            -1.0,
            float(drafts),
            float(draft_tokens),
            float(accepted),
            1.0 if seconds is None else 0.0,
            *map(float, per_pos),
        ),
    )


class _Intervals(Rows[float]):
    """The held intervals' rows (:class:`specmon.rows.Rows`; about 208 bytes an interval at
    four positions, against about 280 as a ``bytes`` of its own in a deque with its start time
    as a float in another, issue 15). An interval's start is its end less its seconds, as the
    window's edge was always computed."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("d")

    def start(self, index: int) -> float:
        slot = self._first + index  # Rows._at(), inline: every window reads it every scrape
        if slot >= self._capacity:
            slot -= self._capacity
        at = slot * self._stride
        return self._data[at + _END] - self._data[at + _SECONDS]


def _row_concurrency(row: array[float]) -> float | None:
    """The concurrency of a row's interval(s) (:attr:`LoadInterval.concurrency`)."""
    if row[_ENGINE_MISSING] >= 0.5 or row[_SLOT_MISSING] >= 0.5:
        return None
    return _bounded(row[_SLOT_STEPS], row[_ENGINE_STEPS], row[_ERRORS + 4], row[_ERRORS + 3])


def _interval_of(v: Sequence[float], *, strip_positions: bool = True) -> LoadInterval:
    """The :class:`LoadInterval` a row (or a sum of rows) stands for; ``strip_positions``
    drops trailing positions that no interval of a sum had. A sum's rounding drift (far
    below 0.5 for the counts, a few ulps below 0 for a figure that summed to 0) is undone."""
    per_pos = [*map(round, v[_POSITIONS:])]
    if strip_positions:
        while per_pos and per_pos[-1] == 0:
            per_pos.pop()
    request_steps, decode_seconds, decode_tokens = (
        v[_REQUEST_STEPS],
        v[_DECODE_SECONDS],
        v[_DECODE_TOKENS],
    )
    engine, slots = v[_ENGINE_STEPS], v[_SLOT_STEPS]
    drafts, draft_tokens = round(v[_DRAFTS]), round(v[_DRAFT_TOKENS])
    accepted, resets, intervals = round(v[_ACCEPTED]), round(v[_RESETS]), round(v[_INTERVALS])
    return LoadInterval(
        request_steps if request_steps > 0.0 else 0.0,
        decode_seconds if decode_seconds > 0.0 else 0.0,
        decode_tokens if decode_tokens > 0.0 else 0.0,
        None if v[_ENGINE_MISSING] >= 0.5 else engine if engine > 0.0 else 0.0,
        None if v[_SLOT_MISSING] >= 0.5 else slots if slots > 0.0 else 0.0,
        drafts if drafts > 0 else 0,
        draft_tokens if draft_tokens > 0 else 0,
        accepted if accepted > 0 else 0,
        tuple(per_pos),
        None if v[_SECONDS_MISSING] >= 0.5 else v[_SECONDS],
        resets if resets > 0 else 0,
        (v[_ERRORS], v[_ERRORS + 1], v[_ERRORS + 2], v[_ERRORS + 3], v[_ERRORS + 4]),
        intervals if intervals > 0 else 0,
    )


def _count(value: float) -> int:
    return max(round(value), 0)


class _Sum:
    """A running sum of intervals that intervals can also be taken out of (a sliding window):
    the rows' columns summed in one pass (``map`` over two sequences of doubles, a few
    microseconds, issue 13's cost per scrape); an optional figure is None while any interval
    inside lacks it."""

    __slots__ = ("cached", "values")

    def __init__(self, width: int = _POSITIONS) -> None:
        #: _LEAN wide in a lean history (its rows are), else _POSITIONS and more.
        self.values: list[float] = [0.0] * width
        #: interval() until the next add: a bucket no interval entered or left since the
        #: last scrape gives the same object again (its comparisons are not redone).
        self.cached: LoadInterval | None = None

    @property
    def intervals(self) -> int:
        return _count(self.values[_INTERVALS])

    def add(self, row: array[float], sign: int) -> None:
        self.cached = None
        values = self.values
        if len(row) != len(values):  # more or fewer positions than the sum has seen
            if len(row) > len(values):
                values.extend([0.0] * (len(row) - len(values)))
            else:
                row = row + array("d", [0.0] * (len(values) - len(row)))
        self.values = list(map(_ADD if sign > 0 else _SUB, values, row))

    def interval(self) -> LoadInterval | None:
        if self.cached is not None:
            return self.cached
        if self.values[_INTERVALS] < 0.5:
            return None
        self.cached = _interval_of(self.values)
        return self.cached


#: A sliding window is summed again from its intervals after this many changes, so that the
#: rounding of adding and taking out floats never accumulates.
_RESUM_EVERY = 512


class _Slide:
    """One window length's sums (total, per bucket, requests running), kept up to date as
    intervals arrive and leave: a window costs the same whatever its length."""

    __slots__ = ("bucketed", "buckets", "changes", "first", "running_count", "running_first",
                 "running_sum", "seconds", "total")  # fmt: skip

    def __init__(self, seconds: float, *, bucketed: bool = False, lean: bool = False) -> None:
        self.seconds = seconds
        self.total = _Sum(_LEAN if lean else _POSITIONS)
        #: Per-bucket sums are kept only once a window was asked for them (a comparison with
        #: a baseline): a target without one never pays for them.
        self.bucketed = bucketed
        self.buckets: dict[int, _Sum] = {}
        #: Absolute index of the oldest interval (reading) inside the window.
        self.first = 0
        self.running_first = 0
        self.running_sum = 0.0
        self.running_count = 0
        self.changes = 0

    def put(self, row: array[float], sign: int) -> None:
        if sign < 0 and row[_BIG]:  # its leaving may round the sums: sum them again
            self.changes = _RESUM_EVERY
        self.total.add(row, sign)
        if not self.bucketed:  # (a lean history's slides never are: its rows have no bucket)
            self.changes += 1
            return
        bucket = int(row[_BUCKET])
        if bucket >= 0:
            sums = self.buckets.get(bucket)
            if sums is None:
                sums = self.buckets[bucket] = _Sum()
            sums.add(row, sign)
            if sums.intervals <= 0:
                del self.buckets[bucket]
        self.changes += 1


class _Pairs(Rows[float]):
    """A queue of (time, value) pairs of doubles (:class:`specmon.rows.Rows`): 16 bytes a
    pair, not a tuple and two float objects."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("d")

    def time(self, index: int) -> float:
        return self.cell(index, 0)

    def value(self, index: int) -> float:
        return self.cell(index, 1)

    def skip_before(self, index: int, start: float, total: float) -> tuple[int, float]:
        """From pair ``index`` on, the index of the first pair at ``start`` or later (or the
        length), and ``total`` less the values passed over, one by one."""
        data, count, first, capacity = self._data, self._count, self._first, self._capacity
        while index < count:
            slot = first + index
            at = 2 * (slot - capacity if slot >= capacity else slot)
            if data[at] >= start:
                break
            total -= data[at + 1]
            index += 1
        return index, total


class LoadHistory:
    """One model's load readings, kept as the intervals between consecutive scrapes, with a
    sliding sum per window length asked for (so a window costs O(its new and expired
    intervals) per reading, not O(its length)).

    ``lean``: keep only what :meth:`speeds` reads (17 doubles an interval, not 22 and the
    positions: a target compared with no baseline, issue 15's memory). The first
    :meth:`window` or :attr:`latest` (a reload gave the target a baseline, or another target
    takes it as its twin) makes the history whole: exactly, by laying the held rows out
    again, when every dropped column was 0 (a server without speculation: what a twin is);
    else the held intervals are let go and the history starts again from the last reading
    (a speculating target's drafts cannot be made up)."""

    def __init__(
        self, *, retention: float, scheme: BucketScheme = DEFAULT_SCHEME, lean: bool = False
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention
        self._scheme = scheme
        self._lean = lean
        #: A lean row dropped a column that was not 0: it cannot be made whole again.
        self._lossy = False
        self._last: tuple[float, LoadCounters] | None = None
        #: The held intervals' rows, oldest first.
        self._rows = _Intervals()
        #: The newest row as a LoadInterval, made when first asked for.
        self._latest: LoadInterval | None = None
        self._dropped = 0  # absolute index of the oldest held interval
        #: (time, requests running) per reading that had the gauge.
        self._running = _Pairs()
        self._running_dropped = 0
        self._slides: dict[float, _Slide] = {}
        self._memos: dict[float, CompareMemo] = {}
        #: window(seconds) with its buckets, until the next reading: a twin that several
        #: speculating targets take as their baseline (a canary beside a pool) is read by
        #: each of them on each of their scrapes.
        self._windows: dict[float, LoadWindow] = {}

    @property
    def lean(self) -> bool:
        """Whether the rows still hold only what :meth:`speeds` reads."""
        return self._lean

    def memo(self, seconds: float) -> CompareMemo:
        """The comparison memo of the window of ``seconds`` (see :class:`CompareMemo`)."""
        memo = self._memos.get(seconds)
        if memo is None:
            memo = self._memos[seconds] = CompareMemo()
        return memo

    def set_retention(self, retention: float) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention

    def add(self, time: float, counters: LoadCounters) -> bool:
        """Record a reading; True when it closed an interval since the previous one (False
        for the first reading, or a reading not newer than the previous). The interval is
        :attr:`latest`."""
        last = self._last
        if last is not None and time <= last[0]:
            return False
        if self._windows:
            self._windows = {}
        slides = self._slides.values()
        if last is not None:
            row = _interval_row(last[1], counters, time - last[0], time)
            if self._lean:
                if not self._lossy and any(row[_DRAFTS:]):
                    self._lossy = True
                del row[_LEAN:]
            else:
                self._bucket(row)
            rows = self._rows
            rows.append(row)
            if len(rows) == rows.capacity:  # room for the retention at this rate (rows.py)
                rows.reserve_for(
                    retention=self._retention, intervals=len(rows), span=time - rows.start(0)
                )
            self._latest = None
            for slide in slides:
                slide.put(row, 1)
        if counters.requests_running is not None:
            running = self._running
            running.append((time, counters.requests_running))
            if len(running) == running.capacity:
                running.reserve_for(
                    retention=self._retention,
                    intervals=len(running) - 1,
                    span=time - running.time(0),
                )
            for slide in slides:
                slide.running_sum += counters.requests_running
                slide.running_count += 1
        self._last = (time, counters)
        for slide in slides:
            self._advance(slide, time)
        cutoff = time - self._retention
        rows = self._rows
        while len(rows) and rows.start(0) < cutoff:
            for slide in slides:
                if slide.first <= self._dropped:  # still inside a window longer than retention
                    slide.put(rows.row(0), -1)
                    slide.first = self._dropped + 1
            rows.popleft()
            self._dropped += 1
        running = self._running
        while len(running) and running.time(0) < cutoff:
            value = running.value(0)
            running.popleft()
            for slide in slides:
                if slide.running_first <= self._running_dropped:
                    slide.running_sum -= value
                    slide.running_count -= 1
                    slide.running_first = self._running_dropped + 1
            self._running_dropped += 1
        return last is not None

    def _bucket(self, row: array[float]) -> None:
        """Put a whole row in its concurrency bucket (it has none while its concurrency is
        unknown or it saw no request step)."""
        concurrency = _row_concurrency(row)
        if concurrency is not None and row[_REQUEST_STEPS] > 0:
            row[_BUCKET] = float(self._scheme.index_of(concurrency))

    def _widen(self) -> None:
        """Make a lean history whole (see the class): its sums are made again."""
        self._lean = False
        old = self._rows
        if self._lossy:
            self._dropped += len(old)
            self._rows = _Intervals()
        else:
            rows = self._rows = _Intervals()
            padding = array("d", [-1.0]) + array("d", bytes(8 * (_POSITIONS - 1 - _LEAN)))
            for index in range(len(old)):
                row = old.row(index) + padding
                self._bucket(row)
                rows.append(row)
                if index == 0:
                    rows.reserve(old.capacity)
        self._lossy = False
        self._latest = None
        for slide in self._slides.values():
            slide.first = max(slide.first, self._dropped)
            self._resum(slide)

    @property
    def latest(self) -> LoadInterval | None:
        """The most recent interval still held (None before the second reading)."""
        if self._lean:
            self._widen()
        if not len(self._rows):
            return None
        if self._latest is None:
            self._latest = _interval_of(self._rows.newest(), strip_positions=False)
        return self._latest

    def _advance(self, slide: _Slide, now: float) -> None:
        """Take out of ``slide`` what no longer lies inside it."""
        start = now - slide.seconds - 1e-9
        rows = self._rows
        index, held = slide.first - self._dropped, len(rows)
        while index < held:
            if rows.start(index) >= start:
                break
            slide.put(rows.row(index), -1)
            index += 1
        slide.first = index + self._dropped
        first = slide.running_first - self._running_dropped
        index, slide.running_sum = self._running.skip_before(first, start, slide.running_sum)
        slide.running_count -= index - first
        slide.running_first = index + self._running_dropped
        if slide.changes > _RESUM_EVERY:
            self._resum(slide)

    def _resum(self, slide: _Slide) -> None:
        """Sum ``slide`` again from the intervals inside it."""
        fresh = _Slide(slide.seconds, bucketed=slide.bucketed, lean=self._lean)
        fresh.first = slide.first
        fresh.running_first = slide.running_first
        rows = self._rows
        for index in range(slide.first - self._dropped, len(rows)):
            fresh.put(rows.row(index), 1)
        running = self._running
        for index in range(slide.running_first - self._running_dropped, len(running)):
            fresh.running_sum += running.value(index)
            fresh.running_count += 1
        fresh.changes = 0
        slide.total, slide.buckets, slide.changes = fresh.total, fresh.buckets, 0
        slide.running_sum, slide.running_count = fresh.running_sum, fresh.running_count

    def _slide(self, seconds: float) -> _Slide:
        slide = self._slides.get(seconds)
        if slide is None:
            slide = self._slides[seconds] = _Slide(seconds, lean=self._lean)
            slide.first, slide.running_first = self._dropped, self._running_dropped
            if self._last is not None:
                self._advance(slide, self._last[0])
            self._resum(slide)
        return slide

    def window(self, seconds: float, *, buckets: bool = True) -> LoadWindow:
        """The intervals that lie wholly inside the last ``seconds``; ``buckets=False``
        leaves out what only a comparison with a baseline reads: the per-bucket sums and the
        latest interval."""
        if self._lean:
            self._widen()
        if self._last is None:
            return LoadWindow(None, (), None)
        if buckets:
            cached = self._windows.get(seconds)
            if cached is not None:
                return cached
        slide = self._slide(seconds)
        if (buckets and not slide.bucketed) or slide.changes > _RESUM_EVERY:
            slide.bucketed = slide.bucketed or buckets
            self._resum(slide)
        total = slide.total.interval()
        running = slide.running_sum / slide.running_count if slide.running_count > 0 else None
        if not buckets:
            return LoadWindow(total, (), running)
        scheme = self._scheme.buckets
        found = []
        for index in sorted(slide.buckets):
            summed = slide.buckets[index].interval()
            if summed is not None:
                found.append(BucketTotals(scheme[index], summed))
        latest = self.latest if total is not None else None
        window = self._windows[seconds] = LoadWindow(total, tuple(found), running, latest)
        return window

    def speeds(self, seconds: float) -> Speeds | None:
        """The live figures of the window of ``seconds`` read straight from its sums: what
        :meth:`window` with ``buckets=False`` gives through ``totals.concurrency`` (else the
        mean of requests running), ``totals.step_seconds`` and
        ``totals.time_per_output_token_seconds``, the same floats, with no
        :class:`LoadInterval` or :class:`LoadWindow` made (the per-scrape path of a target
        compared with no baseline: two objects of 13 and 4 fields a window a scrape, about a
        sixth of the load figures' cost in-process, bench/RESULTS.md). None when the window
        holds no interval."""
        if self._last is None:
            return None
        slide = self._slide(seconds)
        if slide.changes > _RESUM_EVERY:
            self._resum(slide)
        v = slide.total.values
        if v[_INTERVALS] < 0.5:
            return None
        # The clamps of _interval_of: a sum's drift a few ulps below 0 reads as 0.
        steps = v[_REQUEST_STEPS] if v[_REQUEST_STEPS] > 0.0 else 0.0
        decode_seconds = v[_DECODE_SECONDS] if v[_DECODE_SECONDS] > 0.0 else 0.0
        tokens = v[_DECODE_TOKENS] if v[_DECODE_TOKENS] > 0.0 else 0.0
        e = _ERRORS
        concurrency = None
        if v[_ENGINE_MISSING] < 0.5 and v[_SLOT_MISSING] < 0.5:
            engine = v[_ENGINE_STEPS] if v[_ENGINE_STEPS] > 0.0 else 0.0
            slots = v[_SLOT_STEPS] if v[_SLOT_STEPS] > 0.0 else 0.0
            concurrency = _bounded(slots, engine, v[e + 4], v[e + 3])
        if concurrency is None and slide.running_count > 0:
            concurrency = slide.running_sum / slide.running_count
        return (
            concurrency,
            _bounded(decode_seconds, steps, v[e + 1], v[e]),
            _bounded(decode_seconds, tokens, v[e + 1], v[e + 2]),
        )


# --------------------------------------------------------------------------------------------
# Comparison with a baseline
# --------------------------------------------------------------------------------------------


@record
class BaselinePoint:
    """The baseline's speed at one concurrency: a twin's bucket, or a profile's level(s)."""

    concurrency: float
    step_seconds: float
    time_per_output_token_seconds: float
    #: "twin" (another target), "profile level", "profile, interpolated".
    source: str


def speedup_at_cost(counters: SpecCounters, cost: float) -> float | None:
    """The expected speed-up (1 + A/D) / (1 + c T/D) of ``counters``' acceptance at draft cost
    ``cost`` (negative costs count as 0): the closed form when the engine counts drafts and
    draft tokens, else :func:`specmon.report.report_from_counters` (which knows what to assume
    for the counter an engine lacks)."""
    if counters.drafts <= 0:
        return None
    cost = max(cost, 0.0)
    if counters.knows("drafts") and counters.knows("draft_tokens"):
        return arithmetic.measured_speedup(
            counters.accepted_tokens / counters.drafts,
            cost,
            counters.draft_tokens / counters.drafts,
        )
    return report_from_counters(counters, draft_cost=cost).expected_speedup


@dataclass(frozen=True)
class BucketComparison:
    """The target against its baseline in one bucket.

    :attr:`report` (every acceptance figure at the bucket's c) is computed when first read:
    a daemon compares every bucket of every window on every scrape and reads the report of
    the current bucket only."""

    bucket: Bucket
    concurrency: float
    baseline: BaselinePoint
    target_step_seconds: float
    target_time_per_output_token_seconds: float
    #: TPOT(baseline) / TPOT(target).
    realized_speedup: float
    #: T_step(target) / T_step(baseline).
    step_ratio: float
    tokens_per_step: float
    drafted_per_step: float
    #: c = (step_ratio - 1) / k̄; None without drafted tokens.
    draft_cost: float | None
    notes: tuple[str, ...] = ()
    #: The bucket's speculative counters and the configured chain length, for :attr:`report`.
    counters: SpecCounters | None = field(default=None, repr=False, compare=False)
    chain_length: int | None = None

    @functools.cached_property
    def report(self) -> AcceptanceReport | None:
        """Every acceptance figure at max(c, 0): break-even alpha, margin, best chain length;
        None without a draft cost or drafts."""
        if self.draft_cost is None or self.counters is None or self.counters.drafts <= 0:
            return None
        return report_from_counters(
            self.counters,
            draft_cost=max(self.draft_cost, 0.0),
            configured_chain_length=self.chain_length,
        )


def compare(
    target: LoadInterval,
    baseline: BaselinePoint,
    *,
    bucket: Bucket,
    chain_length: int | None = None,
) -> BucketComparison | None:
    """The target's totals (one bucket) against the baseline's speed at that concurrency.

    None when the target has no step time or TPOT (the caller checks :class:`Thresholds`)."""
    step = target.step_seconds
    tpot = target.time_per_output_token_seconds
    concurrency = target.concurrency
    per_step = target.tokens_per_step
    drafted = target.drafted_per_step
    if step is None or tpot is None or per_step is None or drafted is None:
        return None
    if baseline.step_seconds <= 0 or baseline.time_per_output_token_seconds <= 0:
        return None
    notes: list[str] = []
    ratio = step / baseline.step_seconds
    cost = (ratio - 1.0) / drafted if drafted > 0 else None
    if cost is not None and target.drafts > 0:
        if cost < 0:
            notes.append(
                f"the speculative step is faster than the baseline's (c = {cost:.3f}): noise or "
                "a difference between the servers beyond the draft; figures use c = 0"
            )
    elif cost is None:
        notes.append("no drafted tokens in this bucket: no draft cost")
    return BucketComparison(
        bucket=bucket,
        concurrency=concurrency if concurrency is not None else baseline.concurrency,
        baseline=baseline,
        target_step_seconds=step,
        target_time_per_output_token_seconds=tpot,
        realized_speedup=baseline.time_per_output_token_seconds / tpot,
        step_ratio=ratio,
        tokens_per_step=per_step,
        drafted_per_step=drafted,
        draft_cost=cost,
        notes=tuple(notes),
        counters=target.counters if target.drafts > 0 else None,
        chain_length=chain_length,
    )


def twin_point(totals: BucketTotals) -> BaselinePoint | None:
    """A twin target's bucket as a baseline point."""
    step = totals.totals.step_seconds
    tpot = totals.totals.time_per_output_token_seconds
    concurrency = totals.concurrency
    if step is None or tpot is None or concurrency is None:
        return None
    return BaselinePoint(concurrency, step, tpot, "twin")


@record
class BucketVerdict:
    """One bucket of the target: its comparison with the baseline, or why there is none."""

    bucket: Bucket
    comparison: BucketComparison | None
    #: Why there is no comparison ("too little data: ...", "no matching baseline bucket
    #: yet", "outside the profile's measured concurrencies"); None when there is one.
    reason: str | None = None


class CompareMemo:
    """The verdicts of one window's last comparison, by the identity of the sums they came
    from: a bucket no interval entered or left since the previous scrape keeps its sums
    object (:meth:`LoadHistory.window`), so its comparison (and its report, computed when
    first read) is not made again. Holds only the entries the last call used."""

    __slots__ = ("_entries", "_key")

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], tuple[object, object, BucketVerdict]] = {}
        self._key: tuple[int | None, Thresholds] | None = None

    def verdicts(
        self,
        items: Iterable[tuple[BucketTotals, object]],
        make: Callable[[BucketTotals, Any], BucketVerdict],
        *,
        chain_length: int | None,
        thresholds: Thresholds,
    ) -> tuple[BucketVerdict, ...]:
        """``make(item, other)`` for each (target bucket, what it is compared with), or the
        verdict made last time from the very same two objects."""
        if self._key != (chain_length, thresholds):
            self._key = (chain_length, thresholds)
            self._entries = {}
        previous = self._entries
        entries: dict[tuple[int, int], tuple[object, object, BucketVerdict]] = {}
        out = []
        for item, other in items:
            key = (id(item.totals), id(other))
            entry = previous.get(key)
            if entry is None or entry[0] is not item.totals or entry[1] is not other:
                entry = (item.totals, other, make(item, other))
            entries[key] = entry
            out.append(entry[2])
        self._entries = entries
        return tuple(out)


def compare_with_twin(
    target: Sequence[BucketTotals],
    baseline: Sequence[BucketTotals],
    *,
    chain_length: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    memo: CompareMemo | None = None,
) -> tuple[BucketVerdict, ...]:
    """Each target bucket against the twin's bucket of the same concurrency (like with
    like). A bucket short of data on either side gets a reason instead of figures.
    ``memo``: the window's :class:`CompareMemo` (the same answers, made once per change)."""
    by_index = {b.bucket.index: b.totals for b in baseline}

    def make(item: BucketTotals, twin: LoadInterval | None) -> BucketVerdict:
        short = thresholds.short_of(item.totals, speculative=True)
        if short is not None:
            return BucketVerdict(item.bucket, None, f"too little data: {short}")
        if twin is None:
            return BucketVerdict(item.bucket, None, "no matching baseline bucket yet")
        twin_short = thresholds.short_of(twin, speculative=False)
        point = twin_point(BucketTotals(item.bucket, twin)) if twin_short is None else None
        if point is None:
            why = twin_short or "no step time"
            return BucketVerdict(item.bucket, None, f"baseline bucket: too little data: {why}")
        result = compare(item.totals, point, bucket=item.bucket, chain_length=chain_length)
        return BucketVerdict(item.bucket, result, None if result else "no step time")

    pairs = [(item, by_index.get(item.bucket.index)) for item in target]
    if memo is None:
        return tuple(make(item, twin) for item, twin in pairs)
    return memo.verdicts(pairs, make, chain_length=chain_length, thresholds=thresholds)


def compare_with_profile(
    target: Sequence[BucketTotals],
    profile: Profile,
    *,
    chain_length: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    memo: CompareMemo | None = None,
) -> tuple[BucketVerdict, ...]:
    """Each target bucket against the profile's baseline at the bucket's measured
    concurrency (interpolated between levels; none outside the profile's range)."""

    def make(item: BucketTotals, _: object) -> BucketVerdict:
        short = thresholds.short_of(item.totals, speculative=True)
        concurrency = item.concurrency
        if short is not None or concurrency is None:
            why = short or "no concurrency"
            return BucketVerdict(item.bucket, None, f"too little data: {why}")
        point = profile.baseline_at(concurrency)
        if point is None:
            return BucketVerdict(item.bucket, None, "outside the profile's measured concurrencies")
        result = compare(item.totals, point, bucket=item.bucket, chain_length=chain_length)
        return BucketVerdict(item.bucket, result, None if result else "no step time")

    pairs = [(item, profile) for item in target]
    if memo is None:
        return tuple(make(item, profile) for item, _ in pairs)
    return memo.verdicts(pairs, make, chain_length=chain_length, thresholds=thresholds)


def measured_costs(verdicts: Iterable[BucketVerdict]) -> list[tuple[float, float]]:
    """(concurrency, c) of every bucket that has a measured draft cost."""
    return sorted(
        (v.comparison.concurrency, v.comparison.draft_cost)
        for v in verdicts
        if v.comparison is not None and v.comparison.draft_cost is not None
    )


# --------------------------------------------------------------------------------------------
# Crossover
# --------------------------------------------------------------------------------------------


@record
class Crossover:
    """Where speculation stops paying, from speed-ups measured at increasing concurrency.

    ``concurrency`` is interpolated linearly between the last measured concurrency where it
    paid (``pays_up_to``) and the first where it did not (``costs_from``); when it did not pay
    even at the lowest measured concurrency, ``concurrency`` is that concurrency and
    ``pays_up_to`` is None. ``cost_percent`` = (1 - speed-up at ``costs_from``) x 100.
    """

    concurrency: float
    pays_up_to: float | None
    costs_from: float
    speedup_at: float
    cost_percent: float
    measured_from: float
    measured_to: float


def crossover(points: Iterable[tuple[float, float]]) -> Crossover | None:
    """The lowest concurrency at which the speed-up falls to 1 or below; None when it stays
    above 1 over the whole measured range (or there is nothing measured). Never extrapolated:
    the answer always lies within the measured concurrencies."""
    ordered = sorted((n, s) for n, s in points if math.isfinite(n) and math.isfinite(s))
    if not ordered:
        return None
    low, high = ordered[0][0], ordered[-1][0]
    previous: tuple[float, float] | None = None
    for n, s in ordered:
        if s <= 1.0:
            if previous is None:
                at = n
                pays = None
            else:
                n0, s0 = previous
                at = n0 + (s0 - 1.0) * (n - n0) / (s0 - s) if s0 != s else n
                pays = n0
            return Crossover(
                concurrency=at,
                pays_up_to=pays,
                costs_from=n,
                speedup_at=s,
                cost_percent=(1.0 - s) * 100.0,
                measured_from=low,
                measured_to=high,
            )
        previous = (n, s)
    return None


def crossover_at_acceptance(
    costs: Iterable[tuple[float, float]], counters: SpecCounters
) -> Crossover | None:
    """The crossover at the acceptance of ``counters`` (the current window), from draft costs
    measured at several concurrencies: (concurrency, c) pairs."""
    points = []
    for n, cost in costs:
        s = speedup_at_cost(counters, cost)
        if s is not None:
            points.append((n, s))
    return crossover(points)


# --------------------------------------------------------------------------------------------
# Profile (written by ``specmon measure --profile-out``)
# --------------------------------------------------------------------------------------------

PROFILE_FORMAT = "specmon-load-profile"
PROFILE_VERSION = 1


class ProfileError(ValueError):
    """A profile that cannot be used; ``problems`` lists every one with its path."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@record
class ProfileSide:
    """One server at one level: figures from its counters (None where not measurable)."""

    time_per_output_token_seconds: float | None
    step_seconds: float | None
    #: Completion tokens per second seen by the client (from ``usage``).
    tokens_per_second: float | None
    #: Requests per engine step, from the engine's counters.
    concurrency: float | None
    engine_steps: float | None = None


@record
class ProfileLevel:
    #: Requests the client kept in flight.
    concurrency: int
    baseline: ProfileSide
    speculative: ProfileSide
    #: Speculative server: K (tokens per request-step) and k̄ (drafted tokens per step).
    tokens_per_step: float | None
    drafted_per_step: float | None
    acceptance: SpecCounters | None
    #: Client tokens/s with the draft / without.
    speed_ratio: float | None
    #: c from the step times, and c implied by the speed ratio (specmon measure's reading).
    draft_cost_from_steps: float | None
    draft_cost_from_speed: float | None

    @property
    def draft_cost(self) -> float | None:
        """The step-time c when both servers' counters gave it, else the implied c."""
        if self.draft_cost_from_steps is not None:
            return self.draft_cost_from_steps
        return self.draft_cost_from_speed

    @property
    def draft_cost_source(self) -> str | None:
        if self.draft_cost_from_steps is not None:
            return "step times"
        if self.draft_cost_from_speed is not None:
            return "speed ratio"
        return None

    @property
    def position(self) -> float:
        """Where the level sits on the concurrency axis: the speculative engine's measured
        concurrency when known (that is where its cost was paid), else the client's level."""
        return (
            self.speculative.concurrency
            if self.speculative.concurrency is not None
            else float(self.concurrency)
        )

    @property
    def realized_speedup(self) -> float | None:
        b = self.baseline.time_per_output_token_seconds
        s = self.speculative.time_per_output_token_seconds
        if b is None or s is None or s <= 0:
            return None
        return b / s


@record
class Profile:
    version: int
    levels: tuple[ProfileLevel, ...]
    model: str | None = None
    engine: str | None = None
    chain_length: int | None = None
    created: str | None = None
    #: Free-form provenance (servers, settings) kept as written.
    meta: Mapping[str, Any] = field(default_factory=dict)

    def acceptance(self) -> SpecCounters | None:
        """The acceptance counters of every level summed (acceptance does not depend on load
        in the lesson's model; the per-level counters are kept to check that)."""
        parts = [lv.acceptance for lv in self.levels if lv.acceptance is not None]
        if not parts:
            return None
        width = max(len(p.accepted_per_position) for p in parts)
        per_pos = [0] * width
        for p in parts:
            for i, v in enumerate(p.accepted_per_position):
                per_pos[i] += v
        return SpecCounters(
            drafts=sum(p.drafts for p in parts),
            draft_tokens=sum(p.draft_tokens for p in parts),
            accepted_tokens=sum(p.accepted_tokens for p in parts),
            accepted_per_position=tuple(per_pos),
        )

    def costs(self) -> list[tuple[float, float]]:
        """(concurrency, c) of every level that has a c, by concurrency."""
        return sorted(
            (lv.position, lv.draft_cost) for lv in self.levels if lv.draft_cost is not None
        )

    def draft_cost_at(self, concurrency: float) -> tuple[float, str] | None:
        """c at ``concurrency``, linear between the two nearest levels; None outside the
        measured range (no extrapolation). Returns (c, how it was obtained)."""
        return _interpolate(self.costs(), concurrency)

    def baseline_at(self, concurrency: float) -> BaselinePoint | None:
        """The baseline's step time and TPOT at ``concurrency`` (interpolated; None outside)."""
        levels = sorted(
            (
                lv.baseline.concurrency
                if lv.baseline.concurrency is not None
                else float(lv.concurrency),
                lv.baseline,
            )
            for lv in self.levels
            if lv.baseline.step_seconds is not None
            and lv.baseline.time_per_output_token_seconds is not None
        )
        steps = _interpolate([(n, side.step_seconds or 0.0) for n, side in levels], concurrency)
        tpots = _interpolate(
            [(n, side.time_per_output_token_seconds or 0.0) for n, side in levels], concurrency
        )
        if steps is None or tpots is None:
            return None
        source = "profile level" if steps[1] == "measured" else "profile, interpolated"
        return BaselinePoint(concurrency, steps[0], tpots[0], source)

    def crossover(self, counters: SpecCounters | None = None) -> Crossover | None:
        """The crossover at ``counters``' acceptance (default: the profile's own)."""
        acceptance = counters if counters is not None else self.acceptance()
        if acceptance is None:
            return None
        return crossover_at_acceptance(self.costs(), acceptance)


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> tuple[float, str] | None:
    if not points or not math.isfinite(x):
        return None
    ordered = sorted(points)
    if x < ordered[0][0] - 1e-9 or x > ordered[-1][0] + 1e-9:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(ordered):
        if x0 <= x <= x1:
            if abs(x - x0) < 1e-9:
                return y0, "measured"
            if abs(x - x1) < 1e-9:
                return y1, "measured"
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0), "interpolated"
    return ordered[0][1], "measured"


def _side_json(side: ProfileSide) -> dict[str, Any]:
    return {
        "time_per_output_token_seconds": side.time_per_output_token_seconds,
        "step_seconds": side.step_seconds,
        "tokens_per_second": side.tokens_per_second,
        "concurrency": side.concurrency,
        "engine_steps": side.engine_steps,
    }


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The profile as a JSON document (format and every field: docs/measure.md)."""
    levels = []
    for lv in profile.levels:
        acc = lv.acceptance
        levels.append(
            {
                "concurrency": lv.concurrency,
                "baseline": _side_json(lv.baseline),
                "speculative": _side_json(lv.speculative),
                "tokens_per_step": lv.tokens_per_step,
                "drafted_tokens_per_step": lv.drafted_per_step,
                "acceptance": None
                if acc is None
                else {
                    "drafts": acc.drafts,
                    "draft_tokens": acc.draft_tokens,
                    "accepted_tokens": acc.accepted_tokens,
                    "accepted_per_position": list(acc.accepted_per_position),
                },
                "speed_ratio": lv.speed_ratio,
                "realized_speedup": lv.realized_speedup,
                "draft_cost": {
                    "value": lv.draft_cost,
                    "source": lv.draft_cost_source,
                    "from_step_times": lv.draft_cost_from_steps,
                    "from_speed_ratio": lv.draft_cost_from_speed,
                },
            }
        )
    return {
        "format": PROFILE_FORMAT,
        "version": profile.version,
        "created": profile.created,
        "model": profile.model,
        "engine": profile.engine,
        "chain_length": profile.chain_length,
        "meta": dict(profile.meta),
        "levels": levels,
    }


class _Reader:
    """Collects every problem of a document with its path."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def number(
        self, obj: Mapping[str, Any], key: str, path: str, *, minimum: float | None = 0.0
    ) -> float | None:
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.append(f"{path}.{key}: must be a number or null")
            return None
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or (minimum is not None and number < minimum):
            bound = "" if minimum is None else f" and >= {minimum:g}"
            self.problems.append(f"{path}.{key}: must be finite{bound}")
            return None
        return number

    def integer(self, obj: Mapping[str, Any], key: str, path: str, *, minimum: int = 0) -> int:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problems.append(f"{path}.{key}: must be an integer >= {minimum}")
            return minimum
        return value

    def mapping(self, obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.problems.append(f"{path}.{key}: must be an object or null")
            return None
        return value

    def side(self, obj: Mapping[str, Any], key: str, path: str) -> ProfileSide:
        raw = self.mapping(obj, key, path) or {}
        p = f"{path}.{key}"
        return ProfileSide(
            time_per_output_token_seconds=self.number(raw, "time_per_output_token_seconds", p),
            step_seconds=self.number(raw, "step_seconds", p),
            tokens_per_second=self.number(raw, "tokens_per_second", p),
            concurrency=self.number(raw, "concurrency", p),
            engine_steps=self.number(raw, "engine_steps", p),
        )


#: Most levels a profile may hold (bounded work per input).
MAX_PROFILE_LEVELS = 256
MAX_POSITIONS = 64


def profile_from_json(document: object) -> Profile:
    """A profile from its parsed JSON; :class:`ProfileError` names every problem at once."""
    r = _Reader()
    if not isinstance(document, Mapping):
        raise ProfileError(["the profile must be a JSON object"])
    if document.get("format") != PROFILE_FORMAT:
        r.problems.append(f"format: must be {PROFILE_FORMAT!r}")
    version = document.get("version")
    if version != PROFILE_VERSION:
        r.problems.append(f"version: this specmon reads version {PROFILE_VERSION}, not {version!r}")
    raw_levels = document.get("levels")
    levels: list[ProfileLevel] = []
    if not isinstance(raw_levels, list) or not raw_levels:
        r.problems.append("levels: must be a non-empty list")
        raw_levels = []
    elif len(raw_levels) > MAX_PROFILE_LEVELS:
        r.problems.append(f"levels: at most {MAX_PROFILE_LEVELS} levels")
        raw_levels = []
    seen: set[int] = set()
    for i, item in enumerate(raw_levels):
        path = f"levels[{i}]"
        if not isinstance(item, Mapping):
            r.problems.append(f"{path}: must be an object")
            continue
        concurrency = r.integer(item, "concurrency", path, minimum=1)
        if concurrency in seen:
            r.problems.append(f"{path}.concurrency: level {concurrency} appears twice")
        seen.add(concurrency)
        acceptance = None
        acc = r.mapping(item, "acceptance", path)
        if acc is not None:
            p = f"{path}.acceptance"
            per = acc.get("accepted_per_position", [])
            per_pos: tuple[int, ...] = ()
            if (
                not isinstance(per, list)
                or len(per) > MAX_POSITIONS
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in per)
            ):
                r.problems.append(
                    f"{p}.accepted_per_position: must be a list of at most {MAX_POSITIONS} "
                    "integers >= 0"
                )
            else:
                per_pos = tuple(per)
            acceptance = SpecCounters(
                drafts=r.integer(acc, "drafts", p),
                draft_tokens=r.integer(acc, "draft_tokens", p),
                accepted_tokens=r.integer(acc, "accepted_tokens", p),
                accepted_per_position=per_pos,
            )
        cost = r.mapping(item, "draft_cost", path) or {}
        levels.append(
            ProfileLevel(
                concurrency=concurrency,
                baseline=r.side(item, "baseline", path),
                speculative=r.side(item, "speculative", path),
                tokens_per_step=r.number(item, "tokens_per_step", path),
                drafted_per_step=r.number(item, "drafted_tokens_per_step", path),
                acceptance=acceptance,
                speed_ratio=r.number(item, "speed_ratio", path),
                draft_cost_from_steps=r.number(
                    cost, "from_step_times", f"{path}.draft_cost", minimum=None
                ),
                draft_cost_from_speed=r.number(
                    cost, "from_speed_ratio", f"{path}.draft_cost", minimum=None
                ),
            )
        )
    chain = document.get("chain_length")
    if chain is not None and (isinstance(chain, bool) or not isinstance(chain, int) or chain < 0):
        r.problems.append("chain_length: must be an integer >= 0 or null")
        chain = None
    meta = document.get("meta") or {}
    if not isinstance(meta, Mapping):
        r.problems.append("meta: must be an object")
        meta = {}
    if r.problems:
        raise ProfileError(r.problems)
    text = {k: document.get(k) for k in ("model", "engine", "created")}
    return Profile(
        version=PROFILE_VERSION,
        levels=tuple(sorted(levels, key=lambda lv: lv.concurrency)),
        model=text["model"] if isinstance(text["model"], str) else None,
        engine=text["engine"] if isinstance(text["engine"], str) else None,
        chain_length=chain,
        created=text["created"] if isinstance(text["created"], str) else None,
        meta=dict(meta),
    )


def best_chain(survival: Sequence[float], cost: float) -> arithmetic.BestChain:
    """The best chain length (0 = off) at draft cost ``cost`` from per-position survival."""
    return arithmetic.best_chain_length(survival, max(cost, 0.0))
