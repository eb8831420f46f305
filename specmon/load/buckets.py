"""Concurrency buckets: the scheme that groups intervals by load, the minimum data a bucket
needs before it is compared (:class:`Thresholds`), and a bucket's totals."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable, Sequence

from specmon.load.interval import LoadInterval
from specmon.records import record


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
    with the batch roughly geometrically in the regimes that matter (see the cost model, docs/background.md).
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
        short = self.counts_short_of(
            engine_steps=totals.engine_steps, request_steps=totals.request_steps,
            drafts=totals.drafts if speculative else None, intervals=totals.intervals,
        )  # fmt: skip
        if short is not None:
            return short
        if totals.step_seconds is None or totals.time_per_output_token_seconds is None:
            return "no step time (no decoding, or printed precision too coarse)"
        return None

    def counts_short_of(
        self,
        *,
        engine_steps: float | None,
        request_steps: float | None,
        drafts: int | None,
        intervals: int,
    ) -> str | None:
        """Why these counts are not enough, or None (``request_steps`` None: no load series,
        the steps are not asked; ``drafts`` None: not speculating)."""
        if engine_steps is not None:
            if engine_steps < self.min_engine_steps:
                return f"{engine_steps:.0f} engine steps (needs {self.min_engine_steps})"
        elif request_steps is not None and request_steps < self.min_request_steps:
            return f"{request_steps:.0f} request-steps (needs {self.min_request_steps})"
        if drafts is not None and drafts < self.min_drafts:
            return f"{drafts} drafts (needs {self.min_drafts})"
        if intervals < self.min_intervals:
            return f"{intervals} scrape intervals (needs {self.min_intervals})"
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
