"""From a measurement to a load profile and to the crossover line of the table. Pure.

The profile (``specmon measure --profile-out FILE``, format in docs/measure.md) holds, per
concurrency level, both servers' step time and time per output token from their own counters,
the speculative server's acceptance, and the draft cost they imply; :mod:`specmon.load` reads
it back, interpolates between levels and finds the crossover at any acceptance.
"""

from __future__ import annotations

from typing import Any

from specmon import __version__
from specmon.answer import Crossover, crossover, profile_crossover
from specmon.load import (
    PROFILE_VERSION,
    Profile,
    ProfileLevel,
    ProfileSide,
)
from specmon.measure.analysis import Level, MeasureReport

__all__ = ["build_profile", "crossover_line", "crossover_points", "report_crossover"]


def _side(level: Level, *, speculative: bool) -> ProfileSide:
    row = level.summary
    load = level.load.speculative if speculative else level.load.baseline
    summary = row.speculative if speculative else row.baseline
    return ProfileSide(
        time_per_output_token_seconds=load.time_per_output_token_seconds if load else None,
        step_seconds=load.step_seconds if load else None,
        tokens_per_second=summary.tokens_per_second,
        concurrency=load.concurrency if load else None,
        engine_steps=load.engine_steps if load else None,
    )


def build_profile(report: MeasureReport) -> Profile:
    """The profile of a measurement: one entry per concurrency level that held its load (all
    workloads); rates and levels not held are left out (:mod:`specmon.measure.levels`)."""
    levels: list[ProfileLevel] = []
    for level in report.held_levels:
        row = level.summary
        spec = level.load.speculative
        assert level.concurrency is not None
        levels.append(
            ProfileLevel(
                concurrency=level.concurrency,
                baseline=_side(level, speculative=False),
                speculative=_side(level, speculative=True),
                tokens_per_step=spec.tokens_per_step if spec else None,
                drafted_per_step=spec.drafted_per_step if spec else None,
                acceptance=row.acceptance.counters,
                speed_ratio=row.speed_ratio,
                draft_cost_from_steps=level.load.draft_cost,
                draft_cost_from_speed=row.breakeven.implied_draft_cost if row.breakeven else None,
            )
        )
    chain = max(
        (len(lv.acceptance.accepted_per_position) for lv in levels if lv.acceptance), default=0
    )
    meta: dict[str, Any] = {
        "tool": "specmon measure",
        "specmon_version": __version__,
        "started": report.started,
        "finished": report.finished,
        "baseline": {"url": report.baseline.base_url, **report.baseline_info.as_dict()},
        "speculative": {"url": report.speculative.base_url, **report.speculative_info.as_dict()},
        "settings": report.settings.as_dict(),
        "warnings": list(report.warnings),
        "levels_not_held": [lv.concurrency for lv in report.levels if lv.not_held],
    }
    return Profile(
        version=PROFILE_VERSION,
        levels=tuple(levels),
        model=report.settings.model,
        engine=report.speculative_info.engine,
        chain_length=chain or None,
        created=report.finished,
        meta=meta,
    )


def crossover_points(report: MeasureReport) -> tuple[list[tuple[float, float]], str]:
    """The (concurrency, speed-up) points the crossover is read from, and what they are.

    Only the concurrency levels that held their load (rates have no level to stand at).
    Where every such level has both servers' counters: the realized speed-up (TPOT without /
    with the draft) at the speculative engine's measured concurrency, which is where its cost
    was paid. Otherwise: the tokens/s ratio of the table at the level's concurrency."""
    held = report.held_levels
    counted = [
        (lv.load.speculative.concurrency, lv.load.realized_speedup)
        for lv in held
        if lv.load.speculative is not None
    ]
    if counted and len(counted) == len(held):
        points = [(n, s) for n, s in counted if n is not None and s is not None]
        if len(points) == len(held):
            return points, "realized speed-up from the servers' counters, by engine concurrency"
    ratios = [
        (float(lv.concurrency or 0), lv.summary.speed_ratio)
        for lv in held
        if lv.summary.speed_ratio is not None
    ]
    return [(n, s) for n, s in ratios if s is not None], "tokens/s ratio, by requests in flight"


_COUNTED = "the cost curve of both servers' step times, by engine concurrency"


def report_crossover(report: MeasureReport) -> Crossover | None:
    """The crossover of a measurement: where every level has both servers' counters, the
    cost curve of its profile (:func:`specmon.answer.profile_crossover`: the function the
    daemon and ``specmon recommend --profile`` read theirs with); else through the tokens/s
    ratios of the table (:func:`crossover_points`)."""
    points, basis = crossover_points(report)
    if basis.startswith("realized"):
        return profile_crossover(build_profile(report))
    return crossover(points)


def _n(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def crossover_line(report: MeasureReport) -> str | None:
    """ "speculation pays up to concurrency N, costs X % from M", or what holds instead, and
    what it was read from; None when no level has a speed-up."""
    points, basis = crossover_points(report)
    left_out = [str(lv.concurrency) for lv in report.levels if lv.not_held]
    if not points:
        if left_out:
            return (
                "none: no concurrency level held its load "
                f"(concurrency {', '.join(left_out)} left out, not held)"
            )
        return None
    if basis.startswith("realized"):
        basis = _COUNTED
    low, high = min(n for n, _ in points), max(n for n, _ in points)
    found = report_crossover(report)
    if found is None:
        if len(points) == 1:
            text = f"speculation pays at concurrency {_n(low)} (the only level measured)"
        else:
            text = f"speculation pays at every measured concurrency ({_n(low)} to {_n(high)})"
    elif found.pays_up_to is None:
        text = (
            f"speculation does not pay at any measured concurrency: it costs "
            f"{found.cost_percent:.0f} % from {_n(found.costs_from)}, the lowest measured"
        )
    else:
        text = (
            f"speculation pays up to concurrency {found.concurrency:.1f}, costs "
            f"{found.cost_percent:.0f} % from {_n(found.costs_from)}"
        )
    if left_out:
        text += f"; concurrency {', '.join(left_out)} left out, not held"
    return f"{text} ({basis})"
