"""Issue 64, item 3: a canary is a twin. Four simulated members of one group (one Deployment
behind one balancer, each at 4 requests on the demo's load model), one restarted with its
draft (k = 4): its verdict rests on the ``canary`` basis, the three others' sums pooled at
matched load, within 5 % of the load model's truth; when the rollout completes (every member
on k = 4) the basis becomes the group's past (``history``). In-process, on a virtual clock."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from html import unescape
from pathlib import Path

from specmon.answer import Answer, Evidence, Member, Refusal, canary, words
from specmon.cli.demo import FAST_LOAD_MODEL, STEP_NOISE
from specmon.daemon.config import TargetConfig
from specmon.daemon.persist import StateKeeper
from specmon.daemon.target import TargetState, Twins
from specmon.engines import read_page
from specmon.load import LoadWindow
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target
from specmon.surfaces.api import views_json
from specmon.surfaces.status import render_status
from specmon.surfaces.target import render_target

GROUP = "namespace=llm,deployment=llama"
N = 4
SURVIVAL = (0.9, 0.7, 0.5, 0.3)
SETTINGS = SimSettings(
    survival=SURVIVAL, requests_running=N, load_model=FAST_LOAD_MODEL, step_noise=STEP_NOISE,
    speculation=False,
)  # fmt: skip
WORDS = "canary: 1 of 4 pods on k = 4, compared with the 3 on k = 0"


def _truth() -> float:
    return FAST_LOAD_MODEL.speedup(N, len(SURVIVAL), 1 + sum(SURVIVAL))


class _Group:
    """``size`` members of one group, scraped once a simulated second."""

    def __init__(self, size: int = 4, *, baseline: str | None = None) -> None:
        self.now = 0.0
        self.twins = Twins()
        self.targets: dict[str, VirtualTarget] = {}
        self.states: dict[str, TargetState] = {}
        for i in range(size):
            name = f"llama-6b7c-{i}"
            target = make_target(name=name, kind=PageKind.VLLM, model="llama-3.1-8b",
                                 settings=SETTINGS, seed=40 + i)  # fmt: skip
            target.engine.restart(now=0.0, wall=0.0)
            target.started = 0.0
            cfg = TargetConfig(name=name, url=f"http://10.0.0.{i + 1}:8000/metrics", group=GROUP,
                               baseline=baseline if i == 0 else None)  # fmt: skip
            state = TargetState(cfg, windows=(30.0,), retention=60.0, twins=self.twins)
            self.twins.put(state)
            self.targets[name], self.states[name] = target, state

    def advance(self, until: float) -> None:
        while self.now + 1 <= until + 1e-9:
            self.now += 1
            for name, target in self.targets.items():
                target.tick(self.now)
                cfg = self.states[name].config
                reading = read_page(target.page(), engine=cfg.engine, model=cfg.model)
                self.states[name].observe(reading, mono=self.now, wall=self.now, duration=0.001)

    def switch(self, name: str) -> None:
        """``name`` restarted with its draft (k = 4): a new pod of the new ReplicaSet."""
        engine = self.targets[name].engine
        engine.configure(replace(engine.settings, speculation=True), now=self.now, wall=self.now)
        engine.restart(now=self.now, wall=self.now)

    def answer(self, name: str) -> Answer:
        window = self.states[name].view.models[0].windows[0]
        assert window.answer is not None, window
        return window.answer


def test_one_pod_on_k_4_is_compared_with_the_three_on_k_0_then_with_the_group_past() -> None:
    group = _Group()
    canary_pod, *old = group.states
    group.advance(60)
    group.switch(canary_pod)
    group.advance(200)
    answer = group.answer(canary_pod)
    assert answer.basis is Evidence.CANARY, words.detail(answer)
    assert answer.against_detail == WORDS
    assert answer.speedup is not None and abs(answer.speedup / _truth() - 1) < 0.05, (
        answer.speedup, _truth(), words.detail(answer))  # fmt: skip
    assert answer.interval is not None and answer.interval[0] < _truth() < answer.interval[1]
    # Every surface renders the answer's words (specmon.answer.words), none makes its own.
    views = [s.view for s in group.states.values()]
    assert WORDS in unescape(render_status(views, primary_window="30s", ready=True))
    page = render_target(group.states[canary_pod].view, primary_window="30s", series=(),
                         events=(), now=group.now)  # fmt: skip
    assert WORDS in unescape(page)
    (api,) = [t for t in views_json(views) if t["target"] == canary_pod]
    (verdict,) = [w["verdict"] for m in api["models"] for w in m["windows"] if w["verdict"]]
    assert verdict["basis"] == "canary" and verdict["basis_text"] == WORDS
    # The old pods run without speculation: no verdict of their own to compare.
    for name in old:
        assert not group.states[name].view.models[0].speculating
    # The rollout completes: every pod on k = 4, no pod left on the old configuration.
    for name in old:
        group.switch(name)
    group.advance(400)
    answer = group.answer(canary_pod)
    assert answer.basis is Evidence.HISTORY, words.detail(answer)
    assert answer.speedup is not None and abs(answer.speedup / _truth() - 1) < 0.05, (
        answer.speedup, _truth())  # fmt: skip
    for name in old:  # each new pod's own past without speculation
        after = group.answer(name)
        assert after.basis is Evidence.HISTORY, words.detail(after)
    assert not group.twins._pools  # the old pods' pool let go with the rollout done


def test_an_explicit_baseline_twin_ranks_above_the_canary() -> None:
    group = _Group(baseline="llama-6b7c-3")
    first = next(iter(group.states))
    group.advance(40)
    group.switch(first)
    group.advance(150)
    answer = group.answer(first)
    assert answer.basis is Evidence.TWIN and answer.against == "llama-6b7c-3", words.detail(answer)


def _window() -> LoadWindow:
    return LoadWindow(None, (), 4.0)


def test_the_canary_decision() -> None:
    """Pure: the members on k = 0 that pass a twin's checks are pooled; none on k = 0, no
    canary; some on k = 0 but none usable, refused with the first one's reason."""
    pooled: list[int] = []

    def pool(windows: object) -> LoadWindow:
        pooled.append(len(windows))  # type: ignore[arg-type]
        return _window()

    me = Member("a", 4)
    found = canary(k=4, members=[me, Member("b", 0, _window()), Member("c", 0, _window()),
                                 Member("d", 0, _window(), "the twin d speculates itself")],
                   pool=pool)  # fmt: skip
    assert not isinstance(found, Refusal) and found is not None
    assert found.old == ("b", "c") and pooled == [2]
    assert found.words == "canary: 1 of 4 pods on k = 4, compared with the 2 on k = 0"
    assert any("d: the twin d speculates itself" in n for n in found.notes)
    assert canary(k=4, members=[me, Member("b", 4), Member("c", None)]) is None
    noted = canary(k=None, members=[me, *(Member(n, 0, _window(), None, f"model not checked: {n}")
                                         for n in "bcd")])  # fmt: skip
    assert not isinstance(noted, Refusal) and noted is not None
    assert noted.notes == ("model not checked: b (and 2 more pods alike)",)
    assert (
        noted.words
        == "canary: 1 of 4 pods on speculation (k unknown), compared with the 3 on k = 0"
    )
    refused = canary(k=4, members=[me, Member("b", 0, _window(), "other model")])
    assert isinstance(refused, Refusal) and refused.basis is Evidence.CANARY
    assert refused.reason == "other model"


