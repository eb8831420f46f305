"""Cost profiles held to physics at load (issue 53): a time per token outside [1 us, 10 min],
a time per output token that falls as load rises (by more than 10 %), or a speed-up above
(k + 1) x 1.1 is refused with its path, at check-config and at load. A baseline time per token
of 1e308 passed and gave an infinite speed-up; 1e-300 gave 1e-297x; a falling curve gave 11.9x
at an acceptance length of 3.4."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmon.config_values import ConfigError
from specmon.daemon.config import parse_config
from specmon.load import PROFILE_FORMAT, PROFILE_VERSION, ProfileError, profile_from_json
from tests.support.views import small_profile


def _side(step: float, tpot: float, concurrency: float) -> dict[str, Any]:
    return {"time_per_output_token_seconds": tpot, "step_seconds": step,
            "tokens_per_second": None, "concurrency": concurrency, "engine_steps": 10000}  # fmt: skip


def _document(levels: list[tuple[int, float, float]], **top: Any) -> dict[str, Any]:
    """Levels of (concurrency, baseline TPOT, speculative TPOT); steps at 1.2x / 1.5x."""
    return {
        "format": PROFILE_FORMAT, "version": PROFILE_VERSION, **top,
        "levels": [
            {"concurrency": n, "baseline": _side(base, base, float(n)),
             "speculative": _side(spec * 2.5, spec, float(n)),
             "tokens_per_step": 2.5, "drafted_tokens_per_step": 3.0,
             "acceptance": {"drafts": 1000, "draft_tokens": 3000, "accepted_tokens": 1500,
                            "accepted_per_position": [750, 500, 250]},
             "speed_ratio": None, "draft_cost": {"value": None}}
            for n, base, spec in levels
        ],
    }  # fmt: skip


def _problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile_from_json(document)
    return list(caught.value.problems)


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        (
            [(1, 1e308, 0.004), (8, 1e308, 0.005)],
            "levels[0].baseline.time_per_output_token_seconds",
        ),
        ([(1, 1e-300, 0.004)], "levels[0].baseline.time_per_output_token_seconds: 1e-300 s"),
        ([(1, 0.008, 1e-300)], "levels[0].speculative"),
        # Time per token falling as load rises: 11.9x at an acceptance length of 3.4.
        ([(1, 0.040, 0.010), (8, 0.020, 0.0098)], "levels[1].baseline.time_per_output_token"),
        ([(1, 0.008, 0.0011)], "realized_speedup: speed-up 7.273"),  # k = 3: at most 4.4
    ],
    ids=["huge", "tiny", "tiny-spec", "falling", "speedup"],
)
def test_a_profile_against_physics_is_refused_with_its_path(
    levels: list[tuple[int, float, float]], words: str
) -> None:
    problems = _problems(_document(levels))
    assert any(words in p for p in problems), problems


def test_noise_at_low_load_is_allowed_and_real_profiles_load() -> None:
    profile_from_json(_document([(1, 0.0100, 0.005), (2, 0.0092, 0.0046), (8, 0.012, 0.007)]))
    assert small_profile().levels  # the fleet's profile
    with_chain = _document([(1, 0.008, 0.0018)], chain_length=4)  # 4.44x: within 5 x 1.1
    profile_from_json(with_chain)


def test_an_invalid_concurrency_is_named_once() -> None:
    """An invalid concurrency added a spurious "level 1 appears twice"."""
    document = _document([(1, 0.008, 0.004), (2, 0.009, 0.0045), (4, 0.010, 0.005)])
    document["levels"][1]["concurrency"] = "two"
    document["levels"][2]["concurrency"] = -4
    problems = _problems(document)
    assert not any("appears twice" in p for p in problems), problems
    assert sum("concurrency: must be an integer" in p for p in problems) == 2
    document["levels"][2]["concurrency"] = 1
    assert any("levels[2].concurrency: level 1 appears twice" in p for p in _problems(document))


def test_check_config_names_the_profile_and_the_level(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(_document([(1, 1e308, 0.004)])))
    text = "targets:\n  - name: a\n    url: http://127.0.0.1:1/metrics\n    cost_profile: profile.json\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, base_dir=tmp_path)
    message = "; ".join(caught.value.problems)
    assert str(path) in message and "levels[0].baseline.time_per_output_token_seconds" in message


def test_measure_says_when_the_profile_it_wrote_will_be_refused() -> None:
    from specmon.cli.measure import profile_problems
    from specmon.load import Profile, ProfileLevel, ProfileSide

    def level(n: int, base: float, spec: float) -> ProfileLevel:
        side = ProfileSide(time_per_output_token_seconds=base, step_seconds=base,
                           tokens_per_second=None, concurrency=float(n))  # fmt: skip
        spec_side = ProfileSide(time_per_output_token_seconds=spec, step_seconds=spec * 2.5,
                                tokens_per_second=None, concurrency=float(n))  # fmt: skip
        return ProfileLevel(n, side, spec_side, 2.5, 3.0, None, None, None, None)

    quiet = Profile(version=1, levels=(level(1, 0.010, 0.005), level(4, 0.015, 0.008)))
    assert profile_problems(quiet) == []
    busy = Profile(version=1, levels=(level(1, 0.040, 0.010), level(4, 0.015, 0.011)))
    (problem,) = profile_problems(busy)
    assert problem.startswith("levels[1].baseline.time_per_output_token_seconds"), problem
