"""One target's state: its windows and the figures computed after every scrape. No I/O.

The scraper feeds :meth:`TargetState.observe` (a page was read) or :meth:`TargetState.fail`
(no page); each returns the state changes worth a log line. After every call, :attr:`view` is
a new immutable :class:`TargetView` that the exporter and the status page read without locks
(asyncio: one thread; the view is swapped, never mutated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

from specmon.answer import Answer, Setting, decide
from specmon.bounds import acceptance_length_refusal, chain_bound
from specmon.classes import ClassHistory
from specmon.config_values import format_duration
from specmon.daemon.answers import Sources, WindowAnswers, live_figures
from specmon.daemon.class_view import observe_classes
from specmon.daemon.config import TargetConfig
from specmon.daemon.epoch_curves import ChangeView, EpochCurves
from specmon.daemon.reads import ReadTimes
from specmon.daemon.twins import Twins
from specmon.daemon.views import Event, LoadFigures, ModelView, TargetView, WindowView
from specmon.daemon.window_rules import (
    Openings,
    Straddle,
    cuts,
    straddle,
    why_withheld,
    withhold,
)
from specmon.engines import (
    Engine,
    GaugeScope,
    ModelReading,
    PageReading,
    Rejection,
    RejectReason,
    SpecCounters,
    SpecGauges,
)
from specmon.load import LoadHistory, LoadWindow, load_counters
from specmon.report import (
    AcceptanceReport,
    basis,
    detected_chain_length,
    engine_draft_cost,
    has_data,
    report_from_counters,
    report_from_gauges,
)
from specmon.sources import ScrapeResult
from specmon.state.changelog import ChangeLog
from specmon.state.epoch_book import EpochBook
from specmon.state.epochs import Epoch, ModelEpochs
from specmon.windows import CounterHistory, GaugeHistory

__all__ = ["Event", "ModelView", "TargetState", "TargetView", "Twins", "WindowView", "display_url"]


def display_url(url: str) -> str:
    """The URL without query string or fragment (they may carry tokens)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


