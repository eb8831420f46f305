"""Series grouped into instances (pure; no I/O): one page per instance, one bad series
costing its instance only."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specmon.engines import ADAPTERS as _ADAPTERS
from specmon.engines import (
    detect_engine_from_names,
    wanted_names,
)
from specmon.parser import Page, Problem, Sample
from specmon.sources.prometheus.answers import Failure, clean
from specmon.sources.prometheus.model import (
    FRESHNESS_LABEL,
    IDENTITY_LABELS,
    LABEL_NAME,
    MAX_CLOCK_AHEAD,
    MAX_ERRORS_KEPT,
    MAX_LABEL_VALUE_CHARS,
    MAX_LABELS_PER_SERIES,
    MAX_VALUE_CHARS,
    NUMERIC_LABELS,
    InstanceRead,
    ReadStatus,
)
from specmon.sources.prometheus.queries import instance_name
from specmon.sources.prometheus_config import (
    PrometheusSourceConfig,
)


class _Group:
    __slots__ = (
        "bad",
        "bad_example",
        "common",
        "dupe_advice",
        "dupe_example",
        "dupes",
        "identities",
        "key",
        "samples",
        "series",
    )

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = key
        self.samples: dict[str, list[Sample]] = {}
        self.identities: dict[tuple[object, ...], Mapping[str, str]] = {}
        self.common: dict[str, str] | None = None
        self.series = 0
        self.bad = 0
        self.bad_example = ""
        self.dupes = 0
        self.dupe_example = ""
        self.dupe_advice = ""

    def error(self, message: str) -> None:
        self.bad += 1
        if not self.bad_example:
            self.bad_example = message

    def duplicate(self, message: str, advice: str) -> None:
        self.dupes += 1
        if not self.dupe_example:
            self.dupe_example = message
            self.dupe_advice = advice

    def message(self) -> str | None:
        """Why the instance's series cannot be used, or None."""
        parts = []
        if self.dupes:
            parts.append(
                f"{self.dupes} series appear more than once (first: {self.dupe_example}); they "
                f"would be counted twice: {self.dupe_advice}"
            )
        if self.bad:
            parts.append(f"{self.bad} malformed series (first: {self.bad_example})")
        return "; ".join(parts) or None


#: What to do about series seen twice. Never "add the differing label to instance_labels": the
#: labels an engine tells its own series apart by are identity labels already (declared by the
#: adapters), so what is left (``job``, a replica label) names a scrape, and adding it would
#: split one server into two targets.
_DUPLICATE_ADVICE = (
    "one engine scraped twice (two jobs or unmerged HA replicas: narrow the selector or "
    "deduplicate), or two servers under one name (instance_labels must include the label that "
    "names the server, such as pod or instance)"
)
_BOUND_ADVICE = (
    "the older form leaves the answer when its samples leave Prometheus's lookback (5 minutes "
    "after the upgrade by default)"
)


def _describe(name: str, labels: Mapping[str, str]) -> str:
    shown = ",".join(f"{k}={clean(v, 60)!r}" for k, v in sorted(labels.items())[:8])
    return f"{name}{{{shown}}}"


class _LabelCheck:
    """Validates label names once each (a fleet repeats a handful of names)."""

    def __init__(self) -> None:
        self.good: set[str] = set()
        #: Label values already found valid (job, model_name, position, ... repeat).
        self.values: set[str] = set()

    def problem(self, metric: Mapping[Any, Any]) -> str | None:
        if len(metric) > MAX_LABELS_PER_SERIES:
            return f"more than {MAX_LABELS_PER_SERIES} labels"
        good, values = self.good, self.values
        for key, value in metric.items():
            if key not in good:
                if not isinstance(key, str) or not LABEL_NAME.fullmatch(key):
                    return f"invalid label name {clean(key, 60)!r}"
                good.add(key)
            if type(value) is not str:
                return f"label {key} is not a string"
            if value in values:
                continue
            if len(value) > MAX_LABEL_VALUE_CHARS:
                return f"label {key} is longer than {MAX_LABEL_VALUE_CHARS} characters"
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return f"label {key} is not valid UTF-8"
            if len(values) < 100_000:
                values.add(value)
        return None


