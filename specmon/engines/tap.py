"""A ``specmon tap`` page: its family names (declared here, where both the tap that writes
them and the daemon that reads them find them) and its reading into a
:class:`~specmon.engines.classes.ClassReading`.

The tap's counters are sums over the responses it read, per ``class`` label; a page that
federated several taps (other labels) is summed per class. Values that are not counts refuse
the class, never the page.
"""

from __future__ import annotations

from collections import defaultdict

from specmon.engines._common import AdapterError, count
from specmon.engines.classes import ClassCounts, ClassReading, capped
from specmon.parser import parse

__all__ = [
    "ACCEPTANCE",
    "ACCEPTED",
    "CLIENT_DISCONNECTS",
    "DRAFT_TOKENS",
    "INFO",
    "IN_FLIGHT",
    "LONG_ACCEPTANCE",
    "REQUESTS",
    "STEPS",
    "UNPARSED",
    "UPSTREAM_ERRORS",
    "UPSTREAM_RETRIES",
    "WANTED",
    "NotATap",
    "read_tap_page",
]

REQUESTS = "specmon_tap_requests_total"
DRAFT_TOKENS = "specmon_tap_draft_tokens_total"
ACCEPTED = "specmon_tap_accepted_tokens_total"
STEPS = "specmon_tap_spec_steps_total"
#: Histogram families (their samples carry _bucket, _sum, _count).
ACCEPTANCE = "specmon_tap_request_acceptance_ratio"
LONG_ACCEPTANCE = "specmon_tap_long_request_acceptance_ratio"
UNPARSED = "specmon_tap_unparsed_responses_total"
UPSTREAM_ERRORS = "specmon_tap_upstream_errors_total"
UPSTREAM_RETRIES = "specmon_tap_upstream_retries_total"
CLIENT_DISCONNECTS = "specmon_tap_client_disconnects_total"
IN_FLIGHT = "specmon_tap_requests_in_flight"
INFO = "specmon_tap_info"

#: The samples the daemon reads from a tap's page.
WANTED = (REQUESTS, DRAFT_TOKENS, ACCEPTED, STEPS, INFO)


class NotATap(ValueError):
    """The page is not a tap's."""


#: A page's longest line and most samples read (a tap's page is a few KiB).
_MAX_LINE = 4096
_MAX_SAMPLES = 2000


def read_tap_page(text: str) -> ClassReading:
    """The page's per-class counts. Raises :class:`NotATap` when the page is not a tap's
    (no ``specmon_tap_requests_total``)."""
    page = parse(text, wanted=WANTED, max_line_length=_MAX_LINE, max_samples=_MAX_SAMPLES)
    if not page.has(REQUESTS):
        raise NotATap("no specmon_tap_requests_total on the page: not a specmon tap's page")
    sums: dict[str, dict[str, float]] = defaultdict(dict)
    for name in (REQUESTS, DRAFT_TOKENS, ACCEPTED, STEPS):
        for sample in page.get(name):
            per = sums[sample.label("class")]
            per[name] = per.get(name, 0.0) + sample.value
    notes: list[str] = []
    items: list[tuple[str, ClassCounts]] = []
    for name, values in sums.items():
        try:
            steps = count(values.get(STEPS, 0.0), "spec_steps")
            items.append(
                (
                    name or "none",
                    ClassCounts(
                        requests=count(values.get(REQUESTS, 0.0), "requests"),
                        accepted_tokens=count(values.get(ACCEPTED, 0.0), "accepted_tokens"),
                        draft_tokens=count(values.get(DRAFT_TOKENS, 0.0), "draft_tokens"),
                        steps=steps,
                    ),
                )
            )
        except AdapterError as exc:
            notes.append(f"class {name[:64]!r} refused: {exc}")
    classes, folded = capped(items)
    if folded:
        notes.append("more classes than specmon keeps: the rest are summed into 'other'")
    engine = next(
        (s.label("engine") for s in page.get(INFO) if s.value == 1.0 and s.label("engine")),
        None,
    )
    return ClassReading(
        source="tap",
        classes=classes,
        engine=engine if engine and len(engine) <= 32 else None,
        notes=tuple(notes),
    )
