"""A fleet whose counters move, as the real Prometheus would answer for it: the answers captured
from Debian's Prometheus in ``tests/fixtures/prometheus/fleet.json`` (five engines: two vLLM,
one vLLM multiprocess, llama.cpp, SGLang), derived in code per read:

- every value is stamped with the evaluation time, as Prometheus stamps an instant query's
  samples (the captured answers are);
- each instance's counters (sample names ending in ``_total``) are the captured values times
  ``1 + step``, so a window over two reads holds exactly the captured counts (``step`` 0 -> 1)
  and every ratio of the captured page; the seconds counters (llama.cpp's
  ``tokens_predicted_seconds_total``) rise by a quarter of the captured value a step, so that
  an interval's engine time stays within its 5 s of wall time (specmon.load.laws: the
  captured lifetime holds 15 s); gauges are left as captured;
- the freshness answer gives each instance the sample time the test chose (by default the
  evaluation time minus ``lag``), as ``timestamp()`` would;
- instances can be removed, cloned under another ``instance`` value (a new engine), or have
  one series duplicated (a second job scraping it).

The same documents are used in-process (:meth:`MovingFleet.read` groups them with the
source's own :func:`~specmon.sources.prometheus.build_instances`) and over HTTP
(:meth:`MovingFleet.reply` for :class:`tests.promsource.fake_prometheus.FakePrometheus`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specmon.sources.prometheus import (
    ReadResult,
    ReadStatus,
    build_instances,
    freshness_query,
    value_queries,
)
from specmon.sources.prometheus_config import PrometheusSourceConfig
from tests.promsource.fake_prometheus import Reply, load, source_for

FLEET = load("fleet")


def _doc(fixture: dict[str, Any], query: str) -> dict[str, Any]:
    (answer,) = [a for a in fixture["answers"] if a["query"] == query]
    return dict(json.loads(answer["body"]))


@dataclass
class MovingFleet:
    config: PrometheusSourceConfig
    #: Per instance: the captured series (``metric``, captured value string).
    series: dict[str, list[tuple[dict[str, str], str]]]
    step: dict[str, int] = field(default_factory=dict)
    #: Per instance: a fixed sample time (an instance Prometheus no longer scrapes, or one
    #: it has not scraped since the previous read); else the evaluation time minus ``lag``.
    sample_time: dict[str, float] = field(default_factory=dict)
    lag: float = 0.5
    #: Extra text for the answers' ``warnings`` (a partial answer).
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, *, url: str = "http://prometheus.invalid:9090", **changes: Any) -> MovingFleet:
        config = source_for(FLEET, url, **changes)
        (value_query,) = value_queries(config)
        doc = _doc(FLEET, value_query)
        series: dict[str, list[tuple[dict[str, str], str]]] = {}
        for item in doc["data"]["result"]:
            metric = dict(item["metric"])
            series.setdefault(metric["instance"], []).append((metric, item["value"][1]))
        return cls(config=config, series=series)

    # -- the fleet ------------------------------------------------------------------------------

    @property
    def instances(self) -> list[str]:
        return sorted(self.series)

    def by_engine(self, prefix: str) -> str:
        """The instance whose series start with ``prefix`` (``llamacpp``, ``sglang``)."""
        (found,) = [
            i for i, s in self.series.items() if all(m["__name__"].startswith(prefix) for m, _ in s)
        ]
        return found

    def captured(self, instance: str, metric: str) -> float:
        """The captured value of the instance's series ``metric`` (one step of a counter)."""
        (value,) = [v for m, v in self.series[instance] if m["__name__"] == metric]
        return float(value)

    def advance(self, *instances: str) -> None:
        """One more step of counters for these instances (default: all)."""
        for name in instances or self.instances:
            self.step[name] = self.step.get(name, 0) + 1

    def clone(self, source: str, new: str) -> None:
        self.series[new] = [({**m, "instance": new}, v) for m, v in self.series[source]]

    def remove(self, name: str) -> None:
        del self.series[name]
        self.step.pop(name, None)
        self.sample_time.pop(name, None)

    def duplicate_a_series(self, name: str) -> None:
        """One of the instance's series again, under another job (two jobs scrape it)."""
        metric, value = self.series[name][0]
        self.series[name].append(({**metric, "job": "again"}, value))

    # -- answers --------------------------------------------------------------------------------

    def _value(self, name: str, metric: Mapping[str, str], value: str) -> str:
        step = self.step.get(name, 0)
        if not metric["__name__"].endswith("_total") or step == 0:
            return value
        rate = 0.25 if "_seconds" in metric["__name__"] else 1.0
        number = float(value) * (1 + step * rate)
        return str(int(number)) if number.is_integer() else repr(number)

    def value_doc(self, at: float) -> dict[str, Any]:
        result = [
            {"metric": dict(metric), "value": [at, self._value(name, metric, value)]}
            for name in self.instances
            for metric, value in self.series[name]
        ]
        doc: dict[str, Any] = {
            "status": "success",
            "data": {"resultType": "vector", "result": result},
        }
        if self.warnings:
            doc["warnings"] = list(self.warnings)
        return doc

    def freshness_doc(self, at: float) -> dict[str, Any]:
        result = []
        for which in ("newest", "oldest"):
            for name in self.instances:
                stamp = self.sample_time.get(name, at - self.lag)
                result.append(
                    {
                        "metric": {"instance": name, "specmon_freshness": which},
                        "value": [at, repr(round(stamp, 3))],
                    }
                )
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def read(self, at: float, *, duration: float = 0.01) -> ReadResult:
        """The read PrometheusSource would return for these answers (no HTTP)."""
        values = copy.deepcopy(self.value_doc(at))
        freshness = self.freshness_doc(at)
        instances, problems, series = build_instances(
            [values["data"]["result"]], freshness["data"]["result"], config=self.config, at=at
        )
        partial = bool(self.warnings)
        return ReadResult(
            status=ReadStatus.PARTIAL if partial else ReadStatus.OK,
            at=at,
            instances=tuple(instances),
            message="Prometheus answered with warnings; some series may be missing"
            if partial
            else None,
            warnings=tuple(self.warnings),
            problems=tuple(problems),
            usable=not partial or self.config.accept_partial,
            queries=2,
            series=series,
            duration_seconds=duration,
        )

    def reply(self, query: str, at: float) -> Reply | None:
        """The answer to one of the source's queries at evaluation time ``at``."""
        (value_query,) = value_queries(self.config)
        if query == value_query:
            return Reply(body=json.dumps(self.value_doc(at)).encode())
        if query == freshness_query(self.config):
            return Reply(body=json.dumps(self.freshness_doc(at)).encode())
        return None


