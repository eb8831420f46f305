"""Issue 63's scenario generator: a speculating server and its baseline (a twin, or this
server's own past) with a known truth, breaking the verdict's assumptions the way real
servers do, read through specmon's own code (LoadHistory, the cost curve, the answer's read).

Each side is an engine scraped every ``scrape`` seconds at a concurrency n, its step time
T(n) = fixed + slope max(knee, n) (the cost model's shape, docs/background.md) times
(1 + drift), drift an AR(1) process per side (independent sides); with speculation the step
costs (1 + k c) times the baseline's, and each request-step drafts k tokens accepted as a chain
(position i survives with alpha^i) with alpha the request's class's: requests of several
classes turn over slowly, so acceptance per interval is overdispersed against a binomial. The
truth: tokens per step with speculation at the class mix's mean over 1 + k c, which is what a
long run at drift 0 would read (the load does not enter: both sides' step time have the same
shape). Seeded, in-process, numpy for the draws."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specmon.engines import SpecCounters
from specmon.load import LoadHistory
from specmon.load.counters import LoadCounters

__all__ = [
    "HISTORY_SCENARIOS",
    "SCENARIOS",
    "WINDOWS",
    "Engine",
    "Scenario",
    "Side",
    "Tally",
    "measure",
    "replicate",
    "table",
    "truth",
]

K = 4
COST = 0.05
FIXED, SLOPE, KNEE = 0.010, 0.0008, 4.0


def step_seconds(n: float) -> float:
    return FIXED + SLOPE * max(KNEE, n)


def expected_accepted(alpha: float) -> float:
    return sum(alpha**i for i in range(1, K + 1))


def truth(classes: tuple[float, ...]) -> float:
    """The speed-up a long run at drift 0 reads: mean tokens per step over the step's cost."""
    tokens = 1.0 + sum(expected_accepted(a) for a in classes) / len(classes)
    return tokens / (1.0 + K * COST)


@dataclass(frozen=True)
class Scenario:
    name: str
    #: Stationary sd of each side's relative step-time drift, and its lag-1 correlation per
    #: scrape interval (0: independent noise per interval, the method's assumption).
    drift_sd: float = 0.0
    drift_rho: float = 0.0
    #: Independent per-interval step-time noise (relative sd) on top of the drift.
    noise_sd: float = 0.01
    #: The request classes' alpha, equally likely (one: a single class).
    classes: tuple[float, ...] = (0.75,)
    #: The target's concurrency; the twin's (None: the same); +- jitter per interval.
    load: float = 8.0
    twin_load: float | None = None
    jitter: float = 0.0
    #: Loads visited before the steady phase (the curve's hour sees them), each for a share.
    warmup_loads: tuple[float, ...] = (3.0, 16.0)
    #: The step time's factor on the speculating side (1.1: a change that costs 10 %).
    slowdown: float = 1.0
    #: The history basis: how long the server has speculated since its past epoch.
    since: float = 1800.0
    #: A load that cycles (the demo's, a diurnal pattern in small): after the warm-up, these
    #: loads in turn for ``phase`` seconds each, ``cycles`` times, both sides (the read is at
    #: the last load's bucket; its 1m read is off the cost curve).
    cycle: tuple[float, ...] = ()
    phase: float = 30.0
    cycles: int = 4


