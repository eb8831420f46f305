"""What a target's state shows after each scrape: immutable records the exporter, the status
page, the target page, the API and the terminal view read (specmon.daemon.target makes them).
No I/O."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from specmon.answer import Answer
from specmon.classes import ClassesView
from specmon.daemon.epoch_curves import ChangeView
from specmon.daemon.twins import TwinCheck
from specmon.daemon.window_rules import Straddle
from specmon.engines import Engine, Rejection
from specmon.records import record
from specmon.report import AcceptanceReport, Basis
from specmon.sources import ScrapeResult
from specmon.state.epochs import ModelEpochs

__all__ = ["Event", "LoadFigures", "ModelView", "TargetView", "WindowView"]


@record
class LoadFigures:
    """What a window says about load and speed (the engine's own counters over it)."""

    #: Mean requests per decoding step (weighted by engine steps), else the mean of the
    #: requests-running gauge.
    concurrency: float | None
    step_seconds: float | None
    time_per_output_token_seconds: float | None
    #: Drafted tokens per draft; below the chain length when the engine varies k.
    mean_draft_length: float | None
    notes: tuple[str, ...] = ()
    #: The requests-running gauge averaged over the window's readings: a time average
    #: (readings come at a steady interval), where ``concurrency`` weights busy steps.
    mean_running: float | None = None
    #: The latest interval's concurrency: the load the engine runs at now.
    latest: float | None = None


@record
class WindowView:
    window: str
    seconds: float
    #: Time the window's data covers, drafts counted in it; None when it has < 2 readings.
    covered_seconds: float | None
    drafts: int | None
    report: AcceptanceReport | None
    #: Scrapes inside the window (0 when it has fewer than two).
    readings: int = 0
    #: Tokens generated in the window, when the engine publishes a generated-token counter.
    generated_tokens: int | None = None
    #: Load and speed from the engine's own counters; None without load series.
    load: LoadFigures | None = None
    #: The answer (specmon.answer): what every surface shows; None with nothing to judge.
    answer: Answer | None = None
    #: Cut at the model's configuration change (specmon.daemon.window_rules), or None.
    straddle: Straddle | None = None


@record
class ModelView:
    model: str
    #: Chain length, its source, draft cost and break-even alpha (resolved by report.basis).
    basis: Basis
    totals_drafts: int | None
    totals_draft_tokens: int | None
    totals_accepted: int | None
    resets: int
    windows: tuple[WindowView, ...]
    requests_running: float | None = None
    #: False for a model the page names without speculative data (a baseline server): its
    #: windows carry load figures only.
    speculating: bool = True
    #: Draft cost c the engine measured (TensorRT-LLM's draft overhead o over the primary
    #: window's scrapes, converted with c = o / (k (1 - o))); None when it measures none.
    engine_draft_cost: float | None = None
    #: The engine's raw draft overhead behind ``engine_draft_cost`` (mean of the readings).
    engine_draft_overhead: float | None = None

    def window(self, label: str) -> WindowView | None:
        return next((w for w in self.windows if w.window == label), None)


@record
class TargetView:
    name: str
    url: str
    labels: dict[str, str]
    engine: Engine | None = None
    up: bool = False
    scraped: bool = False
    last_duration: float | None = None
    last_success: float | None = None
    error: str | None = None
    error_kind: ScrapeResult | None = None
    speculation: bool | None = None
    message: str | None = None
    notes: tuple[str, ...] = ()
    malformed: int = 0
    models: tuple[ModelView, ...] = ()
    #: Readings refused at the last scrape, with their reasons (their figures are left out).
    rejected: tuple[Rejection, ...] = ()
    #: The configured ``baseline:`` twin (another target's name), or None.
    baseline: str | None = None
    #: Whether that twin may be compared with, and why (specmon.daemon.twins); None before
    #: the twin has data (or without a twin).
    baseline_check: TwinCheck | None = None
    #: The targets that take this one as their ``baseline:`` twin (a baseline runs without
    #: speculation by design: the status page lists it as such, not as missing data).
    baseline_for: tuple[str, ...] = ()
    #: Each model's configuration epochs (specmon.state.epochs), kept while it is down.
    epochs: tuple[ModelEpochs, ...] = ()
    #: Each model's newest change compared per load bucket (specmon.daemon.epoch_curves).
    changes: tuple[ChangeView, ...] = ()
    #: Per request class (a tap beside the engine, SGLang's custom labels): specmon.classes.
    classes: ClassesView | None = None


@record
class Event:
    """A state change for the log: ``level`` is "info" or "warning"."""

    level: str
    event: str
    fields: dict[str, Any] = field(default_factory=dict)
