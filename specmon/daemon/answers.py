"""What one window's answer rests on, gathered from a target's state, and the answer
(:func:`specmon.answer.decide`): the window's live load, its comparison with the baseline
(the twin, checked before it is believed; the cost profile; the server's own past without
speculation), and the last answer with a number per window, which a new load's ``measuring``
answer names. No I/O; the decision itself is the answer layer's."""

from __future__ import annotations

from specmon.answer import (
    Answer,
    Comparison,
    Earlier,
    Evidence,
    ReadState,
    Refusal,
    Setting,
    decide,
    read_comparison,
    read_concurrency,
)
from specmon.daemon.config import TargetConfig
from specmon.daemon.epoch_curves import EpochCurves
from specmon.daemon.twins import TwinCheck, Twins
from specmon.daemon.views import LoadFigures
from specmon.engines import Engine, SpecCounters
from specmon.load import LoadHistory, LoadWindow, Profile, Speeds
from specmon.records import record
from specmon.report import AcceptanceReport
from specmon.state.epochs import ModelEpochs

__all__ = ["Sources", "WindowAnswers", "draft_length", "live_figures"]

#: Mean drafted tokens per draft this far below k means the engine varies its draft length.
_VARIABLE_DRAFT = 0.95


def live_figures(
    history: LoadHistory | None,
    seconds: float,
    *,
    since: float | None,
    acceptance: SpecCounters | None,
    chain_length: int | None,
) -> LoadFigures | None:
    """The window's live load figures (None: the model has no load series)."""
    if history is None:
        return None
    return live_load_figures(
        history.speeds(seconds, since=since), acceptance=acceptance, chain_length=chain_length,
        mean_running=history.mean_running(seconds, since=since),
        latest=history.latest_concurrency,
    )  # fmt: skip


@record
class Sources:
    """Where one target's windows find what they are compared with."""

    config: TargetConfig
    twins: Twins | None
    engine: Engine | None
    curves: EpochCurves


