"""From a measurement to a load profile and to the crossover line of the table. Pure.

The profile (``specmon measure --profile-out FILE``, format in docs/measure.md) holds, per
concurrency level, both servers' step time and time per output token from their own counters,
the speculative server's acceptance, and the draft cost they imply; :mod:`specmon.load` reads
it back, interpolates between levels and finds the crossover at any acceptance.
"""

from __future__ import annotations

from typing import Any

from specmon import __version__
from specmon.load import (
    PROFILE_VERSION,
    Crossover,
    Profile,
    ProfileLevel,
    ProfileSide,
    crossover,
)
from specmon.measure.analysis import Level, MeasureReport

__all__ = ["build_profile", "crossover_line", "report_crossover"]


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
    """The profile of a measurement: one entry per concurrency level (all workloads)."""
    levels: list[ProfileLevel] = []
    for level in report.levels:
        row = level.summary
        spec = level.load.speculative
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


def report_crossover(report: MeasureReport) -> Crossover | None:
    """The crossover of the measured speed ratios (tokens/s with the draft / without, all
    workloads) over the levels, by the level's concurrency."""
    points = [
        (float(lv.concurrency), lv.summary.speed_ratio)
        for lv in report.levels
        if lv.summary.speed_ratio is not None
    ]
    return crossover((n, s) for n, s in points if s is not None)


def _n(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def crossover_line(report: MeasureReport) -> str | None:
    """ "speculation pays up to concurrency N, costs X % from M", or what holds instead;
    None when no level has a speed ratio."""
    ratios = [lv.concurrency for lv in report.levels if lv.summary.speed_ratio is not None]
    if not ratios:
        return None
    low, high = min(ratios), max(ratios)
    found = report_crossover(report)
    if found is None:
        if low == high:
            return f"speculation pays at concurrency {low} (the only level measured)"
        return f"speculation pays at every measured concurrency ({low} to {high})"
    if found.pays_up_to is None:
        return (
            f"speculation does not pay at any measured concurrency: it costs "
            f"{found.cost_percent:.0f} % from {_n(found.costs_from)}, the lowest measured"
        )
    return (
        f"speculation pays up to concurrency {_n(found.concurrency)}, costs "
        f"{found.cost_percent:.0f} % from {_n(found.costs_from)}"
    )