@dataclass
class Side:
    """One engine: cumulative counters, a drift state, its request classes."""

    speculative: bool
    rng: np.random.Generator
    scenario: Scenario
    drift: float = 0.0
    counters: list[float] = field(default_factory=lambda: [0.0] * 8)
    positions: list[int] = field(default_factory=lambda: [0] * K)
    #: The alpha of each request slot (at most 64).
    slots: np.ndarray = field(default_factory=lambda: np.zeros(64))

    def __post_init__(self) -> None:
        s = self.scenario
        self.drift = float(self.rng.normal(0.0, s.drift_sd)) if s.drift_sd else 0.0
        self.slots = self.rng.choice(np.asarray(s.classes), size=64)

    def step(self, seconds: float, n: float, *, classes: tuple[float, ...] | None = None) -> None:
        """One scrape interval at concurrency ``n`` (``classes``: switch the classes)."""
        s, rng = self.scenario, self.rng
        if s.drift_sd:
            innovation = s.drift_sd * math.sqrt(1 - s.drift_rho**2)
            self.drift = s.drift_rho * self.drift + float(rng.normal(0.0, innovation))
        noise = float(rng.normal(0.0, s.noise_sd)) if s.noise_sd else 0.0
        factor = max(1.0 + self.drift + noise, 0.2)
        t = step_seconds(n) * factor * ((1 + K * COST) * s.slowdown if self.speculative else 1.0)
        engine = seconds / t
        request = n * engine
        accepted = 0
        if self.speculative:
            pool = np.asarray(classes or s.classes)
            # Requests turn over slowly (about 30 s each): a slot's class persists.
            turn = (
                np.ones(len(self.slots), dtype=bool)
                if classes is not None
                else rng.random(len(self.slots)) < min(seconds / 30.0, 1.0)
            )
            self.slots[turn] = rng.choice(pool, size=int(turn.sum()))
            live = self.slots[: max(1, round(n))]
            drafts = int(request)
            for alpha in np.unique(live):
                survivors = round(drafts * float(np.mean(live == alpha)))
                for i in range(K):
                    survivors = int(rng.binomial(survivors, alpha))
                    self.positions[i] += survivors
                    accepted += survivors
            self.counters[5] += drafts
            self.counters[6] += K * drafts
            self.counters[7] += accepted
        c = self.counters
        c[0] += request
        c[1] += request * t
        c[2] += request + accepted
        c[3] += engine
        c[4] += request

    def reading(self, n: float) -> LoadCounters:
        c = self.counters
        return LoadCounters(
            request_steps=c[0], decode_seconds=c[1], decode_tokens=c[2], engine_steps=c[3],
            slot_steps=c[4], drafts=int(c[5]), draft_tokens=int(c[6]), accepted_tokens=int(c[7]),
            accepted_per_position=tuple(self.positions) if self.speculative else (),
            requests_running=n, source="inter_token_latency",
        )  # fmt: skip

    def spec_counters(self) -> SpecCounters:
        c = self.counters
        return SpecCounters(int(c[5]), int(c[6]), int(c[7]), tuple(self.positions))


@dataclass
class Engine:
    """A side and the history specmon keeps of it, scraped together."""

    side: Side
    history: LoadHistory
    now: float = 0.0

    @staticmethod
    def make(speculative: bool, scenario: Scenario, rng: np.random.Generator) -> Engine:
        engine = Engine(Side(speculative, rng, scenario), LoadHistory(retention=3600.0))
        engine.history.add(0.0, engine.side.reading(scenario.load))
        return engine

    def scrape(self, seconds: float, n: float, *, classes: tuple[float, ...] | None = None) -> None:
        self.side.step(seconds, n, classes=classes)
        self.now += seconds
        self.history.add(self.now, self.side.reading(n))


# -- the harness ------------------------------------------------------------------------------

WINDOWS = (60.0, 300.0, 900.0)

SCENARIOS = (
    Scenario("own assumptions"),
    Scenario("drift sd 5 % strong persistence", drift_sd=0.05, drift_rho=0.98),
    Scenario("drift sd 3 %", drift_sd=0.03, drift_rho=0.95),
    Scenario("request classes 0.9 / 0.5", classes=(0.9, 0.5)),
    Scenario("twin at 9, target at 7", load=7.0, twin_load=9.0),
    Scenario("twin at 9, target at 7, no other load", load=7.0, twin_load=9.0, warmup_loads=()),
    Scenario("twin at 8.3, target at 8, no other load", load=8.0, twin_load=8.3, warmup_loads=()),
    Scenario("load on a bucket edge (6 +- 0.4)", load=6.0, jitter=0.4),
    Scenario(
        "load cycling 30 s a level, drift sd 3 % (1-minute memory)",
        drift_sd=0.03,
        drift_rho=0.78,
        cycle=(2.0, 4.0, 16.0, 8.0),
        warmup_loads=(),
    ),
    Scenario(
        "load cycling 30 s a level, drift sd 3 % (5-minute memory)",
        drift_sd=0.03,
        drift_rho=0.95,
        cycle=(2.0, 4.0, 16.0, 8.0),
        warmup_loads=(),
    ),
    Scenario(
        "drift, classes and twin",
        drift_sd=0.05,
        drift_rho=0.98,
        classes=(0.9, 0.5),
        load=7.0,
        twin_load=9.0,
    ),
)