def build_instances(
    answers: Iterable[list[Any]],
    freshness: Sequence[Any] | None,
    *,
    config: PrometheusSourceConfig,
    at: float,
    consume: bool = False,
) -> tuple[list[InstanceRead], list[str], int]:
    """Group value-query results into instances (pure; no I/O).

    Returns the instances sorted by name, the read-level problems and the number of series.
    Raises :class:`Failure` (TOO_LARGE) when the series or instances exceed the caps.
    ``consume``: each result element is replaced by None once grouped, so the decoded answer
    is let go while the instances are built (the read's peak memory at fleet size).
    """
    wanted = frozenset(wanted_names(config.engine))
    inst_labels = config.instance_labels
    inst_set = frozenset(inst_labels)
    checker = _LabelCheck()
    groups: dict[tuple[str, ...], _Group] = {}
    problems: list[str] = []
    unattributed = 0
    total = 0
    for result in answers:
        total += len(result)
        if total > config.max_series:
            raise Failure(
                ReadStatus.TOO_LARGE,
                f"more than max_series ({config.max_series}) series; narrow the selector "
                "or raise max_series",
            )
        for index, item in enumerate(result):
            if consume:
                result[index] = None
            metric = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(metric, dict):
                unattributed += 1
                _note(problems, "a result element without a metric object")
                continue
            bad = checker.problem(metric)
            key = tuple(metric.get(label, "") for label in inst_labels)
            if bad is not None and not all(
                isinstance(v, str) and len(v) <= MAX_LABEL_VALUE_CHARS for v in key
            ):
                unattributed += 1
                _note(problems, f"a series with unusable instance labels: {bad}")
                continue
            if not any(key):
                unattributed += 1
                _note(
                    problems,
                    f"series without any of the instance labels {list(inst_labels)} "
                    "(they belong to no instance; skipped)",
                )
                continue
            group = groups.get(key)
            if group is None:
                if len(groups) >= config.max_instances:
                    raise Failure(
                        ReadStatus.TOO_LARGE,
                        f"more than max_instances ({config.max_instances}) instances; narrow "
                        "the selector or raise max_instances",
                    )
                group = groups[key] = _Group(key)
            group.series += 1
            name = metric.get("__name__")
            if bad is not None:
                group.error(f"series {clean(name, 80)!r}: {bad}")
                continue
            if not isinstance(name, str) or name not in wanted:
                group.error(f"a series named {clean(name, 80)!r}, which was not asked for")
                continue
            labels = {k: v for k, v in metric.items() if k != "__name__" and k not in inst_set}
            sample = _sample(name, labels, value)
            if isinstance(sample, str):
                group.error(f"{_describe(name, labels)}: {sample}")
                continue
            identity = _identity(name, labels)
            seen = group.identities.get(identity)
            if seen is not None:
                group.duplicate(*_duplicate(name, seen, labels))
                continue
            group.identities[identity] = labels
            if group.common is None:
                group.common = {k: v for k, v in metric.items() if k != "__name__"}
            else:
                common = group.common
                for k in [k for k, v in common.items() if metric.get(k) != v]:
                    del common[k]
            group.samples.setdefault(name, []).append(sample)
    if unattributed:
        problems.insert(0, f"{unattributed} series skipped (no instance)")
    stamps = _freshness(freshness, inst_labels, problems)
    instances = [
        _instance(group, config=config, at=at, stamps=stamps.get(group.key))
        for group in groups.values()
    ]
    instances.sort(key=lambda i: i.name)
    return instances, problems, total


def _identity(name: str, labels: Mapping[str, str]) -> tuple[object, ...]:
    """What one series of ``name`` is within its instance: its identity labels' values, the
    numeric ones (``le``, ``quantile``) as numbers."""
    return (
        name,
        *(
            _number(labels.get(key)) if key in NUMERIC_LABELS else labels.get(key)
            for key in IDENTITY_LABELS.get(name, ())
        ),
    )


def _number(value: str | None) -> object:
    """A bound as a number (``"1"``, ``"1.0"`` and ``"1e0"`` are one bound; ``"+Inf"`` and
    ``"Inf"`` another); a value that is no plain number stays the text it is."""
    if value is None or "_" in value or value != value.strip():
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return value if math.isnan(number) else number


