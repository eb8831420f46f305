"""The daemon's load-aware verdict on real llama-servers (issue 13, "What it must show"): a
29 M-parameter target with a tiny draft (``--spec-synth-rates`` fixes acceptance) and its twin
without a draft (tests/realengines/load_pair.py), watched by ``specmon run`` (a subprocess)
with the speculative target configured ``baseline: llama-base``, while ``specmon measure``
drives both servers at three concurrency levels in sequence.

The traffic the daemon sees is exactly ``specmon measure``'s: per level, the same requests
through the baseline and then through the speculative server, never both at once. So for
each level there are two measurements of the same requests:

- ``specmon measure``'s: the client's tokens/s ratio (``usage`` tokens over the run's wall
  time: an independent clock) and, from both servers' counters read right before and after
  each run, the step-time draft cost; and the draft cost implied by the tokens/s ratio;
- the daemon's: the scrape intervals of its window bucketed by the engines' own concurrency,
  the speculative target's bucket against the twin's bucket of the same concurrency.

What is asserted, per level, in the daemon's bucket of that level:

- it has figures (each side passed specmon.load.Thresholds: 200 engine steps, 100 drafts);
- realized speed-up within 15 % of measure's tokens/s ratio (the issue's tolerance);
- the measured c against measure's step-time c, within the c that 8 % on the step-time ratio
  1 + k̄ c amounts to (``STEP_RATIO_AGREEMENT``), and against measure's implied c within the
  c that the issue's 15 % on the speed ratio amounts to (see :func:`c_tolerance`);
- ``specmon_crossover_concurrency`` is what the bucket costs give at the window's acceptance,
  recomputed here by hand (present exactly when some bucket's speed-up at that acceptance is
  at most 1, linearly interpolated, never outside the measured buckets).

Where the crossover falls is printed, not asserted: on a shared 2-core machine a single pass
moves with the other work (docs/measure.md). Bounded: the servers stop at the end, every
request has measure's timeout, and the levels are sized to just pass the thresholds (about
two minutes on a quiet machine, three or more while other work runs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from specmon.cli.main import main
from specmon.load import DEFAULT_SCHEME, ProfileLevel, profile_from_json
from tests.realengines.conftest import wait_target_up, write_config
from tests.realengines.load_pair import load_pair, measure_argv, write_prompts
from tests.support.daemon import Daemon, Exported, daemon

pytestmark = pytest.mark.realengine

#: (requests in flight, measure --repeats). Four prompts per repeat, 64 tokens each: with about
#: 3.1 tokens per verification step a request takes about 21 steps of the speculative
#: server, so each level gives it about 250 engine steps (the thresholds ask 200 per bucket;
#: the end of a level, when fewer requests remain, falls into a lower bucket).
LEVELS = ((1, 3), (4, 10), (16, 40))
MAX_TOKENS = 64
#: The daemon's default scrape interval. llama-server adds a request's tokens and decode time
#: to its counters when the request ends, so an interval without a finished request counts no
#: decode steps; at 16 requests a batch of 64-token requests takes 3 to 5 s, so a 5 s interval
#: nearly always holds one, and its engine steps count towards the bucket.
INTERVAL = 5.0
BASE, SPEC = "llama-base", "llama-spec"
#: The issue's tolerance for the realized speed-up against an independent A/B measurement.
SPEEDUP_AGREEMENT = 0.15
#: The daemon's bucket and measure's level hold the same counter increases, except the end of
#: a level: as the last requests finish, the engine decodes fewer at once, and the daemon puts
#: those intervals in a lower bucket (rightly: they ran at a lower concurrency) while measure's
#: level keeps them. That tail is about one batch in ten, with steps up to half as long, so the
#: step-time ratio 1 + k̄ c can differ by about 5 %; 8 % leaves room for noise.
STEP_RATIO_AGREEMENT = 0.08


def c_tolerance(level: ProfileLevel, ratio_agreement: float) -> float:
    """The draft cost c that a relative error ``ratio_agreement`` in a speed (or step-time)
    ratio amounts to. c = (r - 1) / k̄ with r = 1 + k̄ c the step-time ratio (or K / R for the
    implied c, R the speed ratio), so an error e in r is e r / k̄ in c."""
    drafted = level.drafted_per_step
    cost = level.draft_cost_from_steps
    assert drafted is not None and drafted > 0 and cost is not None
    return ratio_agreement * (1.0 + drafted * cost) / drafted


def hand_crossover(points: list[tuple[float, float]]) -> float | None:
    """The lowest concurrency at which the speed-up falls to 1, linear between measured
    points, never outside them (written out here, independently of specmon.load)."""
    ordered = sorted(points)
    for i, (n, s) in enumerate(ordered):
        if s <= 1.0:
            if i == 0:
                return n
            n0, s0 = ordered[i - 1]
            return n0 + (s0 - 1.0) * (n - n0) / (s0 - s)
    return None


def run_level(
    base: Any, spec: Any, directory: Path, level: int, repeats: int, *, first: bool
) -> ProfileLevel:
    """``specmon measure`` at one level (in-process); its profile level."""
    out = directory / f"profile-{level}.json"
    argv = measure_argv(
        base, spec, prompts_file=write_prompts(directory), levels=[level], repeats=repeats,
        max_tokens=MAX_TOKENS, profile_out=out,
    )  # fmt: skip
    if not first:
        argv[argv.index("--warmup") + 1] = "0"
    assert main([*argv, "--no-progress"]) == 0
    profile = profile_from_json(json.loads(out.read_text()))
    assert len(profile.levels) == 1
    return profile.levels[0]


def scraped_after(d: Daemon, wall: float) -> Exported | None:
    """The daemon's /metrics once both targets have been scraped after ``wall``."""
    m = d.metrics()
    for name in (BASE, SPEC):
        last = m.value("specmon_last_success_timestamp_seconds", target=name)
        if last is None or last <= wall:
            return None
    return m