class TargetState:
    def __init__(
        self,
        config: TargetConfig,
        *,
        windows: tuple[float, ...],
        retention: float,
        on_view: Callable[[TargetView], None] | None = None,
        twins: Twins | None = None,
        curve_retention: float = 3600.0,
    ):
        #: Told of every new view (the exposition renders the target's series from it).
        self.on_view = on_view
        #: Where the ``baseline:`` twin is found.
        self.twins = twins
        #: Per model (speculating or not), the load readings.
        self._loads: dict[str, LoadHistory] = {}
        self.config = config
        self._windows, self._retention, self._curve_retention = windows, retention, curve_retention
        self._histories: dict[str, CounterHistory] = {}
        self._gauges: dict[str, tuple[GaugeHistory, GaugeHistory]] = {}
        #: Per model, the engine's draft overhead readings (TensorRT-LLM).
        self._overheads: dict[str, GaugeHistory] = {}
        #: The engine's own acceptance length per model (TensorRT-LLM), for counters that
        #: cannot give one (no drafts counter, no k).
        self._lengths: dict[str, GaugeHistory] = {}
        self._engine: Engine | None = None
        self._margin_sign: dict[str, int] = {}
        #: Each window's answer, and the last one with a number (specmon.daemon.answers).
        self._answers = WindowAnswers()
        #: The wall time of the reading being observed.
        self._wall = 0.0
        self._last_models: tuple[ModelReading, ...] = ()
        self._rejected_keys: frozenset[tuple[str, str]] = frozenset()
        #: Configuration epochs per model, kept across restarts (specmon.daemon.persist).
        self.epochs = EpochBook()
        #: Each epoch's cost-curve accumulator (the history basis, "did the change help?").
        self.curves = EpochCurves()
        #: Every change kept with its last answer, not only the newest (specmon.state.changelog).
        self.changes: ChangeLog[ChangeView] = ChangeLog()
        #: When the last few readings were taken: the interval achieved.
        self._reads = ReadTimes()
        #: Per model, the reading no window reaches before (its configuration's change).
        self._openings = Openings()
        self._epochs_view: tuple[ModelEpochs, ...] = ()
        self._classes = ClassHistory(retention=retention)  # per-class windows (specmon.classes)
        self._view = TargetView(
            name=config.name,
            url=display_url(config.url),
            labels=dict(config.labels),
            baseline=config.baseline,
        )

    @property
    def engine(self) -> Engine | None:
        """The engine of the last page read."""
        return self._engine

    @property
    def read_interval(self) -> float | None:
        """The median time between the target's last few readings, seconds (None before
        two): the interval achieved, stretched or not."""
        return self._reads.interval

    @property
    def view(self) -> TargetView:
        """The latest immutable view: swapped whole, never mutated."""
        return self._view

    @view.setter
    def view(self, view: TargetView) -> None:
        self._view = view
        if self.on_view is not None:
            self.on_view(view)

    @property
    def primary_window(self) -> str:
        """The window whose margin crossings are logged (the middle one)."""
        return format_duration(self._windows[len(self._windows) // 2])

    def reconfigure(
        self, config: TargetConfig, *, windows: tuple[float, ...], retention: float
    ) -> None:
        """New settings that keep the counters' meaning (same URL, engine, model)."""
        self.config = config
        self._windows = windows
        self._retention = retention
        if self.twins is not None:
            self.twins.update(self)
        for history in self._histories.values():
            history.set_retention(retention)
        view = replace(
            self.view,
            name=config.name,
            url=display_url(config.url),
            labels=dict(config.labels),
            baseline=config.baseline,
        )
        if view.up and self._last_models:
            # New draft cost, chain length or windows apply now, not at the next scrape.
            view = replace(
                view,
                models=tuple(
                    self._model_view(m)
                    for m in self._last_models
                    if m.model in self._histories or m.model in self._gauges or m.gauges
                ),
            )
        self.view = view

    # -- failures ---------------------------------------------------------------------------

    def fail(self, *, kind: ScrapeResult, message: str, duration: float) -> list[Event]:
        events: list[Event] = []
        if self.view.up or not self.view.scraped:
            events.append(Event("warning", "target_down", {"error": message, "result": kind}))
        elif self.view.error != message:
            events.append(
                Event("warning", "target_error_changed", {"error": message, "result": kind})
            )
        self.view = TargetView(
            name=self.config.name,
            url=self.view.url,
            labels=dict(self.config.labels),
            engine=self.view.engine,
            up=False,
            scraped=True,
            last_duration=duration,
            last_success=self.view.last_success,
            error=message,
            error_kind=kind,
            speculation=self.view.speculation,
            baseline=self.config.baseline,
            baseline_for=self.view.baseline_for,
            epochs=self.view.epochs,
        )
        return events

    # -- pages ------------------------------------------------------------------------------

    def observe(
        self,
        reading: PageReading,
        *,
        mono: float,
        wall: float,
        duration: float,
        lag: float = 0.0,
    ) -> list[Event]:
        events: list[Event] = []
        self._reads.add(mono)
        self._wall = wall
        was = self.view
        if not was.up:
            events.append(Event("info", "target_up", {"engine": _engine_name(reading.engine)}))
        if reading.engine != self._engine:
            if self._engine is not None:
                events.append(
                    Event(
                        "warning",
                        "engine_changed",
                        {"before": self._engine.value, "after": _engine_name(reading.engine)},
                    )
                )
            self._histories.clear()
            self._gauges.clear()
            self._overheads.clear()
            self._lengths.clear()
            self._loads.clear()
            self._margin_sign.clear()
            self._answers.clear()
            self._engine = reading.engine
        speculation = reading.speculation
        if was.speculation is not None and speculation != was.speculation:
            events.append(
                Event("info", "speculation_appeared", {})
                if speculation
                else Event("warning", "speculation_vanished", {"message": reading.message})
            )
        baseline_for = self.twins.baseline_for(self.config.name) if self.twins else ()
        if was.speculation is None and not speculation:
            if baseline_for:
                # A twin runs without speculation by design: nothing to warn about.
                events.append(
                    Event("info", "baseline_up", {"baseline_for": ", ".join(baseline_for)})
                )
            else:
                events.append(Event("warning", "no_speculation", {"message": reading.message}))

        models: list[ModelView] = []
        kept: list[ModelReading] = []
        plain: list[ModelReading] = []
        rejected = list(reading.rejected)
        self._answers.twin_check = None
        # A refused model keeps its history: the next good reading resumes its windows.
        present = {r.model for r in rejected}
        for model in reading.models:
            present.add(model.model)
            recorded, refusal = self._record(model, mono)
            events.extend(recorded)
            if refusal is not None:
                rejected.append(refusal)
                if refusal.whole_model:
                    continue
            self._record_load(model, mono, rejected, lag=lag)
            kept.append(model)
        for model in reading.plain_models:
            present.add(model.model)
            if self._record_load(model, mono, rejected, lag=lag):
                plain.append(model)
        self._last_models = (*kept, *plain)
        for gone in set(self._loads) - present:
            del self._loads[gone]
        for gone in set(self._histories) - present:
            del self._histories[gone]
        for gone in set(self._gauges) - present:
            del self._gauges[gone]
        for gone in set(self._overheads) - present:
            del self._overheads[gone]
        for gone in set(self._lengths) - present:
            del self._lengths[gone]
        self._answers.keep(present)
        # The page's configuration first: every window below is read from its current epoch.
        # Another engine on a few pages in a row starts the epochs afresh, and their sums.
        before = self.epochs.engine
        events.extend(
            Event("info", name, fields) for name, fields in self.epochs.observe(reading, wall)
        )
        if before is not None and self.epochs.engine != before:
            self.curves.clear()
        for name, opening in self._openings.observe(self.epochs, wall=wall, mono=mono):
            if name in self._loads:  # its windows and cost curve start at the change
                self._loads[name].anchor(opening, curve=True)
        for name in self._openings.settle(mono - max(self._windows)):  # no window reaches it
            if name in self._loads:
                self._loads[name].anchor(None)
        for name, load in self._loads.items():
            self.curves.feed(self.epochs, name, load.whole_row)
        self._epochs_view = self.epochs.view()
        for epochs in self._epochs_view:
            lean = self._loads.get(epochs.model)
            if (
                lean is not None
                and lean.lean
                and any(e.speculation is False for e in epochs.epochs)
            ):
                # Its own past without speculation can be its baseline (the history basis):
                # whole while it runs without speculation, its rows laid out again exactly.
                lean.make_whole()
        for model in kept:
            models.append(view := self._model_view(model, withheld=rejected))
            events.extend(self._margin_events(view))
        models.extend(self._plain_view(model) for model in plain)
        events.extend(self._rejection_events(rejected))
        # Per-class figures (a tap, SGLang's custom labels): specmon.daemon.class_view.
        classes = observe_classes(
            self._classes, reading, models, mono=mono, windows=self._windows, config=self.config
        )
        message = reading.message
        if not models and rejected and reading.speculation:
            message = "every speculative-decoding reading was refused: " + "; ".join(
                str(r) for r in rejected[:3]
            )

        self.view = TargetView(
            name=self.config.name,
            url=was.url,
            labels=dict(self.config.labels),
            engine=reading.engine,
            up=True,
            scraped=True,
            last_duration=duration,
            last_success=wall,
            speculation=speculation,
            message=message,
            notes=reading.notes,
            malformed=reading.malformed,
            models=tuple(models),
            rejected=tuple(rejected),
            baseline=self.config.baseline,
            baseline_check=self._answers.twin_check,
            baseline_for=baseline_for,
            epochs=self._epochs_view,
            changes=self.changes.update(
                ((c.model, c.before.number, c.after.number), c)
                for c in self.curves.changes(self._epochs_view)
            ),
            classes=classes,
        )
        return events

    def mark(self, *, wall: float, note: str, model: str | None = None) -> list[Epoch]:
        """An operator's mark of a configuration change (a new draft model): new epochs."""
        marked = self.epochs.mark(wall=wall, note=note, model=model)
        if marked:
            self._epochs_view = self.epochs.view()
            self.view = replace(self.view, epochs=self._epochs_view)
        return marked

    def _rejection_events(self, rejected: list[Rejection]) -> list[Event]:
        """Log each refused reading once, when its (model, reason) first appears, and say when
        every refusal has cleared."""
        keys = frozenset((r.model, r.reason.value) for r in rejected)
        previous, self._rejected_keys = self._rejected_keys, keys
        events = [
            Event(
                "warning",
                "reading_rejected",
                {"model": r.model, "reason": r.reason.value, "detail": r.detail},
            )
            for r in rejected
            if (r.model, r.reason.value) not in previous
        ]
        if previous and not keys:
            events.append(Event("info", "readings_accepted_again", {}))
        return events

    def _record_load(
        self, model: ModelReading, mono: float, refused: list[Rejection], *, lag: float
    ) -> bool:
        """Add one model's load series to its load history; False when it has none. An
        interval that breaks the laws of :mod:`specmon.load.laws` is left out, its reason
        added to ``refused`` (the load alone: the acceptance figures stand)."""
        counters = load_counters(model.context, model.counters)
        if counters is None:
            return False
        history = self._loads.get(model.model)
        if history is None:
            cfg = self.config
            # Lean rows while nothing compares this target (to save memory); a reload
            # that gives it a baseline, or a target that takes it as its twin, makes the
            # history whole at its first window (specmon.load.LoadHistory).
            lean = cfg.baseline is None and cfg.cost_profile is None
            history = self._loads[model.model] = LoadHistory(
                retention=self._retention, lean=lean, curve_retention=self._curve_retention
            )
        history.add(mono, counters, lag=lag)
        if history.refusal is not None:
            reason, detail = history.refusal
            refused.append(Rejection(model.model, reason, f"load: {detail}", whole_model=False))
        return True

    def load_model(self, model: str) -> str | None:
        """The model whose load a target comparing ``model`` with this one reads: the same
        name, else this target's only model (None: neither)."""
        if model in self._loads:
            return model
        return next(iter(self._loads)) if len(self._loads) == 1 else None

    def load_window(self, model: str, seconds: float) -> LoadWindow | None:
        """This target's load over the last ``seconds`` for ``model`` (or its only model:
        llama.cpp names none), for a target that uses this one as its baseline."""
        found = self.load_model(model)
        return self._loads[found].window(seconds) if found is not None else None

    def configuration(self, model: str) -> int | None:
        """Its chain length for ``model`` (or its only model) now, for a canary of its group
        (specmon.answer.canary): 0 without speculation, -1 speculating with k unknown, None
        not known (no epoch yet, not yet known to speculate or not, or a change being
        confirmed: neither the old configuration nor the new)."""
        views = self._epochs_view
        found = next((e for e in views if e.model == model), None)
        if found is None and len(views) == 1:
            found = views[0]
        if found is None or found.pending is not None:
            return None
        current = found.current
        if current.speculation is None:
            return None
        if not current.speculation:
            return 0
        return current.chain_length or -1

    def _straddle(self, model: str, seconds: float, drafts: int | None) -> Straddle | None:
        """Whether the model's window of ``seconds`` is cut at its configuration change, and
        held (specmon.daemon.window_rules: the one decision); ``drafts``: the cut window's
        (None: the model does not speculate)."""
        since = self._openings.at(model)
        if since is None or not cuts(seconds, since, end := self._reads.last):
            return None
        history, counts = self._loads.get(model), self._histories.get(model)
        found: tuple[int, float | None, float | None]
        if history is not None:
            found = history.counts(seconds, since=since)
        elif counts is not None:
            delta = counts.window(seconds, since=since)
            found = (delta.readings - 1 if delta else 0, None, None)
        elif model in self._gauges:  # a gauge reading each interval (SGLang)
            mean = self._gauges[model][0].mean(seconds, since=since)
            found = (mean[1] if mean else 0, None, None)
        else:
            return None
        return straddle(seconds=seconds, since=since, end=end,
                        change=self._openings.change(model), counts=found, drafts=drafts)  # fmt: skip

    def _answer(
        self,
        model: str,
        seconds: float,
        report: AcceptanceReport | None,
        acceptance: SpecCounters | None,
        *,
        k: int | None,
        live: LoadFigures | None,
        engine_cost: float | None,
        cut: Straddle | None,
        withheld: list[Rejection] | None,
        label: str,
    ) -> Answer | None:
        """The window's answer (specmon.daemon.answers, specmon.answer.decide)."""
        epochs = next((e for e in self._epochs_view if e.model == model), None)
        answer = self._answers.answer(
            Sources(self.config, self.twins, self._engine, self.curves), model, seconds,
            report, acceptance, history=self._loads.get(model), since=self._openings.at(model),
            epochs=epochs, k=k, live=live, engine_cost=engine_cost,
            cut=cut.text() if cut is not None else None, wall=self._wall,
        )  # fmt: skip
        if answer is not None and withheld is not None and answer.compared:
            why = next((p.reason for p in answer.per_load
                        if p.reason and p.reason.startswith("withheld: ")), None)  # fmt: skip
            if why is not None:
                withhold(withheld, model, RejectReason.SPEEDUP_ABOVE_BOUND,
                         f"{label}: {why[len('withheld: '):]}")  # fmt: skip
        return answer

    def _live(
        self, model: str, seconds: float, acceptance: SpecCounters | None, k: int | None
    ) -> LoadFigures | None:
        return live_figures(self._loads.get(model), seconds, since=self._openings.at(model),
                            acceptance=acceptance, chain_length=k)  # fmt: skip

    def _plain_view(self, model: ModelReading) -> ModelView:
        """A model without speculation (a baseline server): its load and speed per window."""
        windows = []
        for seconds in self._windows:
            cut = self._straddle(model.model, seconds, None)
            load = None if cut and cut.held else self._live(model.model, seconds, None, None)
            windows.append(WindowView(format_duration(seconds), seconds, None, None, None,
                                      load=load, straddle=cut))  # fmt: skip
        return ModelView(
            model=model.model,
            basis=basis(draft_cost=self.config.draft_cost),
            totals_drafts=None,
            totals_draft_tokens=None,
            totals_accepted=None,
            resets=0,
            windows=tuple(windows),
            requests_running=model.context.requests_running,
            speculating=False,
        )

    def _record(self, model: ModelReading, mono: float) -> tuple[list[Event], Rejection | None]:
        """Add one model's reading to its history; a refused reading comes back as a
        Rejection (its figures are left out of this scrape)."""
        gauges = model.gauges
        length = gauges.mean_acceptance_length if gauges is not None else None
        # k: the configured chain_length, else the k the engine publishes (SGLang's
        # spec_num_steps, TensorRT-LLM's spec_num_tokens); the adapters' largest is
        # validation's range.
        k = chain_bound(configured=self.config.chain_length, detected=model.chain_length,
                        adapter_max=None)  # fmt: skip
        why = None if length is None else acceptance_length_refusal(length, chain_length=k)
        if why is not None:
            assert gauges is not None
            model = replace(model, gauges=replace(gauges, mean_acceptance_length=None))
            source = "configured" if self.config.chain_length else "the engine's k"
            refusal = Rejection(
                model.model, RejectReason.LENGTH_ABOVE_CHAIN, f"{why} ({source})", False
            )
            events, other = self._record(model, mono)
            return events, other or refusal
        if model.counters is not None:
            history = self._histories.get(model.model)
            if history is None:
                history = self._histories[model.model] = CounterHistory(retention=self._retention)
            observation = history.add(
                mono, model.counters, generated_tokens=model.context.generation_tokens
            )
            if observation.partial_decrease:
                return [], Rejection(model.model, RejectReason.PARTIAL_DECREASE, observation.reason)
            if observation.inconsistent is not None:
                # The reading stays (the next interval starts from it); the interval does not.
                return [], Rejection(
                    model.model, observation.inconsistent, observation.reason, whole_model=False
                )
            overhead = model.gauges.draft_overhead if model.gauges is not None else None
            # 0 means the engine timed no drafter in that iteration (one-model speculation, or
            # an iteration without drafts): not a measurement, so it is not averaged in.
            if overhead is not None and overhead > 0:
                self._overheads.setdefault(
                    model.model, GaugeHistory(retention=self._retention)
                ).add(mono, overhead)
            length = model.gauges.mean_acceptance_length if model.gauges is not None else None
            if length is not None and not model.counters.knows("drafts"):
                self._lengths.setdefault(model.model, GaugeHistory(retention=self._retention)).add(
                    mono, length
                )
            if observation.reset:
                return [Event("warning", "counter_reset", {"model": model.model})], None
            if observation.reason and observation.accepted:
                return [
                    Event(
                        "info",
                        "counter_source_changed",
                        {"model": model.model, "reason": observation.reason},
                    )
                ], None
            return [], None
        gauges = model.gauges
        if gauges is not None and gauges.scope is not GaugeScope.LIFETIME:
            length_h, rate_h = self._gauges.setdefault(
                model.model,
                (GaugeHistory(retention=self._retention), GaugeHistory(retention=self._retention)),
            )
            if gauges.mean_acceptance_length is not None:
                length_h.add(mono, gauges.mean_acceptance_length)
            if gauges.acceptance_rate is not None:
                rate_h.add(mono, gauges.acceptance_rate)
        return [], None

    def _model_view(
        self, model: ModelReading, *, withheld: list[Rejection] | None = None
    ) -> ModelView:
        """Figures for one model from its history and the current settings (no recording).
        A window whose figures the engine's rounding makes too imprecise, or that fall
        outside their physical range, gets none; ``withheld`` collects why (once a model)."""
        if model.counters is None:
            assert model.gauges is not None
            return replace(
                self._gauge_view(model.model, model.gauges, model.chain_length),
                requests_running=model.context.requests_running,
            )
        cfg = self.config
        history = self._histories[model.model]
        # Detected k: the page's position series or the k the engine publishes, or (after a
        # restart, before llama.cpp republishes them) the most any retained reading had.
        detected = detected_chain_length(model) or history.max_positions()
        model_basis = basis(
            draft_cost=cfg.draft_cost,
            configured_chain_length=cfg.chain_length,
            detected_chain_length=detected,
        )
        overhead: float | None = None
        overheads = self._overheads.get(model.model)
        since = self._openings.at(model.model)
        if overheads is not None:
            mean = overheads.mean(self._primary_seconds, since=since)
            overhead = mean[0] if mean else None
        engine_cost = engine_draft_cost(
            SpecGauges(scope=GaugeScope.ENGINE, draft_overhead=overhead),
            chain_length=model_basis.chain_length,
        )
        windows = []
        for seconds in self._windows:
            label = format_duration(seconds)
            delta = history.window(seconds, since=since)
            knows = model.counters.knows("drafts")
            cut = self._straddle(
                model.model, seconds, (delta.drafts if delta else 0) if knows else None
            )
            if delta is None:
                windows.append(WindowView(label, seconds, None, None, None, straddle=cut))
                continue
            counters = delta.as_counters()
            lengths = self._lengths.get(model.model)
            length = lengths.mean(seconds, since=since) if lengths is not None else None
            report = (
                report_from_counters(
                    counters,
                    draft_cost=cfg.draft_cost,
                    configured_chain_length=cfg.chain_length,
                    detected_chain_length=detected,
                    engine_acceptance_length=length[0] if length else None,
                )
                if has_data(counters)
                else None
            )
            if report is not None:
                why = why_withheld(delta, report) or self._reads.sparse(seconds)
                if why is not None:
                    report = None
                    if withheld is not None:
                        withhold(withheld, model.model, why[0], f"{label}: {why[1]}")
            speculating = counters if has_data(counters) else None
            k = model_basis.chain_length
            answer: Answer | None = None
            if cut is not None and cut.held is not None:  # too little of the new configuration
                report = load = None
            else:
                load = self._live(model.model, seconds, speculating, k)
                answer = self._answer(
                    model.model,
                    seconds,
                    report,
                    speculating,
                    k=k,
                    live=load,
                    engine_cost=engine_cost,
                    cut=cut,
                    withheld=withheld,
                    label=label,
                )
            windows.append(
                WindowView(
                    label, seconds, delta.seconds,
                    delta.drafts if counters.knows("drafts") else None,
                    report, delta.readings, delta.generated_tokens,
                    load=load, answer=answer, straddle=cut,
                )
            )  # fmt: skip
        totals = history.totals()
        return ModelView(
            model=model.model,
            basis=model_basis,
            totals_drafts=totals.drafts if totals and totals.knows("drafts") else None,
            totals_draft_tokens=(
                totals.draft_tokens if totals and totals.knows("draft_tokens") else None
            ),
            totals_accepted=totals.accepted_tokens if totals else None,
            resets=history.resets,
            windows=tuple(windows),
            requests_running=model.context.requests_running,
            engine_draft_cost=engine_cost,
            engine_draft_overhead=overhead,
        )

    @property
    def _primary_seconds(self) -> float:
        return self._windows[len(self._windows) // 2]

    def _gauge_view(
        self, model: str, gauges: SpecGauges, chain_length: int | None = None
    ) -> ModelView:
        cfg = self.config
        windows: list[WindowView] = []
        if gauges.scope is GaugeScope.LIFETIME:
            report = report_from_gauges(
                gauges,
                draft_cost=cfg.draft_cost,
                configured_chain_length=cfg.chain_length,
                detected_chain_length=chain_length,
            )
            setting = Setting(cfg.draft_cost, cfg.draft_cost_configured)
            windows.append(WindowView("lifetime", 0.0, None, None, report,
                                      answer=decide(report, setting=setting)))  # fmt: skip
            model_basis = report.basis
        else:
            length_h, rate_h = self._gauges[model]
            since = self._openings.at(model)
            for seconds in self._windows:
                length = length_h.mean(seconds, since=since)
                rate = rate_h.mean(seconds, since=since)
                averaged = SpecGauges(
                    scope=gauges.scope,
                    mean_acceptance_length=length[0] if length else None,
                    acceptance_rate=rate[0] if rate else None,
                )
                report = report_from_gauges(
                    averaged,
                    draft_cost=cfg.draft_cost,
                    configured_chain_length=cfg.chain_length,
                    detected_chain_length=chain_length,
                )
                cut = self._straddle(model, seconds, None)
                if cut is not None and cut.held is not None:
                    report = None
                judged = decide(report, setting=Setting(cfg.draft_cost, cfg.draft_cost_configured),
                                cut=cut.text() if cut is not None else None)  # fmt: skip
                windows.append(WindowView(format_duration(seconds), seconds, None, None, report,
                                          answer=judged, straddle=cut))  # fmt: skip
            model_basis = basis(
                draft_cost=cfg.draft_cost,
                configured_chain_length=cfg.chain_length,
                detected_chain_length=chain_length,
            )
        return ModelView(
            model=model,
            basis=model_basis,
            totals_drafts=None,
            totals_draft_tokens=None,
            totals_accepted=None,
            resets=0,
            windows=tuple(windows),
        )

    def _margin_events(self, view: ModelView) -> list[Event]:
        window = view.window(self.primary_window) or (view.windows[0] if view.windows else None)
        if window is None or window.report is None or window.report.alpha_margin is None:
            return []
        margin = window.report.alpha_margin
        sign = 1 if margin >= 0 else -1
        previous = self._margin_sign.get(view.model)
        self._margin_sign[view.model] = sign
        if previous is None or previous == sign:
            return []
        fields = {
            "model": view.model,
            "window": window.window,
            "alpha": round(window.report.alpha or 0.0, 4),
            "breakeven": round(view.basis.breakeven_alpha or 0.0, 4),
            "margin": round(margin, 4),
        }
        if sign < 0:
            return [Event("warning", "margin_below_breakeven", fields)]
        return [Event("info", "margin_above_breakeven", fields)]


def _engine_name(engine: Engine | None) -> str:
    return engine.value if engine is not None else "unknown"
