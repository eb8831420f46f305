"""The tap's own ``/metrics``: counters summed per class, the per-request acceptance
histograms, and what the tap could not read or pass on.

prometheus_client's custom-collector pattern: the tap keeps plain integers (one small object
per class, made at start for every class the rule can give, so every series exists from the
first scrape) and :class:`TapCollector` writes them out at each scrape. Counts are sums over
the responses read, never averages of per-request rates: a class's acceptance is
``accepted / drafted`` of its sums. The family names live in :mod:`specmon.engines.tap`, where
the daemon reads them too.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from specmon.engines import tap as names
from specmon.tap.fields import Figures, Unparsed

__all__ = ["BUCKETS", "SAMPLE_NAMES", "UPSTREAM_ERRORS", "TapCollector", "TapCounts"]

#: Upper bounds of the per-request acceptance histograms (+Inf is added). Near 0 is the first
#: bucket (le="0.05"); near 1 is above le="0.95".
BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
#: Every sample name the tap's collector writes (the rules and dashboards may read them).
SAMPLE_NAMES = (
    names.REQUESTS, names.DRAFT_TOKENS, names.ACCEPTED, names.STEPS,
    *(f"{h}{s}" for h in (names.ACCEPTANCE, names.LONG_ACCEPTANCE)
      for s in ("_bucket", "_sum", "_count")),
    names.UNPARSED, names.UPSTREAM_ERRORS, names.UPSTREAM_RETRIES, names.CLIENT_DISCONNECTS,
    names.IN_FLIGHT, names.INFO,
)  # fmt: skip
#: The ``kind`` label of upstream errors.
UPSTREAM_ERRORS = ("connect", "timeout", "reset", "http")


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(BUCKETS, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*(repr(b) for b in BUCKETS), "+Inf"), self.buckets, strict=True):
            running += n
            out.append((bound, float(running)))
        return out


class _Class:
    __slots__ = ("acceptance", "accepted", "draft", "long", "requests", "steps")

    def __init__(self) -> None:
        self.requests = 0
        self.draft = 0
        self.accepted = 0
        self.steps = 0
        self.acceptance = _Histogram()
        self.long = _Histogram()


class TapCounts:
    """Everything the tap counts. Not thread-safe: the event loop's thread only."""

    def __init__(self, classes: Iterable[str], *, long_request_tokens: int) -> None:
        self.long_request_tokens = long_request_tokens
        self._classes: dict[str, _Class] = {name: _Class() for name in classes}
        self.unparsed = dict.fromkeys(Unparsed, 0)
        self.upstream_errors = dict.fromkeys(UPSTREAM_ERRORS, 0)
        self.client_disconnects = 0
        #: Requests sent again after the engine closed a kept-alive connection unanswered.
        self.upstream_retries = 0
        self.in_flight = 0
        #: The engine whose fields the tap read last ("unknown" before any).
        self.engine = "unknown"

    def classes(self) -> tuple[str, ...]:
        return tuple(self._classes)

    def record(self, name: str, figures: Figures) -> None:
        """One response read: its figures added to its class (which must be one the rule
        gives)."""
        entry = self._classes[name]
        entry.requests += 1
        entry.draft += figures.draft_tokens
        entry.accepted += figures.accepted_tokens
        if figures.steps is not None:
            entry.steps += figures.steps
        self.engine = figures.engine
        ratio = figures.acceptance
        if ratio is None:
            return
        entry.acceptance.observe(ratio)
        tokens = figures.completion_tokens
        if tokens is not None and tokens >= self.long_request_tokens:
            entry.long.observe(ratio)

    def entries(self) -> Iterator[tuple[str, _Class]]:
        yield from self._classes.items()

    def totals(self, name: str) -> tuple[int, int, int, int]:
        """(requests, drafted, accepted, steps) of a class (tests and the bench)."""
        e = self._classes[name]
        return e.requests, e.draft, e.accepted, e.steps

    def adopt(self, classes: Iterable[str]) -> None:
        """A new rule's classes: kept ones keep their counts, new ones start at zero, and
        dropped ones go (their series vanish, as after a restart)."""
        wanted = tuple(classes)
        self._classes = {name: self._classes.get(name) or _Class() for name in wanted}


