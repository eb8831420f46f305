"""How a metric family is declared (:class:`MetricDef`, its kind and scope) and the
declaring helpers; the families themselves are declared once, in :mod:`specmon.daemon.metrics`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ONLY_LOAD_ENGINES",
    "InstanceState",
    "Kind",
    "MetricDef",
    "Scope",
    "counter",
    "gauge",
    "histogram",
]


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    #: specmon's own instruments only (the target families are gauges and counters).
    HISTOGRAM = "histogram"


class Scope(StrEnum):
    """Which table of docs/metrics.md a family belongs to (and what its series are per)."""

    TARGET = "Per target"
    MODEL = "Per target and model"
    WINDOW = "Per target, model and window"
    CLASS = "Per target, request class and window"
    SOURCE = "Per Prometheus source"
    OWN = "specmon's own"


class InstanceState(StrEnum):
    """The ``state`` label of ``specmon_source_instances``: what became of each instance a
    Prometheus source's last usable read returned."""

    #: A sample newer than the previous read's: read into the instance's windows.
    CURRENT = "current"
    #: No sample since the previous read (Prometheus has not scraped it again yet): kept as
    #: it was, neither a new reading nor a failure.
    UNCHANGED = "unchanged"
    #: Its newest sample is older than ``stale_after``: down (``specmon_up 0``).
    STALE = "stale"
    #: Its series cannot be used (duplicated, malformed): down.
    BAD_SERIES = "bad_series"
    #: Its name hashes to another shard (``--shard``): left to that replica.
    OTHER_SHARD = "other_shard"
    #: A configured target (or an earlier source's instance) has the same name and wins.
    NAME_TAKEN = "name_taken"


@dataclass(frozen=True, slots=True)
class MetricDef:
    #: Family name; a counter's samples carry ``_total`` on top of it.
    name: str
    kind: Kind
    #: The HELP text: what the number is and where it comes from.
    help: str
    #: Label names every series carries, in order (targets add their constant labels).
    labels: tuple[str, ...]
    scope: Scope
    #: The meaning for docs/metrics.md when it says more than the HELP text.
    doc: str = ""
    #: Labels some series carry and others do not (after ``labels``, in this order).
    optional: tuple[str, ...] = ()

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.kind is Kind.COUNTER else self.name

    @property
    def sample_names(self) -> tuple[str, ...]:
        """Every sample name the family's series carry (a histogram's three)."""
        if self.kind is Kind.HISTOGRAM:
            return tuple(self.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        return (self.sample_name,)

    @property
    def meaning(self) -> str:
        return self.doc or self.help


def gauge(
    name: str,
    help_: str,
    labels: tuple[str, ...],
    scope: Scope,
    doc: str = "",
    optional: tuple[str, ...] = (),
    *,
    note: str = "",
) -> MetricDef:
    """``note``: appended to the help text (or ``doc``) in docs/metrics.md only, such as
    which targets and engines have the family."""
    if note:
        doc = f"{doc or help_} {note}"
    return MetricDef(name, Kind.GAUGE, help_, labels, scope, doc, optional)


def counter(
    name: str, help_: str, labels: tuple[str, ...], scope: Scope, doc: str = ""
) -> MetricDef:
    return MetricDef(name, Kind.COUNTER, help_, labels, scope, doc)


def histogram(name: str, help_: str, labels: tuple[str, ...], doc: str = "") -> MetricDef:
    return MetricDef(name, Kind.HISTOGRAM, help_, labels, Scope.OWN, doc)


#: Which engines have the load families (and so every figure against a baseline).
ONLY_LOAD_ENGINES = (
    "vLLM (V1), llama.cpp and TGI, and SGLang where its page has the decode-pass counter and "
    "the device timer (estimates: [tap](tap.md#sglang-without-a-tap)); absent for SGLang "
    "without them, TensorRT-LLM and vLLM V0, whose pages carry no per-step timing specmon "
    "reads (docs/engines.md)"
)