def _duplicate(name: str, seen: Mapping[str, str], labels: Mapping[str, str]) -> tuple[str, str]:
    """How one series seen twice is described (the labels the two copies differ in, and why
    bounds written two ways are one bound), and what to do about it."""
    differ = sorted(k for k in set(seen) | set(labels) if seen.get(k) != labels.get(k))
    text = _describe(name, labels)
    if not differ:
        return text + ", identical", _DUPLICATE_ADVICE
    if all(k in NUMERIC_LABELS and k in seen and k in labels for k in differ):
        forms = ", ".join(
            f"{k}={clean(seen[k], 20)!r} and {k}={clean(labels[k], 20)!r}" for k in differ
        )
        return (
            f"{text}: {forms} are one bound written two ways (Prometheus 3 writes bounds as "
            "floats, Prometheus 2 as the engine printed them: samples of both within the "
            "lookback, after an upgrade)"
        ), _BOUND_ADVICE
    return f"{text}, differing only in {differ}", _DUPLICATE_ADVICE


def _note(problems: list[str], message: str) -> None:
    if message not in problems and len(problems) < MAX_ERRORS_KEPT:
        problems.append(message)


def _sample(name: str, labels: dict[str, str], value: object) -> Sample | str:
    if not isinstance(value, list) or len(value) != 2:
        return '"value" is not a [time, "number"] pair'
    stamp, raw = value
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return "the sample time is not a finite number"
    try:
        finite = math.isfinite(stamp)  # an integer of hundreds of digits does not fit a float
    except OverflowError:
        finite = False
    if not finite:
        return "the sample time is not a finite number"
    if not isinstance(raw, str) or len(raw) > MAX_VALUE_CHARS:
        return "the value is not a number string"
    try:
        number = float(raw)
    except ValueError:
        return f"the value {clean(raw, 40)!r} is not a number"
    # Non-finite values ("NaN", "+Inf") are kept: the adapters judge them as they judge a page.
    return Sample(name, labels, number, None, raw)


def _freshness(
    freshness: Sequence[Any] | None, inst_labels: Sequence[str], problems: list[str]
) -> dict[tuple[str, ...], tuple[float | None, float | None]]:
    out: dict[tuple[str, ...], tuple[float | None, float | None]] = {}
    if freshness is None:
        return out
    bad = 0
    for item in freshness:
        metric = item.get("metric") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            bad += 1
            continue
        which = metric.get(FRESHNESS_LABEL)
        raw = value[1]
        try:
            stamp = float(raw) if isinstance(raw, str) and len(raw) <= MAX_VALUE_CHARS else None
        except ValueError:
            stamp = None
        if which not in ("newest", "oldest") or stamp is None or not math.isfinite(stamp):
            bad += 1
            continue
        key = tuple(
            v if isinstance(v := metric.get(label, ""), str) else "" for label in inst_labels
        )
        newest, oldest = out.get(key, (None, None))
        out[key] = (stamp, oldest) if which == "newest" else (newest, stamp)
    if bad:
        _note(problems, f"{bad} malformed elements in the freshness answer")
    return out


def _instance(
    group: _Group,
    *,
    config: PrometheusSourceConfig,
    at: float,
    stamps: tuple[float | None, float | None] | None,
) -> InstanceRead:
    labels = dict(zip(config.instance_labels, group.key, strict=True))
    common = dict(group.common) if group.common is not None else dict(labels)
    settings = config.settings_for(common)
    engine = config.engine or detect_engine_from_names(group.samples)
    speculation = engine is not None and any(
        name.startswith(_ADAPTERS[engine].markers) for name in group.samples
    )
    newest, oldest = stamps if stamps is not None else (None, None)
    stale = oldest is None or newest is None or at - oldest > config.stale_after
    error = group.message()
    if error is None and newest is not None and newest > at + MAX_CLOCK_AHEAD:
        # Its windows would wait for time to catch up with it: years, silently.
        error = (
            f"its newest sample is {newest - at:.0f} s ahead of the read's time "
            f"(more than {MAX_CLOCK_AHEAD:.0f} s): a clock or the data is wrong"
        )
    page: Page | None = None
    if error is None:
        page = Page(samples=group.samples, valid_lines=group.series)
        if newest is None:
            page.problems.append(
                Problem(0, "", "no sample time for this instance in the freshness answer")
            )
    return InstanceRead(
        name=instance_name(group.key, prefix=config.name_prefix),
        labels=labels,
        common_labels=common,
        engine=engine,
        page=page,
        settings=settings,
        newest_sample=newest,
        oldest_sample=oldest,
        stale=stale,
        speculation=speculation,
        series=group.series,
        age_seconds=None if newest is None else at - newest,
        error=error,
    )