@dataclass
class Tally:
    """One scenario's reads in one window: truth inside, withheld (and why), the biases."""

    inside: int = 0
    reads: int = 0
    withheld: dict[str, int] = field(default_factory=dict)
    biases: list[float] = field(default_factory=list)
    #: Per read, the interval's half-width in log over the actual error's |log|.
    widths: list[float] = field(default_factory=list)

    @property
    def coverage(self) -> float | None:
        return self.inside / self.reads if self.reads else None

    @property
    def width(self) -> float | None:
        """The median half-width over the actual error (about 2 for a calibrated interval:
        the 95 % point over the median |error|, 1.96 / 0.67 = 2.9; far above: too wide)."""
        return float(np.median(self.widths)) if self.widths else None

    @property
    def bias(self) -> float | None:
        return float(np.median(self.biases)) if self.biases else None


def _window_counters(snaps: list[tuple[float, SpecCounters]], seconds: float) -> SpecCounters:
    now, last = snaps[-1]
    # A window longer than the run so far reads the whole run (as the daemon's would).
    first = next((c for t, c in reversed(snaps) if t <= now - seconds + 1e-9), snaps[0][1])
    return SpecCounters(
        last.drafts - first.drafts, last.draft_tokens - first.draft_tokens,
        last.accepted_tokens - first.accepted_tokens,
        tuple(a - b for a, b in zip(last.accepted_per_position, first.accepted_per_position,
                                    strict=True)),
    )  # fmt: skip


def replicate(
    scenario: Scenario, seed: int, *, scrape: float = 15.0
) -> dict[float, tuple[float | None, tuple[float, float] | None, str | None]]:
    """One replication against a twin: 10 minutes at each warm-up load (both sides), then 20
    at the scenario's loads; each window's (speed-up, interval, why withheld) at the end."""
    from specmon.answer import read_comparison

    rng = np.random.default_rng(seed)
    spec, twin = Engine.make(True, scenario, rng), Engine.make(False, scenario, rng)
    snaps = [(0.0, spec.side.spec_counters())]
    phases = [(w, w, 600.0) for w in scenario.warmup_loads]
    if scenario.cycle:
        phases += [(x, x, scenario.phase) for _ in range(scenario.cycles) for x in scenario.cycle]
    else:
        phases.append((scenario.load, scenario.twin_load or scenario.load, 1200.0))
    n = scenario.load
    for mine, theirs, span in phases:
        for _ in range(round(span / scrape)):
            jitter = scenario.jitter
            n = mine + (float(rng.uniform(-jitter, jitter)) if jitter else 0.0)
            m = theirs + (float(rng.uniform(-jitter, jitter)) if jitter else 0.0)
            spec.scrape(scrape, n)
            twin.scrape(scrape, m)
            snaps.append((spec.now, spec.side.spec_counters()))
    out: dict[float, tuple[float | None, tuple[float, float] | None, str | None]] = {}
    for seconds in WINDOWS:
        window = spec.history.window(seconds)
        at = window.latest.concurrency if window.latest is not None else n
        read = read_comparison(
            window, base=twin.history.window(seconds),
            acceptance=_window_counters(snaps, seconds), survival=(),
            drafted_per_draft=float(K), chain_length=K, at=at,
            memo=spec.history.memo(seconds),
        )  # fmt: skip
        if read.speedup is None:
            out[seconds] = (None, None, read.progress or read.state)
        else:
            out[seconds] = (read.speedup, read.interval, None)
    return out


