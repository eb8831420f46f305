"""The daemon's load-aware figures against ``specmon measure`` on the same traffic:
shared by the real llama.cpp and vLLM tests (test_load_daemon.py, test_vllm_load_daemon.py).

``specmon measure`` drives a speculating server and its twin without speculation, one level
at a time (per level, the same requests through the baseline and then the speculative
server); ``specmon run`` watches both, the speculative target configured with ``baseline:``
the twin. For every level there are then two measurements of the same requests: measure's
(the client's tokens/s ratio, an independent clock; the step-time draft cost from both
servers' counters around each run; the draft cost the tokens/s ratio implies) and the
daemon's (its scrape intervals bucketed by the engine's own concurrency, bucket against the
twin's bucket). :func:`check_levels` holds one to the other.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specmon.cli.main import main
from specmon.load import DEFAULT_SCHEME, ProfileLevel, profile_from_json
from specmon.measure.analysis import EXIT_NOT_HELD
from tests.support.daemon import Daemon, Exported

#: The issue's tolerance for the realized speed-up against an independent A/B measurement.
SPEEDUP_AGREEMENT = 0.15


def c_tolerance(level: ProfileLevel, ratio_agreement: float) -> float:
    """The draft cost c that a relative error ``ratio_agreement`` in a speed (or step-time)
    ratio amounts to. c = (r - 1) / k̄ with r = 1 + k̄ c the step-time ratio (or K / R for the
    implied c, R the speed ratio), so an error e in r is e r / k̄ in c."""
    drafted = level.drafted_per_step
    cost = level.draft_cost_from_steps
    assert drafted is not None and drafted > 0 and cost is not None
    return ratio_agreement * (1.0 + drafted * cost) / drafted


def hand_crossover(points: Sequence[tuple[float, float]]) -> tuple[float, bool] | None:
    """(concurrency, paid below it) where the speed-up first falls to 1, linear between
    measured points, never outside them (written out here, independently of specmon.load);
    None when it pays at every point."""
    ordered = sorted(points)
    for i, (n, s) in enumerate(ordered):
        if s <= 1.0:
            if i == 0:
                return n, False
            n0, s0 = ordered[i - 1]
            return n0 + (s0 - 1.0) * (n - n0) / (s0 - s), True
    return None


def run_measure_level(
    argv: list[str], profile_out: Path, *, not_held: bool = False
) -> ProfileLevel | None:
    """``specmon measure`` (in-process) at one level; its profile's level. A level measure
    flags as not held (its engines' concurrency below 80 % of it: docs/measure.md) has no
    profile: None when ``not_held`` allows it, else the test fails saying so."""
    code = main([*argv, "--no-progress", "--profile-out", str(profile_out)])
    if code == EXIT_NOT_HELD:
        if not_held:
            return None
        pytest.fail(f"measure did not hold the level ({argv}): see its output above")
    assert code == 0
    profile = profile_from_json(json.loads(profile_out.read_text()))
    assert len(profile.levels) == 1
    level: ProfileLevel = profile.levels[0]
    return level


def scraped_after(d: Daemon, targets: Sequence[str], wall: float) -> Exported | None:
    """The daemon's /metrics once every target has been scraped after ``wall``."""
    m = d.metrics()
    for name in targets:
        last = m.value("specmon_last_success_timestamp_seconds", target=name)
        if last is None or last <= wall:
            return None
    return m


def bucket_reason(
    d: Daemon, level: ProfileLevel, *, target: str, baseline: str, window: str, after: float
) -> str | None:
    """Why the daemon's bucket at ``level``'s concurrency has no figures (None: it has), once
    both targets have been scraped after the wall time ``after``."""
    d.wait_for(lambda: scraped_after(d, (target, baseline), after), timeout=20)
    concurrency = level.speculative.concurrency
    if concurrency is None:
        return "measure gave no concurrency"
    model = d.targets()[target]["models"][0]
    answer = next(w for w in model["windows"] if w["window"] == window)["verdict"]
    if answer is None or not answer.get("per_load"):
        return "no figures per load"
    label = DEFAULT_SCHEME.bucket_of(concurrency).label
    bucket = next((b for b in answer["per_load"] if b["label"] == label), None)
    return f"no bucket {label}" if bucket is None else bucket.get("reason")


def run_level_until_bucket(
    d: Daemon,
    argv: list[str],
    profile_out: Path,
    *,
    target: str,
    baseline: str,
    window: str,
    top_ups: int,
    say: Callable[[str], None] = print,
    not_held: bool = False,
) -> ProfileLevel | None:
    """``specmon measure`` at one level, then again (without warm-up, at most ``top_ups``
    times) while the daemon's bucket at that level says why it has no figures: a bucket asks
    for intervals and engine steps on each side, and how many a fixed number of requests gives
    depends on how fast the machine decodes. The bucket then holds every run; the level
    returned is the last run's (the same level on the same servers). Each extra run is told
    to ``say`` with the bucket's reason."""
    level = run_measure_level(argv, profile_out, not_held=not_held)
    if level is None:  # not held, and allowed: nothing to compare
        say(f"\nlevel not held, no profile: {' '.join(argv)}")
        return None
    for _ in range(top_ups):
        why = bucket_reason(
            d, level, target=target, baseline=baseline, window=window, after=time.time()
        )
        if why is None:
            break
        say(f"\nlevel {level.concurrency} again: its bucket says {why!r}")
        again = list(argv)
        again[again.index("--warmup") + 1] = "0"
        level = run_measure_level(again, profile_out)
        assert level is not None  # held before: a failure otherwise
    return level


def uncaptured(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """``print`` past pytest's capture (a test's progress notes)."""

    def say(text: str) -> None:
        with capsys.disabled():
            print(text)

    return say


def scrape_story(m: Exported, targets: Sequence[str]) -> str:
    """How the daemon's scrapes went (for a failure's message): per target its scrapes by
    result, then the governor's stretch, the achieved interval and the excused timeouts."""
    parts = []
    for name in targets:
        results = {
            dict(k)["result"]: int(v)
            for k, v in m.samples.get("specmon_scrapes_total", {}).items()
            if dict(k).get("target") == name and v
        }
        rejected = {
            dict(k)["reason"]: int(v)
            for k, v in m.samples.get("specmon_rejected_readings_total", {}).items()
            if dict(k).get("target") == name and v
        }
        parts.append(f"{name}: scrapes {results}, rejected {rejected}")
    achieved = m.samples.get("specmon_scrape_interval_achieved_seconds", {})
    parts.append(
        f"stretch {m.value('specmon_scrape_interval_stretch')}, "
        f"achieved {sorted(achieved.values())}, "
        f"excused {m.value('specmon_scrape_timeouts_excused_total')}"
    )
    return "; ".join(parts)


@dataclass(frozen=True)
class Row:
    level: ProfileLevel
    label: str
    bucket: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    rows: tuple[Row, ...]
    #: Accepted / drafted tokens over the daemon's window.
    acceptance: float
    #: The crossover computed by hand (and equal to the daemon's), None when it pays.
    crossover: tuple[float, bool] | None
    #: (concurrency, speed-up at the window's acceptance) per bucket with a cost.
    points: tuple[tuple[float, float], ...]
    #: Every bucket of the window, as /api/v1/targets gives it.
    buckets: tuple[dict[str, Any], ...] = ()


def check_levels(
    levels: Sequence[ProfileLevel],
    *,
    api: dict[str, Any],
    metrics: Exported,
    target: str,
    baseline: str,
    window: str,
    step_ratio_agreement: float,
    speedup_agreement: float = SPEEDUP_AGREEMENT,
    every_step_drafts: bool = True,
) -> Outcome:
    """Per level, the daemon's bucket of that level (by the speculative engine's concurrency
    over the level) against measure's figures:

    - the bucket has figures: each side passed specmon.load.Thresholds;
    - /metrics says what /api/v1/targets says;
    - realized speed-up within ``speedup_agreement`` of measure's tokens/s ratio;
    - c within the c that ``step_ratio_agreement`` on the step-time ratio amounts to of
      measure's step-time c (the same counters, aggregated differently), and within the c
      that ``speedup_agreement`` amounts to of the c measure's tokens/s ratio implies;
    - ``every_step_drafts=False`` (an n-gram proposer, which drafts only where it finds a
      match): the two c are not the same quantity, so only their verdicts are compared. The
      step-time c divides the step-time excess by the tokens drafted per step over *all*
      steps; measure's implied c solves R = K / (1 + k̄ c) with K and k̄ per *draft*, as if
      every step drafted. With a share f of steps drafting, the first is about 1 / f times
      the second. Both put the break-even at the same place, c = accepted / drafted tokens
      ((S + A) / (S + c T) > 1 and (D + A) / (D + c T) > 1 both mean A > c T), so each must
      say "pays" exactly when the other does, and when the realized speed-up exceeds 1
      (unless the realized speed-up is within ``speedup_agreement`` of 1, where the verdict
      is the noise's);

    and the exported crossover (read off the cost curve) lies between the same two measured
    buckets as a hand computation from the exported bucket costs at the window's acceptance,
    inside its own 95 % range."""
    model = api[target]["models"][0]
    found = next(w for w in model["windows"] if w["window"] == window)
    answer, report = found["verdict"], found["report"]
    assert answer is not None and answer["against"] == baseline, answer
    buckets = {b["label"]: b for b in answer["per_load"]}
    labels = {"target": target, "window": window, "baseline": baseline}
    rows = []
    for level in levels:
        concurrency = level.speculative.concurrency
        assert concurrency is not None, level
        label = DEFAULT_SCHEME.bucket_of(concurrency).label
        bucket = buckets.get(label)
        assert bucket is not None and bucket.get("reason") is None, (
            level.concurrency, buckets, scrape_story(metrics, (target, baseline))
        )  # fmt: skip
        realized, cost = bucket["speedup"], bucket["draft_cost"]
        assert metrics.value(
            "specmon_bucket_realized_speedup_ratio", concurrency=label, **labels
        ) == pytest.approx(realized, rel=1e-9)
        assert metrics.value(
            "specmon_bucket_draft_cost_ratio", concurrency=label, **labels
        ) == pytest.approx(cost, rel=1e-9)
        assert level.speed_ratio is not None
        assert realized == pytest.approx(level.speed_ratio, rel=speedup_agreement), (
            level.concurrency, realized, level.speed_ratio,
        )  # fmt: skip
        assert level.draft_cost_from_steps is not None
        assert level.draft_cost_from_speed is not None
        assert cost == pytest.approx(
            level.draft_cost_from_steps, abs=c_tolerance(level, step_ratio_agreement)
        ), (level.concurrency, cost, level.draft_cost_from_steps)
        if every_step_drafts:
            assert cost == pytest.approx(
                level.draft_cost_from_speed, abs=c_tolerance(level, speedup_agreement)
            ), (level.concurrency, cost, level.draft_cost_from_speed)
        else:
            acc = level.acceptance
            assert acc is not None and acc.draft_tokens > 0
            ratio = acc.accepted_tokens / acc.draft_tokens
            verdicts = (cost < ratio, level.draft_cost_from_speed < ratio, realized > 1.0)
            # Within the speed-up tolerance of break-even the verdict is the noise's.
            if abs(realized - 1.0) > speedup_agreement:
                assert len(set(verdicts)) == 1, (level.concurrency, cost, ratio, verdicts)
        rows.append(Row(level, label, bucket))

    a, d, t = report["accepted_tokens"], report["drafts"], report["draft_tokens"]
    points = tuple(
        sorted(
            (b["concurrency"], (1 + a / d) / (1 + max(b["draft_cost"], 0.0) * t / d))
            for b in buckets.values()
            if b.get("draft_cost") is not None
        )
    )
    expected = hand_crossover(points)
    exported = metrics.value("specmon_crossover_concurrency", **labels)
    crossing = answer["crossover"]
    # The crossover is read off the cost curve (both sides' step times fitted with the cost
    # model's shape, specmon.load.curve), not the straight line between the buckets' speed-ups
    # written out above: it must lie between the same two measured buckets (or be the lowest
    # one, when it never paid), inside its own 95 % range, and say what /metrics says.
    if expected is None or crossing is None:
        # Near 1 the two may disagree on whether the last bucket paid: only within the
        # speed-up tolerance of 1.
        last = max(points)[1] if points else None
        assert (expected is None) == (crossing is None) or (
            last is not None and abs(last - 1.0) <= speedup_agreement
        ), (expected, crossing, points)
    if crossing is not None and crossing["low"] is None:
        # Not read off the cost curve: the window has figures the curve does not hold. The
        # curve is refitted at the scrape a bucket of either side becomes measured
        # (specmon.load.curve.twin_curve), so it no longer lags a new level; but it leaves out
        # intervals a window keeps (a counter reset, no step time: CurveAccumulator.add_row),
        # so a window's bucket may still pass the thresholds before the curve's does. Then
        # the crossover is the straight line between the window's buckets, exactly the hand
        # computation, and no range is claimed.
        assert expected is not None, (crossing, points)
        assert exported == pytest.approx(crossing["concurrency"], rel=1e-9)
        assert crossing["concurrency"] == pytest.approx(expected[0], rel=1e-9), (crossing, points)
        assert (crossing["pays_up_to"] is not None) is expected[1], (crossing, expected)
        assert crossing["high"] is None, crossing
        assert metrics.value("specmon_crossover_lower_concurrency", **labels) is None
    elif crossing is not None:
        assert exported == pytest.approx(crossing["concurrency"], rel=1e-9)
        low, high = crossing["low"], crossing["high"]
        assert low is not None and high is not None
        assert low <= crossing["concurrency"] <= high, crossing
        if expected is not None:
            assert (crossing["pays_up_to"] is not None) is expected[1], (crossing, expected)
            if expected[1]:
                ns = sorted(n for n, _ in points)
                below = max(n for n in ns if n < expected[0])
                above = min(n for n in ns if n >= expected[0])
                tolerance = 0.05 * above  # the curve's bucket concurrency: the same intervals
                assert below - tolerance <= crossing["concurrency"] <= above + tolerance, (
                    crossing, points,
                )  # fmt: skip
            else:
                # Never paid: the lowest measured load. The curve's load of that bucket is the
                # mean of the intervals it keeps (its retention), the hand computation's the
                # window bucket's: the same bucket, not the same mean (one vLLM run: over 5 %).
                at = DEFAULT_SCHEME.bucket_of(crossing["concurrency"]).label
                assert at == DEFAULT_SCHEME.bucket_of(expected[0]).label, (crossing, expected)
    return Outcome(tuple(rows), a / t, expected, points, tuple(buckets.values()))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report_table(outcome: Outcome, write: Callable[[str], object] = print) -> None:
    """The figures side by side (shown with ``pytest -s``, and in the JSON file named by
    ``SPECMON_LOAD_REPORT`` when set)."""
    write(
        "\nlevel  bucket  engine conc.  daemon realized  measure tok/s ratio  "
        "measure realized  daemon c  measure c (steps)  c (implied)"
    )
    for row in outcome.rows:
        lv, b = row.level, row.bucket
        write(
            f"{lv.concurrency:>5}  {row.label:>6}  {b['concurrency']:>12.2f}  "
            f"{b['speedup']:>15.3f}  {lv.speed_ratio:>19.3f}  "
            f"{_num(lv.realized_speedup):>16}  {b['draft_cost']:>8.3f}  "
            f"{lv.draft_cost_from_steps:>17.3f}  {lv.draft_cost_from_speed:>11.3f}"
        )
    crossing = outcome.crossover
    where = "none (pays at every measured concurrency)"
    if crossing is not None:
        where = f"at concurrency {crossing[0]:.2f}" + (
            "" if crossing[1] else " (the lowest measured: it never pays)"
        )
    for b in outcome.buckets:
        figures = (
            f"concurrency {_num(b.get('concurrency'))}, realized {_num(b.get('speedup'))}, "
            f"c {_num(b.get('draft_cost'))}"
            if b.get("reason") is None
            else b["reason"]
        )
        write(f"  daemon bucket {b['label']}: {figures}")
    write(
        f"acceptance (accepted / drafted) {outcome.acceptance:.3f}; crossover {where}; "
        "speed-up at the window's acceptance by bucket: "
        + ", ".join(f"{n:.2f}: {s:.2f}x" for n, s in outcome.points)
    )
    path = os.environ.get("SPECMON_LOAD_REPORT")
    if path:
        record = {
            "levels": [
                {
                    "level": r.level.concurrency,
                    "bucket": r.label,
                    "daemon": r.bucket,
                    "measure": {
                        "speed_ratio": r.level.speed_ratio,
                        "realized_speedup": r.level.realized_speedup,
                        "c_steps": r.level.draft_cost_from_steps,
                        "c_implied": r.level.draft_cost_from_speed,
                        "speculative_concurrency": r.level.speculative.concurrency,
                        "baseline_concurrency": r.level.baseline.concurrency,
                    },
                }
                for r in outcome.rows
            ],
            "acceptance": outcome.acceptance,
            "crossover": outcome.crossover,
            "points": outcome.points,
            "buckets": outcome.buckets,
        }
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")
