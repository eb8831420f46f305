"""Load profiles written by ``specmon measure --profile-out``: the baseline's and the
speculative server's speed per concurrency level, and their JSON form (read strictly: every
problem named with its path)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from specmon.bounds import (
    chain_bound,
    speedup_refusal,
    time_per_token_refusal,
)
from specmon.engines.model import SpecCounters, add_counters
from specmon.load.buckets import DEFAULT_SCHEME
from specmon.load.compare import BaselinePoint
from specmon.load.curve import SidePoint
from specmon.records import record

PROFILE_FORMAT = "specmon-load-profile"
PROFILE_VERSION = 1


class ProfileError(ValueError):
    """A profile that cannot be used; ``problems`` lists every one with its path."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@record
class ProfileSide:
    """One server at one level: figures from its counters (None where not measurable)."""

    time_per_output_token_seconds: float | None
    step_seconds: float | None
    #: Completion tokens per second seen by the client (from ``usage``).
    tokens_per_second: float | None
    #: Requests per engine step, from the engine's counters.
    concurrency: float | None
    engine_steps: float | None = None


@record
class ProfileLevel:
    #: Requests the client kept in flight.
    concurrency: int
    baseline: ProfileSide
    speculative: ProfileSide
    #: Speculative server: K (tokens per request-step) and k̄ (drafted tokens per step).
    tokens_per_step: float | None
    drafted_per_step: float | None
    acceptance: SpecCounters | None
    #: Client tokens/s with the draft / without.
    speed_ratio: float | None
    #: c from the step times, and c implied by the speed ratio (specmon measure's reading).
    draft_cost_from_steps: float | None
    draft_cost_from_speed: float | None

    @property
    def draft_cost(self) -> float | None:
        """The step-time c when both servers' counters gave it, else the implied c."""
        if self.draft_cost_from_steps is not None:
            return self.draft_cost_from_steps
        return self.draft_cost_from_speed

    @property
    def draft_cost_source(self) -> str | None:
        if self.draft_cost_from_steps is not None:
            return "step times"
        if self.draft_cost_from_speed is not None:
            return "speed ratio"
        return None

    @property
    def position(self) -> float:
        """Where the level sits on the concurrency axis: the speculative engine's measured
        concurrency when known (that is where its cost was paid), else the client's level."""
        return (
            self.speculative.concurrency
            if self.speculative.concurrency is not None
            else float(self.concurrency)
        )

    @property
    def realized_speedup(self) -> float | None:
        b = self.baseline.time_per_output_token_seconds
        s = self.speculative.time_per_output_token_seconds
        if b is None or s is None or s <= 0:
            return None
        return b / s