def test_the_twins_know_each_group_s_members() -> None:
    """Kept current as members come, go and change group (a relabelled pod), sorted."""
    twins = Twins()

    def member(name: str, group: str) -> TargetState:
        cfg = TargetConfig(name=name, url="http://127.0.0.1:1/metrics", group=group)
        state = TargetState(cfg, windows=(30.0,), retention=60.0, twins=twins)
        twins.put(state)
        return state

    b, a, c = member("b", GROUP), member("a", GROUP), member("c", "other")
    assert twins.members(GROUP) == ("a", "b") and twins.members("other") == ("c",)
    b.reconfigure(replace(b.config, group="other"), windows=(30.0,), retention=60.0)
    assert twins.members(GROUP) == ("a",) and twins.members("other") == ("b", "c")
    twins.drop(a)
    assert twins.members(GROUP) == () and twins.members("") == ()
    twins.drop(c)
    assert twins.members("other") == ("b",)


def test_a_restart_of_specmon_during_the_rollout_keeps_the_canary_and_the_past(
    tmp_path: Path,
) -> None:
    """specmon stopped and started again (a state_dir) while the canary runs: the canary's
    verdict is back on the ``canary`` basis once its windows fill again, its epochs and its
    change restored; after the rollout the restored past is its ``history`` basis."""
    group = _Group()
    canary_pod, *old = group.states
    group.advance(70)
    group.switch(canary_pod)
    group.advance(160)
    before = [e.number for e in group.states[canary_pod].view.epochs[0].epochs]
    assert before == [1, 2], before
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=2e9)
    asyncio.run(keeper.save(lambda: list(group.states.values())))
    keeper.close()
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=2e9)
    assert again.open([s.config for s in group.states.values()])
    group.twins = Twins()
    for name, state in list(group.states.items()):
        fresh = TargetState(state.config, windows=(30.0,), retention=60.0, twins=group.twins)
        again.restore(fresh)
        group.twins.put(fresh)
        group.states[name] = fresh
    again.close()
    restored = group.states[canary_pod]
    assert [e.number for e in restored.view.epochs[0].epochs] == before
    group.advance(group.now + 40)
    answer = group.answer(canary_pod)
    assert answer.basis is Evidence.CANARY, words.detail(answer)
    assert answer.speedup is not None and abs(answer.speedup / _truth() - 1) < 0.05
    assert [(c.before.number, c.after.number) for c in restored.view.changes] == [(1, 2)]
    for name in old:
        group.switch(name)
    group.advance(group.now + 60)
    answer = group.answer(canary_pod)
    assert answer.basis is Evidence.HISTORY, words.detail(answer)
    assert answer.speedup is not None and abs(answer.speedup / _truth() - 1) < 0.05