def replicate_history(
    scenario: Scenario, seed: int, *, scrape: float = 15.0
) -> dict[float, tuple[float | None, tuple[float, float] | None, str | None]]:
    """One replication on the ``history`` basis: an hour of this server without speculation
    (its epoch's sums laid out as specmon.daemon.epoch_curves.EpochCurves.past lays them),
    then ``scenario.since`` (30 minutes) with it, the drift of its step time carrying on across the change; each
    window's read at the end."""
    from specmon.answer import read_comparison
    from specmon.load import DEFAULT_SCHEME, BucketTotals, LoadWindow
    from specmon.load.curve import CurveAccumulator

    rng = np.random.default_rng(seed)
    engine = Engine.make(False, scenario, rng)
    epoch = CurveAccumulator.for_epoch()
    for _ in range(round(3600 / scrape)):
        engine.scrape(scrape, scenario.load)
        assert engine.history.whole_row is not None
        epoch.add_row(engine.history.whole_row)
    buckets = tuple(
        BucketTotals(DEFAULT_SCHEME.buckets[b.bucket], b.totals) for b in epoch.buckets()
    )
    past = LoadWindow(None, buckets, None, None, epoch)
    # The same server, speculating from now: its drift carries on, its history starts again.
    side = engine.side
    side.speculative = True
    spec = Engine(side, LoadHistory(retention=3600.0), engine.now)
    spec.history.add(spec.now, side.reading(scenario.load))
    snaps = [(spec.now, side.spec_counters())]
    for _ in range(round(scenario.since / scrape)):
        spec.scrape(scrape, scenario.load)
        snaps.append((spec.now, side.spec_counters()))
    out: dict[float, tuple[float | None, tuple[float, float] | None, str | None]] = {}
    for seconds in WINDOWS:
        read = read_comparison(
            spec.history.window(seconds), base=past,
            acceptance=_window_counters(snaps, seconds), survival=(),
            drafted_per_draft=float(K), chain_length=K, at=scenario.load,
        )  # fmt: skip
        if read.speedup is None:
            out[seconds] = (None, None, read.progress or read.state)
        else:
            out[seconds] = (read.speedup, read.interval, None)
    return out


HISTORY_SCENARIOS = (
    Scenario("history: own assumptions", warmup_loads=()),
    Scenario("history: drift sd 3 %", drift_sd=0.03, drift_rho=0.995, warmup_loads=()),
    Scenario("history: drift sd 5 %", drift_sd=0.05, drift_rho=0.98, warmup_loads=()),
    Scenario("history: classes 0.9 / 0.5", classes=(0.9, 0.5), warmup_loads=()),
    # The change longer ago than the window curve's hour: the gap is past what it sees.
    Scenario(
        "history: drift sd 3 %, 90 minutes since",
        drift_sd=0.03,
        drift_rho=0.995,
        warmup_loads=(),
        since=5400.0,
    ),
)


def measure(scenario: Scenario, *, replications: int, seed: int = 0) -> dict[float, Tally]:
    """Coverage and bias of one scenario per window over ``replications`` seeded runs."""
    expected = truth(scenario.classes)
    tallies = {w: Tally() for w in WINDOWS}
    for r in range(replications):
        run = replicate_history if scenario.name.startswith("history") else replicate
        for seconds, (speedup, interval, why) in run(scenario, seed * 10_000 + r).items():
            tally = tallies[seconds]
            if speedup is None:
                key = why or "withheld"
                tally.withheld[key] = tally.withheld.get(key, 0) + 1
                continue
            tally.reads += 1
            tally.biases.append(speedup / expected - 1)
            if interval is not None and interval[0] <= expected <= interval[1]:
                tally.inside += 1
            if interval is not None:
                error = abs(math.log(speedup / expected))
                half = math.log(interval[1] / interval[0]) / 2
                tally.widths.append(half / max(error, 1e-6))
    return tallies


def table(replications: int) -> str:
    """The coverage table, one row per scenario (``python -m tests.support.calibration``)."""
    lines = ["| scenario | 1m | 5m | 15m | median bias (1m/5m/15m) | width/error | withheld |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for scenario in (*SCENARIOS, *HISTORY_SCENARIOS):
        tallies = measure(scenario, replications=replications)
        cells = []
        for w in WINDOWS:
            c = tallies[w].coverage
            cells.append(f"{100 * c:.0f} %" if c is not None else "-")
        biases = "/".join(
            f"{100 * b:+.1f} %" if (b := tallies[w].bias) is not None else "-" for w in WINDOWS
        )
        widths = "/".join(
            f"{x:.1f}" if (x := tallies[w].width) is not None else "-" for w in WINDOWS
        )
        withheld = sum(sum(t.withheld.values()) for t in tallies.values())
        lines.append(
            f"| {scenario.name} | {' | '.join(cells)} | {biases} | {widths} | {withheld} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