class WindowAnswers:
    """One target's answers: each window's evidence gathered and decided, and per (model,
    window) the last answer with a number on a comparison basis, shown while a new load is
    measured (and what says the target has measured evidence: no guess in its place)."""

    __slots__ = ("_earlier", "twin_check")

    def __init__(self) -> None:
        self._earlier: dict[tuple[str, float], Earlier] = {}
        #: The twin's check at this scrape (the first refusal of any model and window).
        self.twin_check: TwinCheck | None = None

    def clear(self) -> None:
        self._earlier.clear()

    def keep(self, models: set[str]) -> None:
        """Forget the models not in ``models``."""
        for stale in [key for key in self._earlier if key[0] not in models]:
            del self._earlier[stale]

    def answer(
        self,
        sources: Sources,
        model: str,
        seconds: float,
        report: AcceptanceReport | None,
        acceptance: SpecCounters | None,
        *,
        history: LoadHistory | None,
        since: float | None,
        epochs: ModelEpochs | None,
        k: int | None,
        live: LoadFigures | None,
        engine_cost: float | None,
        cut: str | None,
        wall: float,
    ) -> Answer | None:
        """The window's answer, and the last one with a number kept."""
        comparison: Comparison | None = None
        refused: tuple[Refusal, ...] = ()
        if acceptance is not None and report is not None and history is not None:
            survival = tuple(p.survival for p in report.positions if p.survival is not None)
            if len(survival) != len(report.positions):
                survival = ()
            comparison, refused = self._compare(
                sources, model, seconds, acceptance, history=history, since=since,
                epochs=epochs, survival=survival, k=k, live=live,
            )  # fmt: skip
        key = (model, seconds)
        cfg = sources.config
        at = None
        if live is not None:
            at = live.latest if live.latest is not None else live.concurrency
        answer = decide(
            report,
            setting=Setting(cfg.draft_cost, cfg.draft_cost_configured, engine_cost),
            comparison=comparison, refused=refused, measured_before=self._earlier.get(key),
            mean_concurrency=live.mean_running if live is not None else None, at=at, cut=cut,
            counts=acceptance,
        )  # fmt: skip
        if (
            answer is not None
            and answer.compared
            and answer.speedup is not None
            and answer.state is not ReadState.MEASURING
        ):
            self._earlier[key] = Earlier(
                answer.concurrency, answer.bucket, answer.speedup, answer.interval, wall
            )
        elif comparison is None and not refused:
            self._earlier.pop(key, None)  # nothing to compare with any more
        return answer

    def _compare(
        self,
        sources: Sources,
        model: str,
        seconds: float,
        acceptance: SpecCounters,
        *,
        history: LoadHistory,
        since: float | None,
        epochs: ModelEpochs | None,
        survival: tuple[float, ...],
        k: int | None,
        live: LoadFigures | None,
    ) -> tuple[Comparison | None, tuple[Refusal, ...]]:
        """The window against its baseline, best first: the twin (checked before it is
        believed: specmon.daemon.twins), the group's members without speculation (a canary:
        specmon.answer.canary), the cost profile, the server's own past without
        speculation; and the better bases refused, with why."""
        cfg = sources.config
        refused: list[Refusal] = []
        base: LoadWindow | Profile | None = None
        basis, name, detail = Evidence.TWIN, cfg.baseline or "", None
        notes: tuple[str, ...] = ()
        if cfg.baseline is not None:
            twin, check = None, None
            if sources.twins is not None:
                twin, check = sources.twins.baseline(
                    cfg.baseline, model, seconds, engine=sources.engine, configured=cfg.model
                )
            if check is not None and (self.twin_check is None or self.twin_check.usable):
                self.twin_check = check
            if check is not None and not check.usable:
                refused.append(Refusal(Evidence.TWIN, check.detail or check.reason))
            elif twin is None:
                refused.append(Refusal(Evidence.TWIN, "no data from the twin yet"))
            else:
                base = twin
                notes = (check.detail,) if check is not None and check.detail else ()
        if base is None and sources.twins is not None and cfg.group and acceptance.drafts > 0:
            # The group's members still without speculation (a rollout, a canary): a live
            # twin, pooled (specmon.answer.canary decides; an explicit baseline: ranks above).
            found = sources.twins.canary(
                cfg.name, model, seconds, k=k, engine=sources.engine, configured=cfg.model
            )
            if isinstance(found, Refusal):
                refused.append(found)
            elif found is not None:
                base, basis, name, detail = found.window, Evidence.CANARY, "canary", found.words
                notes = found.notes
        if base is None and cfg.cost_profile is not None:
            base, basis, name = cfg.cost_profile, Evidence.PROFILE, "profile"
        if base is None:
            past = sources.curves.past(epochs)
            if past is not None:
                base, basis, name, detail = past.window, Evidence.HISTORY, "history", past.detail
        if base is None:
            return None, tuple(refused)
        window = history.window(seconds, since=since)
        at = read_concurrency(
            latest=window.latest.concurrency if window.latest is not None else None,
            window=live.concurrency if live is not None else None,
        )
        drafted = live.mean_draft_length if live is not None else None
        read = read_comparison(
            window, base=base, acceptance=acceptance, survival=survival,
            drafted_per_draft=drafted, chain_length=k, at=at, memo=history.memo(seconds),
        )  # fmt: skip
        return Comparison(basis, name, read, detail, notes), tuple(refused)


def live_load_figures(
    speeds: Speeds | None,
    *,
    acceptance: SpecCounters | None,
    chain_length: int | None,
    mean_running: float | None = None,
    latest: float | None = None,
) -> LoadFigures | None:
    """The figures of one window from what :meth:`LoadHistory.speeds
    <specmon.load.LoadHistory.speeds>` reads off its sums (None when the window has no load
    data); ``acceptance``: its speculative counters (None: a server that does not
    speculate)."""
    if speeds is None:
        return None
    concurrency, step_seconds, tpot = speeds
    mean_draft, notes = draft_length(acceptance, chain_length)
    return LoadFigures(concurrency, step_seconds, tpot, mean_draft, notes, mean_running, latest)


def draft_length(
    acceptance: SpecCounters | None, chain_length: int | None
) -> tuple[float | None, tuple[str, ...]]:
    """Drafted tokens per draft, and the note when it is below k (the engine varies it)."""
    if acceptance is None or acceptance.drafts <= 0 or not acceptance.knows("draft_tokens"):
        return None, ()
    mean_draft = acceptance.draft_tokens / acceptance.drafts
    if chain_length and mean_draft < _VARIABLE_DRAFT * chain_length:
        return mean_draft, (
            f"drafts carry {mean_draft:.2f} tokens on average with k = {chain_length}: the "
            "engine varies its draft length (n-gram misses, dynamic speculation), so "
            "survival at deep positions understates their conditional acceptance; the "
            "expected speed-up charges the drafted tokens, not k",
        )
    return mean_draft, ()
