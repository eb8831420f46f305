"""The daemon's load-aware verdict on real llama-servers: a
29 M-parameter target with a tiny draft (``--spec-synth-rates`` fixes acceptance) and its twin
without a draft (tests/realengines/load_pair.py), watched by ``specmon run`` (a subprocess)
with the speculative target configured ``baseline: llama-base``, while ``specmon measure``
drives both servers at concurrency 1, 4 and 16 in sequence (tests/realengines/daemon_ab.py).

What is asserted, per level, in the daemon's bucket of that level (``check_levels``): it has
figures (each side passed specmon.load.Thresholds: 200 engine steps, 100 drafts); realized
speed-up within 15 % of measure's tokens/s ratio (the issue's tolerance); the measured c
within the c that 15 % on the step-time ratio 1 + k̄ c amounts to of measure's step-time c
(``STEP_RATIO_AGREEMENT``), and within the c that 15 % on the speed ratio amounts to of the c
measure's tokens/s ratio implies; and ``specmon_crossover_concurrency`` equals a hand
computation from the exported bucket costs at the window's acceptance.

And the verdict as an operator sees it (``verdict_watch``: ``/api/v1/targets`` polled once a
second while the levels run): at concurrency 1 and 4, the last verdict read during the level
(or right after it) for the level's bucket has a measured basis (``twin`` here), a 95 %
interval that holds it, and a speed-up within 15 % of measure's tokens/s ratio; the interval
is printed beside it (issue 54's "Done when").

Where the crossover falls is printed (``pytest -s``), not asserted: on a shared 2-core machine
a single pass moves with the other work (docs/measure.md). Bounded: the servers stop at the
end, every request has measure's timeout, and the levels are sized to just pass the
thresholds (about two minutes on a quiet machine, three or more while other work runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specmon.load import ProfileLevel
from tests.realengines.conftest import wait_target_up, write_config
from tests.realengines.daemon_ab import (
    check_levels,
    report_table,
    run_level_until_bucket,
    scraped_after,
    uncaptured,
)
from tests.realengines.load_pair import level_argv, load_pair, write_prompts
from tests.realengines.servers import LlamaServer
from tests.realengines.verdict_watch import (
    VerdictRow,
    VerdictWatch,
    check_verdicts,
    level_verdict,
    report_verdicts,
)
from tests.support.daemon import Daemon, Exported, daemon

pytestmark = pytest.mark.realengine

#: (requests in flight, measure --repeats). Four prompts per repeat, 64 tokens each: with about
#: 3.1 tokens per verification step a request takes about 21 steps of the speculative
#: server, so each level gives it 420-1000 engine steps (the thresholds ask 200 per bucket;
#: the end of a level, when fewer requests remain, falls into a lower bucket) and lasts at
#: least 3 of the daemon's intervals on each server (the thresholds ask 3 a side: 3 and 10
#: repeats at 1 and 4 lasted 2 intervals each, and at 1 the twin, faster without a draft at
#: this size, still lasted 2 with 6 repeats in one CI run, 2026-12-01; at 16 the twin lasted 2
#: intervals with 40 repeats in a clean-clone run the same evening, which passed an hour before;
#: at 4 the twin lasted 2 intervals with 20 repeats in a clean-clone run on a quiet machine,
#: 2026-12-02: a faster machine makes a level shorter, so the margins are now about double).
#: A level is still run again (``TOP_UPS``) while its bucket lacks figures: the number of
#: intervals a fixed number of requests gives depends on the machine (daemon_ab).
LEVELS = ((1, 16), (4, 40), (16, 56))
#: Runs added to a level at most, while its bucket lacks figures.
TOP_UPS = 2
MAX_TOKENS = 64
#: The daemon's default scrape interval. llama-server adds a request's tokens and decode time
#: to its counters when the request ends, so an interval without a finished request counts no
#: decode steps; at 16 requests a batch of 64-token requests takes 3 to 5 s, so a 5 s interval
#: nearly always holds one, and its engine steps count towards the bucket.
INTERVAL = 5.0
BASE, SPEC = "llama-base", "llama-spec"
#: The daemon's bucket and measure's level hold the same counter increases, except the end of
#: a level: as the last requests finish, the engine decodes fewer at once, and the daemon puts
#: those intervals in a lower bucket (rightly: they ran at a lower concurrency) while measure's
#: level keeps them. That tail is about one batch in ten, with steps up to half as long, so the
#: step-time ratio 1 + k̄ c can differ by about 5 %; 8 % left room for noise on a quiet
#: machine, but a clean-clone CI run (three tiers on two cores, 2026-12-07) measured c 0.446
#: against measure's 0.361 at 4 requests: the step-time ratio 10-14 % apart (by k̄ 2-4), the
#: two read minutes apart while the machine's speed moved. 15 %, the speed ratio's own.
STEP_RATIO_AGREEMENT = 0.15
#: The levels whose verdict is held to measure (issue 54); 16 is printed only: its bucket
#: fills last and its tail, while the requests finish, reads lower buckets.
VERDICT_LEVELS = (1, 4)


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
        prompts = write_prompts(tmp_path)
        with daemon(config, tmp_path) as d:
            wait_target_up(d, BASE)
            wait_target_up(d, SPEC)
            watch = VerdictWatch(d, target=SPEC, window="10m")
            spans: list[float] = []
            with watch:
                run_levels(d, base, spec, prompts, tmp_path, levels, spans, uncaptured(capsys))
                # Right after the last level, while the verdict's bucket may still be its.
                time.sleep(INTERVAL + 0.5)
                spans.append(time.time())
            capsys.readouterr()
            end = time.time()
            m: Exported = d.wait_for(lambda: scraped_after(d, (BASE, SPEC), end), timeout=20)
            api = d.targets()

    reads = watch.reads()
    verdicts = [
        VerdictRow(
            level,
            level_verdict(reads, level=level, start=spans[i], end=spans[i + 1]),
            tuple(r for r in reads if spans[i] <= r.wall < spans[i + 1]),
        )
        for i, level in enumerate(levels)
    ]
    outcome = check_levels(
        levels, api=api, metrics=m, target=SPEC, baseline=BASE, window="10m",
        step_ratio_agreement=STEP_RATIO_AGREEMENT,
    )  # fmt: skip
    with capsys.disabled():
        report_table(outcome)
        report_verdicts(verdicts)
    check_verdicts(verdicts, asserted=VERDICT_LEVELS)


def run_levels(
    d: Daemon,
    base: LlamaServer,
    spec: LlamaServer,
    prompts: Path,
    tmp_path: Path,
    levels: list[ProfileLevel],
    spans: list[float],
    say: Callable[[str], None],
) -> None:
    """``specmon measure`` at each of :data:`LEVELS` in turn (run again while its bucket lacks
    figures); ``spans`` gets the wall time each level started (a level's span runs to the next
    one's start)."""
    for index, (n, repeats) in enumerate(LEVELS):
        if index:
            # One scrape interval apart: no interval of a server holds two levels.
            time.sleep(INTERVAL + 0.5)
        spans.append(time.time())
        argv = level_argv(
            base, spec, prompts_file=prompts, level=n, repeats=repeats,
            max_tokens=MAX_TOKENS, warmup=not index,
        )  # fmt: skip
        level = run_level_until_bucket(
            d,
            argv,
            tmp_path / f"profile-{n}.json",
            target=SPEC,
            baseline=BASE,
            window="10m",
            top_ups=TOP_UPS,
            say=say,
            # 16 in flight is the client's to hold: on a busy machine (CI's three lanes on
            # two cores) the fast baseline's measured concurrency fell to 11.25, and measure
            # rightly leaves such a level out; 16 is not a verdict level, so the test then
            # compares the levels held (1 and 4 must be).
            not_held=n not in VERDICT_LEVELS,
        )
        if level is None:
            assert index == len(LEVELS) - 1, "only the last level may go unheld"
            continue
        levels.append(level)  # fmt: skip