def test_daemon_buckets_agree_with_measure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    levels: list[ProfileLevel] = []
    with load_pair() as (base, spec):
        config = write_config(
            tmp_path / "specmon.yml",
            [
                (BASE, base.metrics_url, {"model": "tiny-llama"}),
                (SPEC, spec.metrics_url, {"model": "tiny-llama", "baseline": BASE}),
            ],
            windows=["10m"],
            interval=f"{INTERVAL:g}s",
            timeout="3s",
        )
        with daemon(config, tmp_path) as d:
            wait_target_up(d, BASE)
            wait_target_up(d, SPEC)
            for index, (n, repeats) in enumerate(LEVELS):
                if index:
                    # One scrape interval apart: no interval of a server holds two levels.
                    time.sleep(INTERVAL + 0.5)
                levels.append(run_level(base, spec, tmp_path, n, repeats, first=index == 0))
            capsys.readouterr()
            end = time.time()
            m: Exported = d.wait_for(lambda: scraped_after(d, end), timeout=4 * INTERVAL)
            api = d.targets()

    window = next(w for w in api[SPEC]["models"][0]["windows"] if w["window"] == "10m")
    load, report = window["load"], window["report"]
    assert load["baseline"] == BASE, load
    buckets = {b["label"]: b for b in load["buckets"]}
    labels = {"target": SPEC, "window": "10m", "baseline": BASE}

    rows = []
    for level in levels:
        concurrency = level.speculative.concurrency
        assert concurrency is not None, level
        label = DEFAULT_SCHEME.bucket_of(concurrency).label
        bucket = buckets.get(label)
        assert bucket is not None and bucket["reason"] is None, (level.concurrency, bucket)
        realized, cost = bucket["realized_speedup"], bucket["draft_cost"]
        # /metrics says what /api/v1/targets says.
        exported = m.value("specmon_bucket_realized_speedup_ratio", concurrency=label, **labels)
        assert exported == pytest.approx(realized, rel=1e-9)
        assert m.value(
            "specmon_bucket_draft_cost_ratio", concurrency=label, **labels
        ) == pytest.approx(cost, rel=1e-9)
        rows.append((level, label, bucket))

        assert level.speed_ratio is not None
        assert realized == pytest.approx(level.speed_ratio, rel=SPEEDUP_AGREEMENT), (
            level.concurrency, realized, level.speed_ratio,
        )  # fmt: skip
        assert level.draft_cost_from_steps is not None
        assert level.draft_cost_from_speed is not None
        assert cost == pytest.approx(
            level.draft_cost_from_steps, abs=c_tolerance(level, STEP_RATIO_AGREEMENT)
        ), (level.concurrency, cost, level.draft_cost_from_steps)
        assert cost == pytest.approx(
            level.draft_cost_from_speed, abs=c_tolerance(level, SPEEDUP_AGREEMENT)
        ), (level.concurrency, cost, level.draft_cost_from_speed)
        # The bucket is where measure's level ran (the engine's own concurrency).
        assert bucket["concurrency"] == pytest.approx(concurrency, rel=0.1)

    # The crossover at the window's acceptance, by hand from the exported bucket costs.
    a, dr, t = report["accepted_tokens"], report["drafts"], report["draft_tokens"]
    points = [
        (b["concurrency"], (1 + a / dr) / (1 + max(b["draft_cost"], 0.0) * t / dr))
        for b in buckets.values()
        if b["draft_cost"] is not None
    ]
    expected = hand_crossover(points)
    exported_crossover = m.value("specmon_crossover_concurrency", **labels)
    if expected is None:
        assert exported_crossover is None and load["crossover"] is None
    else:
        assert exported_crossover == pytest.approx(expected, rel=1e-9)
        assert load["crossover"]["concurrency"] == pytest.approx(expected, rel=1e-9)

    with capsys.disabled():
        print(
            "\nlevel  bucket  engine conc.  daemon realized  measure tok/s ratio  daemon c  "
            "measure c (steps)  c (implied)"
        )
        for level, label, bucket in rows:
            print(
                f"{level.concurrency:>5}  {label:>6}  {bucket['concurrency']:>12.2f}  "
                f"{bucket['realized_speedup']:>15.3f}  {level.speed_ratio:>19.3f}  "
                f"{bucket['draft_cost']:>8.3f}  {level.draft_cost_from_steps:>17.3f}  "
                f"{level.draft_cost_from_speed:>11.3f}"
            )
        print(
            f"acceptance (accepted / drafted) {a / t:.3f}; crossover "
            + (f"at concurrency {expected:.2f}" if expected is not None else "none")
            + " (speed-up at the window's acceptance by bucket: "
            + ", ".join(f"{n:.2f}: {s:.2f}x" for n, s in sorted(points))
            + ")"
        )