class PrometheusThread:
    """A :class:`FakePrometheus` serving a :class:`MovingFleet` on its own event loop in a
    daemon thread, for a ``specmon run`` subprocess to read. Counters advance one step every
    ``step_seconds`` of evaluation time; ``mode`` makes it fail as the real Prometheus does
    (answers from tests/fixtures/prometheus/): ``slow`` (answers after ``delay`` seconds),
    ``query_error`` (the 400 ``bad_data`` answer), ``partial`` (``warnings``)."""

    def __init__(
        self, fleet: MovingFleet, *, step_seconds: float = 0.5, delay: float = 2.0
    ) -> None:
        import asyncio
        import threading

        from tests.promsource.fake_prometheus import FakePrometheus

        self.fleet = fleet
        self.mode = "ok"
        self.step_seconds = step_seconds
        self.delay = delay
        self.started: float | None = None
        self.lock = threading.Lock()
        self.fake = FakePrometheus()
        self.fake.respond = self._respond
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._bad = load("bad-selector")["answers"][0]

    @property
    def url(self) -> str:
        return self.fake.url

    def __enter__(self) -> PrometheusThread:
        import asyncio

        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.__aenter__(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        import asyncio

        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.fake.__aexit__(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _respond(self, query: str) -> Reply | None:
        at = float(self.fake.requests[-1].params["time"])
        with self.lock:
            if self.started is None:
                self.started = at
            step = int((at - self.started) / self.step_seconds)
            for name in self.fleet.instances:
                self.fleet.step[name] = step
            mode = self.mode
            self.fleet.warnings = ["a store did not answer"] if mode == "partial" else []
            if mode == "query_error":
                return Reply(status=self._bad["status"], body=self._bad["body"].encode())
            reply = self.fleet.reply(query, at)
        if reply is not None and mode == "slow":
            from dataclasses import replace

            reply = replace(reply, delay=self.delay)
        return reply
