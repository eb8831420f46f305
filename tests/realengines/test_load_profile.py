"""A real llama.cpp pair whose draft is several hundred times smaller than its target
(tests/realengines/load_pair.py): ``specmon measure --profile-out`` at three concurrency
levels, and what physics guarantees about the draft cost.

What is asserted, and why it holds on a shared 2-core machine:

- the profile is written, valid, and every level has a draft cost from both servers' step
  times (the counters exist and move);
- in streamed runs at concurrency 1 and 16, the realized speed-up from the servers' counters
  (TPOT without / with the draft) is within 15 % of the one the client measures from the
  arrival of the streamed tokens (an independent A/B measurement of the same requests: other
  work on the machine moves both clocks alike). measure's own tokens/s ratio is not held to
  it: it includes prompt processing, which the target and the draft both do, a large share
  of a short request at 16 prompts a step;
- from the fastest of three alternating runs per server (interference only ever adds time):
  the speculative step is longer than the baseline's at concurrency 1 (it drafts four tokens
  and verifies five rows; c > 0), speculation pays at concurrency 1 (the target streams
  116 MB of weights per step, the draft 0.5 MB), and the draft cost is higher at
  concurrency 16 than at 1 (at 16 sequences x 5 rows the verification is arithmetic, no
  longer hidden under the weights' memory traffic: "concurrency eats the gain").

Whether and where the crossover falls is reported by the run (docs/measure.md), not asserted:
it depends on how busy the machine is.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from specmon.cli.main import main
from specmon.load import profile_from_json
from tests.realengines.load_pair import Run, best_runs, load_pair, measure_argv, write_prompts

pytestmark = pytest.mark.realengine

LEVELS = (1, 4, 16)
#: Realized speed-up (counters) against the client's tokens/s ratio.
AGREEMENT = 0.15


def test_profile_and_the_physics_of_the_draft_cost(capsys: pytest.CaptureFixture[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp, load_pair() as (base, spec):
        directory = Path(tmp)
        profile_path = directory / "profile.json"
        argv = measure_argv(
            base, spec, prompts_file=write_prompts(directory), levels=LEVELS, repeats=4,
            max_tokens=48, profile_out=profile_path,
        )  # fmt: skip
        code = main([*argv, "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0
        profile = profile_from_json(json.loads(profile_path.read_text()))

        low_base, low_spec = best_runs(base, spec, concurrency=1)
        high_base, high_spec = best_runs(base, spec, concurrency=16)

    # measure leaves a level out of the profile when the servers did not hold it (its
    # measured concurrency under 80 % of it): 16 on a busy machine (CI's lanes side by side);
    # 1 and 4 must be held.
    held = [doc for doc in report["levels"] if doc["held"] is None or doc["held"]["held"]]
    assert [lv.concurrency for lv in profile.levels] == [doc["concurrency"] for doc in held]
    assert [lv.concurrency for lv in profile.levels][:2] == [1, 4]
    for level, doc in zip(profile.levels, held, strict=True):
        assert level.draft_cost_source == "step times", level
        assert level.speculative.concurrency is not None, doc["load"]
        assert level.baseline.concurrency is not None, doc["load"]
        assert level.realized_speedup is not None and level.speed_ratio is not None
    # Busy slots per decode at concurrency 1: exactly one request at a time.
    assert profile.levels[0].baseline.concurrency == pytest.approx(1.0)

    for base_run, spec_run in ((low_base, low_spec), (high_base, high_spec)):
        realized = ratio(base_run.load.time_per_output_token_seconds,
                         spec_run.load.time_per_output_token_seconds)  # fmt: skip
        client = ratio(base_run.client_tpot, spec_run.client_tpot)
        assert realized == pytest.approx(client, rel=AGREEMENT), (base_run, spec_run)

    c_low, c_high = cost(low_base, low_spec), cost(high_base, high_spec)
    gain_low = ratio(
        low_base.load.time_per_output_token_seconds, low_spec.load.time_per_output_token_seconds
    )
    print(f"fastest of 3: concurrency 1: c = {c_low:.3f}, realized {gain_low:.2f}x; "
          f"concurrency 16 (engine {high_spec.load.concurrency}): c = {c_high:.3f}")  # fmt: skip
    assert c_low > 0
    assert (
        ratio(
            low_base.load.time_per_output_token_seconds, low_spec.load.time_per_output_token_seconds
        )
        > 1.0
    )
    assert c_high > c_low


def ratio(a: float | None, b: float | None) -> float:
    assert a is not None and b is not None and b > 0
    return a / b


def cost(base_run: Run, spec_run: Run) -> float:
    """c = (T_step with the draft / T_step without - 1) / drafted tokens per step."""
    b, s = base_run.load.step_seconds, spec_run.load.step_seconds
    drafted = spec_run.load.drafted_per_step
    assert b is not None and s is not None and drafted is not None
    return (s / b - 1.0) / drafted
