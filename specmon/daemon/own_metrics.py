"""specmon's own instruments (:class:`OwnMetrics`): scrapes, reloads, the state file, the event
loop, the governor and the web server, as ordinary prometheus_client metrics."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specmon import __version__
from specmon.daemon import metrics as m
from specmon.daemon.metrics import MetricDef
from specmon.daemon.persist import StateMetrics
from specmon.process.loopwatch import GC_BUCKETS, LAG_BUCKETS
from specmon.web.server import WebMetrics

__all__ = ["OwnMetrics"]


class OwnMetrics:
    """specmon's own instruments: ordinary prometheus_client metrics in the daemon's registry,
    declared in :mod:`specmon.daemon.metrics` like every other family."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(d: MetricDef) -> Counter:
            return Counter(d.name, d.help, list(d.labels), registry=registry)

        def gauge(d: MetricDef) -> Gauge:
            return Gauge(d.name, d.help, list(d.labels), registry=registry)

        def histogram(d: MetricDef, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(d.name, d.help, list(d.labels), registry=registry, buckets=buckets)

        self.scrapes_total = counter(m.SCRAPES)
        self.rejected_total = counter(m.REJECTED)
        build = gauge(m.BUILD_INFO)
        build.labels(version=__version__, python=platform.python_version()).set(1)
        self.reload_ok = gauge(m.RELOAD_OK)
        self.reload_time = gauge(m.RELOAD_TIME)
        self.targets = gauge(m.TARGETS)
        self.state = StateMetrics(ok=gauge(m.STATE_WRITE_OK), time=gauge(m.STATE_WRITE_TIME))
        self.file_sd_errors = counter(m.FILE_SD_ERRORS)
        self.log_lines_dropped = counter(m.LOG_LINES_DROPPED)
        self.loop_lag = histogram(m.LOOP_LAG, LAG_BUCKETS)
        self.gc_pause = histogram(m.GC_PAUSE, GC_BUCKETS)
        for generation in range(3):  # every generation's series from the start, at 0
            self.gc_pause.labels(generation=str(generation))
        self.scrape_stretch = gauge(m.SCRAPE_STRETCH)
        self.scrape_stretch.set(1)
        self.scrape_delay = gauge(m.SCRAPE_DELAY)
        self.scrape_interval = gauge(m.SCRAPE_INTERVAL_ACHIEVED)
        self.scrape_excused = counter(m.SCRAPE_EXCUSED)
        self.scrape_deferred = counter(m.SCRAPE_DEFERRED)
        self.scrape_limit = gauge(m.SCRAPE_LIMIT)
        self.loop_busy = gauge(m.LOOP_BUSY)
        self.web = WebMetrics(
            reload_ok=gauge(m.WEB_RELOAD_OK),
            reload_time=gauge(m.WEB_RELOAD_TIME),
            rejections=counter(m.WEB_REJECTIONS),
        )