def _counter(
    name: str, text: str, label: str, counts: Mapping[str, int] | None = None
) -> CounterMetricFamily:
    """The counter family of samples ``name`` (``..._total``) by ``label``, with ``counts``
    (label value -> count) when given."""
    family = CounterMetricFamily(name.removesuffix("_total"), text, labels=[label])
    for value, n in (counts or {}).items():
        family.add_metric([value], n)
    return family


class TapCollector(Collector):
    """Writes :class:`TapCounts` out at each scrape."""

    def __init__(self, counts: TapCounts, *, version: str) -> None:
        self._counts = counts
        self._version = version

    def collect(self) -> Iterator[Metric]:
        c = self._counts
        requests = _counter(
            names.REQUESTS,
            "Generation responses whose per-request speculation fields the tap read, per class.",
            "class",
        )
        draft = _counter(
            names.DRAFT_TOKENS,
            "Draft tokens of the responses read, summed per class (vLLM num_draft_tokens, "
            "llama.cpp timings.draft_n, TensorRT-LLM total_draft_tokens, SGLang "
            "spec_num_proposed_drafts).",
            "class",
        )
        accepted = _counter(
            names.ACCEPTED,
            "Accepted draft tokens of the responses read, summed per class (llama.cpp: "
            "draft_n_accepted clamped to predicted_n).",
            "class",
        )
        steps = _counter(
            names.STEPS,
            "Verification steps of the responses read, summed per class, where the engine "
            "gives them (vLLM num_spec_steps, TensorRT-LLM num_spec_steps, SGLang "
            "spec_verify_ct; llama.cpp gives none: 0).",
            "class",
        )
        acceptance = HistogramMetricFamily(
            names.ACCEPTANCE,
            "Per-request acceptance (accepted / drafted tokens of one response), responses "
            "that drafted anything; for alarms on outliers, not for a class's acceptance "
            "(sum the counters for that).",
            labels=["class"],
        )
        long = HistogramMetricFamily(
            names.LONG_ACCEPTANCE,
            f"Per-request acceptance of long responses (at least {c.long_request_tokens} "
            "completion tokens): near 1 flags repetition loops under n-gram or suffix drafts.",
            labels=["class"],
        )
        for name, entry in c.entries():
            label = [name]
            requests.add_metric(label, entry.requests)
            draft.add_metric(label, entry.draft)
            accepted.add_metric(label, entry.accepted)
            steps.add_metric(label, entry.steps)
            acceptance.add_metric(label, entry.acceptance.cumulative(), entry.acceptance.sum)
            long.add_metric(label, entry.long.cumulative(), entry.long.sum)
        yield from (requests, draft, accepted, steps, acceptance, long)
        yield _counter(
            names.UNPARSED,
            "Generation responses passed on without figures, by reason: no_fields (the "
            "engine gave none), malformed, incomplete (ended early), too_large (beyond "
            "max_parse_bytes), encoded (compressed).",
            "reason",
            {reason.value: n for reason, n in c.unparsed.items()},
        )
        yield _counter(
            names.UPSTREAM_ERRORS,
            "Requests the upstream failed: connect (answered 502), timeout (504, or the "
            "stream cut), reset (the connection dropped mid-response: passed on as a cut "
            "response), http (the client's request could not be sent).",
            "kind",
            c.upstream_errors,
        )
        yield CounterMetricFamily(
            names.UPSTREAM_RETRIES.removesuffix("_total"),
            "Requests sent again, once, on a new connection: the engine closed the kept-alive "
            "connection they went out on before answering (its idle timeout crossing the "
            "tap's reuse); bodies of at most 64 KiB only, the rest answered 502.",
            value=c.upstream_retries,
        )
        yield CounterMetricFamily(
            names.CLIENT_DISCONNECTS.removesuffix("_total"),
            "Clients that went away before their response ended (the upstream request is "
            "closed with them).",
            value=c.client_disconnects,
        )
        yield GaugeMetricFamily(
            names.IN_FLIGHT,
            "Requests the tap is passing on now.",
            value=c.in_flight,
        )
        info = GaugeMetricFamily(
            names.INFO,
            "1, labelled with the engine whose per-request fields the tap read last and the "
            "tap's version.",
            labels=["engine", "version"],
        )
        info.add_metric([c.engine, self._version], 1)
        yield info
