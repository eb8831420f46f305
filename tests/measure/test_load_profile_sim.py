"""``specmon measure --profile-out`` against a simulated pair whose crossover is known by
construction (specmon.sim.load_model), then ``specmon recommend`` on the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.answer import profile_crossover
from specmon.cli.main import main
from specmon.load import DEFAULT_SCHEME, PROFILE_FORMAT, profile_from_json
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target
from tests.measure.support import sim_pair
from tests.support.strict_json import strict_loads

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
#: Wall seconds per simulated second: steps of 2.7-12 ms, enough for requests to overlap.
#: The counters' figures do not depend on it; measure's tokens/s ratio does, being timed by
#: the client's clock: at 0.1 (steps of 0.9-4 ms) a fast-tier run beside other work once
#: measured a tokens/s ratio of 11.76, which a profile refuses (above (k + 1) x 1.1), so the
#: profile did not load. Three times the scale makes a stall of the same length weigh a third.
TIME_SCALE = 0.3
#: Tokens per request. At 64 the speculative server's requests were short enough (about 19
#: steps) that the gaps between one request and the next and the level's drain held
#: concurrency 4 at 3.46 and 16 at 14.3 (0.86-0.89 of the level, against the 0.8 that counts
#: as held) on a quiet machine, and a CI run beside two vLLM servers once left a level out.
#: At 128: 3.80 and 14.93 (0.92-0.95) beside six busy loops.
MAX_TOKENS = 128


def target(name: str, kind: PageKind, *, speculation: bool) -> VirtualTarget:
    settings = SimSettings(
        survival=SURVIVAL,
        drafts_per_second=0.0,
        requests_running=0,
        speculation=speculation,
        load_model=DEMO_LOAD_MODEL,
    )
    return make_target(
        name=name, kind=kind, settings=settings, model="tiny-llama",
        seed=11 if speculation else 12, time_scale=TIME_SCALE,
    )  # fmt: skip


@pytest.mark.parametrize("kind", [PageKind.VLLM, PageKind.LLAMACPP])
def test_profile_finds_the_crossover_within_one_bucket(
    kind: PageKind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile_path = tmp_path / "profile.json"
    pair_targets = (
        target("baseline", kind, speculation=False),
        target("speculative", kind, speculation=True),
    )
    with sim_pair(*pair_targets) as pair:
        code = main(
            ["measure", "--baseline", pair.api("baseline"), "--speculative",
             pair.api("speculative"), "--model", "tiny-llama", "--warmup", "0",
             "--concurrency", "1,4,8,16", "--repeats", "auto", "--max-tokens", str(MAX_TOKENS),
             "--workloads", "copy", "--profile-out", str(profile_path)]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Crossover: speculation pays up to concurrency" in out, out
    assert f"Wrote the load profile {profile_path}" in out

    document = strict_loads(profile_path.read_text())
    assert document["format"] == PROFILE_FORMAT and document["version"] == 1
    assert [lv["concurrency"] for lv in document["levels"]] == [1, 4, 8, 16]
    profile = profile_from_json(document)
    # The counters give the model's step times: at concurrency 1 (always one sequence) the
    # baseline step is T(1, 0) = 9 ms and the speculative one T(1, 4) = 11.4 ms; vLLM's
    # counters give them exactly, llama.cpp's window formula counts each request's first token
    # as a step (127 decode steps' time over 128 tokens: docs/load-signals.md).
    first = profile.levels[0]
    base_step, spec_step = DEMO_LOAD_MODEL.step_seconds(1, 0), DEMO_LOAD_MODEL.step_seconds(1, 4)
    if kind is PageKind.VLLM:
        assert first.baseline.step_seconds == pytest.approx(base_step)
        assert first.speculative.step_seconds == pytest.approx(spec_step)
        assert first.draft_cost == pytest.approx(DEMO_LOAD_MODEL.draft_cost(1, 4))
    else:
        assert first.baseline.step_seconds == pytest.approx(
            base_step * (MAX_TOKENS - 1) / MAX_TOKENS
        )
        assert first.speculative.step_seconds == pytest.approx(spec_step, rel=0.1)
        assert first.draft_cost == pytest.approx(DEMO_LOAD_MODEL.draft_cost(1, 4), abs=0.03)
    assert first.draft_cost_source == "step times"

    truth = DEMO_LOAD_MODEL.crossover(4, 1 + sum(SURVIVAL))
    assert truth is not None
    found = profile_crossover(profile)
    assert found is not None, profile.costs()
    true_bucket = DEFAULT_SCHEME.bucket_of(truth).index
    found_bucket = DEFAULT_SCHEME.bucket_of(found.concurrency).index
    assert abs(found_bucket - true_bucket) <= 1, (found.concurrency, truth)
    # The crossover lies inside the measured range, between a level that paid and one that
    # did not.
    assert found.pays_up_to is not None
    assert found.pays_up_to < found.concurrency <= found.costs_from

    code = main(["recommend", "--profile", str(profile_path), "--json"])
    advice = strict_loads(capsys.readouterr().out)
    assert code == 0
    ks = [b["best_chain_length"] for b in advice["buckets"]]
    assert ks[0] == 4  # at concurrency 1 the whole chain pays (c = 0.067)
    assert ks == sorted(ks, reverse=True)  # never a longer chain at a higher load
    assert ks[-1] < 4
    schedule = advice["vllm"]["num_speculative_tokens_per_batch_size"]
    assert schedule[0][0] == 1 and schedule[0][2] == 4