@record
class Profile:
    version: int
    levels: tuple[ProfileLevel, ...]
    model: str | None = None
    engine: str | None = None
    chain_length: int | None = None
    created: str | None = None
    #: Free-form provenance (servers, settings) kept as written.
    meta: Mapping[str, Any] = field(default_factory=dict)

    def acceptance(self) -> SpecCounters | None:
        """The acceptance counters of every level summed (acceptance does not depend on load
        in the cost model; the per-level counters are kept to check that)."""
        parts = [lv.acceptance for lv in self.levels if lv.acceptance is not None]
        return add_counters(parts) if parts else None

    def costs(self) -> list[tuple[float, float]]:
        """(concurrency, c) of every level that has a c, by concurrency."""
        return sorted(
            (lv.position, lv.draft_cost) for lv in self.levels if lv.draft_cost is not None
        )

    def draft_cost_at(self, concurrency: float) -> tuple[float, str] | None:
        """c at ``concurrency``, linear between the two nearest levels; None outside the
        measured range (no extrapolation). Returns (c, how it was obtained)."""
        return _interpolate(self.costs(), concurrency)

    def baseline_at(self, concurrency: float) -> BaselinePoint | None:
        """The baseline's step time and TPOT at ``concurrency`` (interpolated; None outside)."""
        levels = sorted(
            (
                lv.baseline.concurrency
                if lv.baseline.concurrency is not None
                else float(lv.concurrency),
                lv.baseline,
            )
            for lv in self.levels
            if lv.baseline.step_seconds is not None
            and lv.baseline.time_per_output_token_seconds is not None
        )
        steps = _interpolate([(n, side.step_seconds or 0.0) for n, side in levels], concurrency)
        tpots = _interpolate(
            [(n, side.time_per_output_token_seconds or 0.0) for n, side in levels], concurrency
        )
        if steps is None or tpots is None:
            return None
        source = "profile level" if steps[1] == "measured" else "profile, interpolated"
        return BaselinePoint(concurrency, steps[0], tpots[0], source)

    def speculative_points(self) -> tuple[SidePoint, ...]:
        """The speculative server's measured levels as the cost curve's speculative side (as
        :meth:`baseline_points`, K from the level's own step time and TPOT)."""
        return _points((lv.speculative, lv.concurrency) for lv in self.levels)

    def tokens_per_step(self) -> float | None:
        """K of the speculative server, the levels' mean (None: no level measured it)."""
        found = [lv.tokens_per_step for lv in self.levels if lv.tokens_per_step]
        return sum(found) / len(found) if found else None

    def drafted_per_step(self) -> float | None:
        """Drafted tokens per request-step of the speculative server, the levels' mean."""
        found = [lv.drafted_per_step for lv in self.levels if lv.drafted_per_step]
        return sum(found) / len(found) if found else None

    def baseline_points(self) -> tuple[SidePoint, ...]:
        """The baseline's measured levels as the cost curve's baseline side (a profile
        states no spread: its step times' standard error is taken as 1 %)."""
        return _points((lv.baseline, lv.concurrency) for lv in self.levels)


def _points(sides: Iterable[tuple[ProfileSide, int]]) -> tuple[SidePoint, ...]:
    """Each level's side as a curve point: at its engine's measured concurrency, else the
    client's level."""
    out = []
    for side, level in sides:
        step, tpot = side.step_seconds, side.time_per_output_token_seconds
        if step is None or tpot is None or step <= 0 or tpot <= 0:
            continue
        n = side.concurrency if side.concurrency is not None else float(level)
        bucket = DEFAULT_SCHEME.bucket_of(n)
        out.append(SidePoint(bucket.index, bucket.label, n, step, 0.01, step / tpot, 1))
    return tuple(out)


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> tuple[float, str] | None:
    if not points or not math.isfinite(x):
        return None
    ordered = sorted(points)
    if x < ordered[0][0] - 1e-9 or x > ordered[-1][0] + 1e-9:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(ordered):
        if x0 <= x <= x1:
            if abs(x - x0) < 1e-9:
                return y0, "measured"
            if abs(x - x1) < 1e-9:
                return y1, "measured"
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0), "interpolated"
    return ordered[0][1], "measured"


def _side_json(side: ProfileSide) -> dict[str, Any]:
    return {
        "time_per_output_token_seconds": side.time_per_output_token_seconds,
        "step_seconds": side.step_seconds,
        "tokens_per_second": side.tokens_per_second,
        "concurrency": side.concurrency,
        "engine_steps": side.engine_steps,
    }


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The profile as a JSON document (format and every field: docs/measure.md)."""
    levels = []
    for lv in profile.levels:
        acc = lv.acceptance
        levels.append(
            {
                "concurrency": lv.concurrency,
                "baseline": _side_json(lv.baseline),
                "speculative": _side_json(lv.speculative),
                "tokens_per_step": lv.tokens_per_step,
                "drafted_tokens_per_step": lv.drafted_per_step,
                "acceptance": None if acc is None else acc.counts_dict(),
                "speed_ratio": lv.speed_ratio,
                "realized_speedup": lv.realized_speedup,
                "draft_cost": {
                    "value": lv.draft_cost,
                    "source": lv.draft_cost_source,
                    "from_step_times": lv.draft_cost_from_steps,
                    "from_speed_ratio": lv.draft_cost_from_speed,
                },
            }
        )
    return {
        "format": PROFILE_FORMAT,
        "version": profile.version,
        "created": profile.created,
        "model": profile.model,
        "engine": profile.engine,
        "chain_length": profile.chain_length,
        "meta": dict(profile.meta),
        "levels": levels,
    }


class _Reader:
    """Collects every problem of a document with its path."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def number(
        self, obj: Mapping[str, Any], key: str, path: str, *, minimum: float | None = 0.0
    ) -> float | None:
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.append(f"{path}.{key}: must be a number or null")
            return None
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or (minimum is not None and number < minimum):
            bound = "" if minimum is None else f" and >= {minimum:g}"
            self.problems.append(f"{path}.{key}: must be finite{bound}")
            return None
        return number

    def integer(self, obj: Mapping[str, Any], key: str, path: str, *, minimum: int = 0) -> int:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problems.append(f"{path}.{key}: must be an integer >= {minimum}")
            return minimum
        return value

    def mapping(self, obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.problems.append(f"{path}.{key}: must be an object or null")
            return None
        return value

    def side(self, obj: Mapping[str, Any], key: str, path: str) -> ProfileSide:
        raw = self.mapping(obj, key, path) or {}
        p = f"{path}.{key}"
        return ProfileSide(
            time_per_output_token_seconds=self.number(raw, "time_per_output_token_seconds", p),
            step_seconds=self.number(raw, "step_seconds", p),
            tokens_per_second=self.number(raw, "tokens_per_second", p),
            concurrency=self.number(raw, "concurrency", p),
            engine_steps=self.number(raw, "engine_steps", p),
        )


#: Most levels a profile may hold (bounded work per input).
MAX_PROFILE_LEVELS = 256
MAX_POSITIONS = 64


#: Each side's time per output token may fall by this share from one level to the next
#: (noise at low load); a larger fall is no load curve.
TPOT_FALL = 0.10


def physics(
    levels: Sequence[ProfileLevel], *, chain_length: int | None, paths: Mapping[int, str]
) -> list[str]:
    """What a profile's levels break of the physics (each with its path): every time per
    output token and step time within :func:`specmon.bounds.time_per_token_refusal`'s bounds,
    each side's time per output token non-decreasing with the concurrency level within
    :data:`TPOT_FALL`, and the realized speed-up and the speed ratio within the bound of
    :func:`specmon.bounds.speedup_refusal` for a timing (k: the profile's chain length, else
    its position series, else the adapters' largest)."""
    problems: list[str] = []
    positions = max((len(lv.acceptance.accepted_per_position) for lv in levels
                     if lv.acceptance is not None), default=0)  # fmt: skip
    k = chain_bound(configured=chain_length, detected=positions)
    for lv in levels:
        path = paths.get(id(lv), f"level {lv.concurrency}")
        for side_name, side in (("baseline", lv.baseline), ("speculative", lv.speculative)):
            for key in ("time_per_output_token_seconds", "step_seconds"):
                value = getattr(side, key)
                why = None if value is None else time_per_token_refusal(value)
                if why is not None:
                    problems.append(f"{path}.{side_name}.{key}: {why}")
        for key, ratio in (("realized_speedup", lv.realized_speedup),
                           ("speed_ratio", lv.speed_ratio)):  # fmt: skip
            why = None if ratio is None else speedup_refusal(ratio, chain_length=k, measured=True)
            if why is not None:
                problems.append(f"{path}: {key}: {why}")
    if problems:
        return problems
    ordered = sorted(levels, key=lambda lv: lv.concurrency)
    for side_name in ("baseline", "speculative"):
        last: tuple[ProfileLevel, float] | None = None
        for lv in ordered:
            tpot = getattr(lv, side_name).time_per_output_token_seconds
            if tpot is None:
                continue
            if last is not None and tpot < last[1] * (1.0 - TPOT_FALL):
                problems.append(
                    f"{paths.get(id(lv), lv.concurrency)}.{side_name}.time_per_output_token_"
                    f"seconds: {tpot:g} s at concurrency {lv.concurrency}, below "
                    f"{last[1]:g} s at {last[0].concurrency} by more than {TPOT_FALL:.0%}: "
                    "time per token does not fall as load rises"
                )
            last = (lv, tpot)
    return problems


def profile_from_json(document: object) -> Profile:
    """A profile from its parsed JSON; :class:`ProfileError` names every problem at once."""
    r = _Reader()
    if not isinstance(document, Mapping):
        raise ProfileError(["the profile must be a JSON object"])
    if document.get("format") != PROFILE_FORMAT:
        r.problems.append(f"format: must be {PROFILE_FORMAT!r}")
    version = document.get("version")
    if version != PROFILE_VERSION:
        r.problems.append(f"version: this specmon reads version {PROFILE_VERSION}, not {version!r}")
    raw_levels = document.get("levels")
    levels: list[ProfileLevel] = []
    if not isinstance(raw_levels, list) or not raw_levels:
        r.problems.append("levels: must be a non-empty list")
        raw_levels = []
    elif len(raw_levels) > MAX_PROFILE_LEVELS:
        r.problems.append(f"levels: at most {MAX_PROFILE_LEVELS} levels")
        raw_levels = []
    seen: set[int] = set()
    paths: dict[int, str] = {}  # id(level) -> its path, for the physics below
    for i, item in enumerate(raw_levels):
        path = f"levels[{i}]"
        if not isinstance(item, Mapping):
            r.problems.append(f"{path}: must be an object")
            continue
        before = len(r.problems)
        concurrency = r.integer(item, "concurrency", path, minimum=1)
        if len(r.problems) == before:  # an invalid value is named once, not as a repeat
            if concurrency in seen:
                r.problems.append(f"{path}.concurrency: level {concurrency} appears twice")
            seen.add(concurrency)
        acceptance = None
        acc = r.mapping(item, "acceptance", path)
        if acc is not None:
            p = f"{path}.acceptance"
            per = acc.get("accepted_per_position", [])
            per_pos: tuple[int, ...] = ()
            if (
                not isinstance(per, list)
                or len(per) > MAX_POSITIONS
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in per)
            ):
                r.problems.append(
                    f"{p}.accepted_per_position: must be a list of at most {MAX_POSITIONS} "
                    "integers >= 0"
                )
            else:
                per_pos = tuple(per)
            acceptance = SpecCounters(
                drafts=r.integer(acc, "drafts", p),
                draft_tokens=r.integer(acc, "draft_tokens", p),
                accepted_tokens=r.integer(acc, "accepted_tokens", p),
                accepted_per_position=per_pos,
            )
        cost = r.mapping(item, "draft_cost", path) or {}
        levels.append(
            level := ProfileLevel(
                concurrency=concurrency,
                baseline=r.side(item, "baseline", path),
                speculative=r.side(item, "speculative", path),
                tokens_per_step=r.number(item, "tokens_per_step", path),
                drafted_per_step=r.number(item, "drafted_tokens_per_step", path),
                acceptance=acceptance,
                speed_ratio=r.number(item, "speed_ratio", path),
                draft_cost_from_steps=r.number(
                    cost, "from_step_times", f"{path}.draft_cost", minimum=None
                ),
                draft_cost_from_speed=r.number(
                    cost, "from_speed_ratio", f"{path}.draft_cost", minimum=None
                ),
            )
        )
        paths[id(level)] = path
    chain = document.get("chain_length")
    if chain is not None and (isinstance(chain, bool) or not isinstance(chain, int) or chain < 0):
        r.problems.append("chain_length: must be an integer >= 0 or null")
        chain = None
    if not r.problems:
        r.problems.extend(physics(levels, chain_length=chain, paths=paths))
    meta = document.get("meta") or {}
    if not isinstance(meta, Mapping):
        r.problems.append("meta: must be an object")
        meta = {}
    if r.problems:
        raise ProfileError(r.problems)
    text = {k: document.get(k) for k in ("model", "engine", "created")}
    return Profile(
        version=PROFILE_VERSION,
        levels=tuple(sorted(levels, key=lambda lv: lv.concurrency)),
        model=text["model"] if isinstance(text["model"], str) else None,
        engine=text["engine"] if isinstance(text["engine"], str) else None,
        chain_length=chain,
        created=text["created"] if isinstance(text["created"], str) else None,
        meta=dict(meta),
    )
