"""Configuration epochs from simulated engines' pages (specmon.state.epochs): each change is
detected within its stated number of scrapes, a restart alone is an event, and saved epochs
come back only within the bounds a live one obeys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specmon.engines import read_page
from specmon.sim.engine import SimEngine, SimSettings
from specmon.sim.pages import PageKind, load_template
from specmon.state.epochs import (
    K_SCRAPES,
    MAX_EPOCHS,
    OFF_SCRAPES,
    VANISH_SCRAPES,
    EpochBook,
    Reason,
)
from tests.support.captured import DRAFTLESS, PAGES

INTERVAL = 5.0
START = 1_780_000_000.0


class Watched:
    """A simulated engine and the epoch book that reads its page every INTERVAL."""

    def __init__(self, kind: PageKind, settings: SimSettings, *, model: str = "m") -> None:
        self.kind = kind
        self.template = load_template(kind)
        self.engine = SimEngine(settings=settings, seed=7, now=0.0, wall=START)
        self.model = model
        self.book = EpochBook()
        self.now = 0.0
        self.events: list[tuple[float, str, dict[str, object]]] = []

    def scrape(self, times: int = 1) -> None:
        for _ in range(times):
            self.now += INTERVAL
            self.engine.advance(self.now)
            page = self.template.render(self.engine, model=self.model)
            reading = read_page(page)
            for name, fields in self.book.observe(reading, START + self.now):
                self.events.append((self.now, name, fields))

    def configure(self, **changes: object) -> float:
        """New settings now (a new k restarts the engine); the wall time of the change."""
        settings = replace(self.engine.settings, **changes)  # type: ignore[arg-type]
        self.engine.configure(settings, now=self.now, wall=START + self.now)
        return START + self.now

    def epochs(self) -> list[tuple[int, bool | None, int | None, str]]:
        (view,) = self.book.view()
        return [(e.number, e.speculation, e.chain_length, e.reason.value) for e in view.epochs]

    def scrapes_until_new_epoch(self, limit: int = 20) -> int:
        before = len(self.book.view()[0].epochs)
        for n in range(1, limit + 1):
            self.scrape()
            if len(self.book.view()[0].epochs) > before:
                return n
        raise AssertionError(f"no new epoch within {limit} scrapes")


K4 = SimSettings(survival=(0.9, 0.7, 0.5, 0.3), drafts_per_second=20.0)


def test_a_restart_with_k_2_after_k_4_is_a_new_epoch_within_k_scrapes() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(10)
    assert w.epochs() == [(1, True, 4, "first_seen")]
    changed_at = w.configure(survival=(0.9, 0.7))  # k = 2: the engine restarts
    assert w.engine.restarts == 1
    assert w.scrapes_until_new_epoch() <= K_SCRAPES
    assert w.epochs() == [(1, True, 4, "first_seen"), (2, True, 2, "chain_length")]
    (view,) = w.book.view()
    # The epoch starts at the first scrape that showed k = 2, not at the confirmation.
    assert view.current.start == changed_at + INTERVAL
    assert view.previous is not None and view.previous.end == view.current.start
    assert [text for _, text in view.events] == ["engine restarted (its counters fell)"]


def test_a_restart_alone_is_an_event_not_an_epoch() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(5)
    w.engine.restart(now=w.now, wall=START + w.now)
    w.scrape(10)
    assert w.epochs() == [(1, True, 4, "first_seen")]
    assert [e for _, e, _ in w.events] == []
    assert [text for _, text in w.book.view()[0].events] == ["engine restarted (its counters fell)"]


def test_drafts_that_stop_for_good_with_the_series_kept_end_speculation() -> None:
    # llama-server keeps printing its speculative counters (flat) without drafts.
    w = Watched(PageKind.LLAMACPP, replace(K4, drafts_per_request=5))
    w.scrape(10)
    assert w.epochs()[0][1] is True
    stopped_at = w.configure(speculation=False)
    n = w.scrapes_until_new_epoch()
    # The stated number of scrapes (the tokens generated meanwhile are far above 400).
    assert n <= OFF_SCRAPES + 1  # +1: llama.cpp's counters land when a request ends
    assert w.epochs()[-1] == (2, False, None, "speculation_off")
    (view,) = w.book.view()
    assert view.current.start >= stopped_at
    assert view.current.drafts == 0
    assert view.current.generated_tokens > 400


def test_vanished_series_end_speculation_and_their_return_starts_it() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(5)
    w.configure(speculation=False)  # vLLM drops the families
    assert w.scrapes_until_new_epoch() == VANISH_SCRAPES
    assert w.epochs()[-1] == (2, False, None, "series_vanished")
    w.configure(speculation=True)
    assert w.scrapes_until_new_epoch() == 1
    assert w.epochs()[-1] == (3, True, 4, "speculation_on")


def test_a_few_idle_scrapes_are_no_epoch() -> None:
    # Drafts pause while nothing is generated: not "off" (no tokens rose).
    w = Watched(PageKind.VLLM, replace(K4, drafts_per_second=0.0))
    w.scrape(3)
    w.engine.settings = replace(w.engine.settings, drafts_per_second=20.0)
    w.scrape(3)
    w.engine.settings = replace(w.engine.settings, drafts_per_second=0.0)
    w.scrape(OFF_SCRAPES * 3)
    assert len(w.epochs()) == 1


def test_sglang_spec_num_steps_changed_is_an_engine_config_epoch() -> None:
    w = Watched(PageKind.SGLANG_CURRENT, K4)
    w.scrape(5)
    assert w.epochs() == [(1, True, 4, "first_seen")]
    w.configure(survival=(0.9, 0.7, 0.5))
    assert w.scrapes_until_new_epoch() <= K_SCRAPES
    assert w.epochs()[-1] == (2, True, 3, "engine_config")


def test_trtllm_config_info_changed_is_an_engine_config_epoch() -> None:
    w = Watched(PageKind.TRTLLM, K4)
    w.scrape(5)
    w.configure(survival=(0.9, 0.7))
    assert w.scrapes_until_new_epoch() <= K_SCRAPES
    assert w.epochs()[-1][1:] == (True, 2, "engine_config")


def test_llamacpp_restart_without_position_series_yet_is_no_change() -> None:
    w = Watched(PageKind.LLAMACPP, replace(K4, drafts_per_request=400))
    w.scrape(40)
    assert w.epochs() == [(1, True, 4, "first_seen")]
    w.engine.restart(now=w.now, wall=START + w.now)  # positions hidden until a request ends
    w.scrape(3)
    assert len(w.epochs()) == 1
    w.scrape(40)
    assert len(w.epochs()) == 1


def test_a_mark_by_hand_starts_an_epoch_with_its_note() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(3)
    (epoch,) = w.book.mark(wall=START + w.now, note="draft model swapped to 1B")
    assert epoch.reason is Reason.MANUAL and epoch.note == "draft model swapped to 1B"
    assert epoch.chain_length == 4 and epoch.number == 2
    assert w.book.mark(wall=START, note="x", model="other") == []


def test_epochs_are_counted_and_restored_across_a_restart_of_specmon() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(6)
    w.configure(survival=(0.9, 0.7))
    w.scrape(6)
    saved = w.book.to_json()
    book = EpochBook()
    book.restore(saved, now=START + w.now)
    (restored,) = book.view()
    (live,) = w.book.view()
    assert restored.epochs == live.epochs
    assert live.previous is not None and live.previous.drafts > 0
    assert live.previous.accepted_tokens <= live.previous.draft_tokens


def test_a_restored_epoch_outside_the_bounds_refuses_the_whole_model() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(3)
    good = w.book.to_json()
    now = START + w.now
    for bad, says in (
        ({"accepted": 10**6, "draft_tokens": 10}, "more accepted"),
        ({"accepted": 100, "draft_tokens": 100, "drafts": 10, "k": 4}, "above k \\+ 1"),
        ({"k": 0}, "chain length"),
        ({"k": 65}, "chain length"),
        ({"start": float("nan")}, "start"),
        ({"start": now + 10 * 86400}, "start"),
        ({"drafts": -1}, "drafts"),
        ({"reason": "nonsense"}, "reason"),
        ({"spec": "yes"}, "speculation"),
        ({"note": "x" * 1000}, "note"),
    ):
        data = {"m": {"epochs": [{**good["m"]["epochs"][0], **bad}], "events": []}}
        book = EpochBook()
        with pytest.raises(ValueError, match=says):
            book.restore(data, now=now)
        assert book.view() == ()


def test_eviction_keeps_the_newest_epoch_of_each_configuration() -> None:
    # A crash loop of k changes must not evict the only epoch without speculation.
    w = Watched(PageKind.VLLM, K4)
    w.scrape(3)
    w.configure(speculation=False)
    w.scrape(VANISH_SCRAPES + 2)
    w.configure(speculation=True)
    w.scrape(2)
    for i in range(3 * MAX_EPOCHS):
        w.configure(survival=(0.9, 0.7) if i % 2 == 0 else (0.9, 0.7, 0.5))
        w.scrape(K_SCRAPES + 1)
    (view,) = w.book.view()
    assert len(view.epochs) == MAX_EPOCHS
    assert any(not e.speculation for e in view.epochs)
    assert [e.number for e in view.epochs] == sorted(e.number for e in view.epochs)
    # What is written is what is kept (the past epochs' saved form is made once each).
    again = EpochBook()
    again.restore(w.book.to_json(), now=START + w.now)
    assert again.view()[0].epochs == view.epochs


def test_specmons_own_downtime_is_counted_in_no_epoch() -> None:
    """A restored tracker counts from its second live reading: the interval spanning the
    downtime (its drafts and tokens) goes nowhere."""
    w = Watched(PageKind.VLLM, K4)
    w.scrape(4)
    saved = w.book.to_json()
    (before,) = w.book.view()
    w.now += 600.0  # specmon down for ten minutes while the engine serves
    book = EpochBook()
    book.restore(saved, now=START + w.now)
    w.book = book
    w.scrape()
    (first,) = w.book.view()
    assert first.current.scrapes == before.current.scrapes
    assert first.current.drafts == before.current.drafts
    w.scrape()
    (second,) = w.book.view()
    assert second.current.scrapes == before.current.scrapes + 1
    assert 0 < second.current.drafts - before.current.drafts < 20.0 * INTERVAL * 3


def _epochs(book: EpochBook) -> list[tuple[int, bool | None, int | None, str]]:
    (view,) = book.view()
    return [(e.number, e.speculation, e.chain_length, e.reason.value) for e in view.epochs]


def test_a_draftless_llama_server_is_one_epoch_without_speculation() -> None:
    """The real-engine tier's draft-less llama-server (its pages): not a speculating first
    epoch closed by ``speculation_off``, but one epoch, not known to speculate until its
    tokens rise without a draft over OFF_SCRAPES scrapes, then without speculation."""
    book = EpochBook()
    events: list[tuple[str, dict[str, object]]] = []
    for i, name in enumerate(DRAFTLESS):
        reading = read_page((PAGES / name).read_text())
        assert reading.models and not reading.plain_models  # it names its (flat) counters
        events += book.observe(reading, START + INTERVAL * i)
        if i < OFF_SCRAPES:
            assert _epochs(book) == [(1, None, None, "first_seen")], i
            (view,) = book.view()
            assert "not yet known" in view.current.describe()
    assert _epochs(book) == [(1, False, None, "first_seen")]
    (view,) = book.view()
    assert view.current.describe() == "without speculation"
    assert view.current.generated_tokens == 9608 - 8 and view.current.scrapes == OFF_SCRAPES
    assert [name for name, _ in events] == ["config_epoch_settled"]
    assert events[0][1]["speculation"] is False


def test_a_draftless_server_that_gets_a_draft_starts_a_speculating_epoch() -> None:
    w = Watched(PageKind.LLAMACPP, replace(K4, speculation=False, drafts_per_request=5))
    w.scrape(OFF_SCRAPES + 3)
    assert w.epochs() == [(1, False, None, "first_seen")]
    w.configure(speculation=True)
    w.scrapes_until_new_epoch()
    assert w.epochs() == [(1, False, None, "first_seen"), (2, True, 4, "speculation_on")]


def test_a_fresh_server_with_a_draft_settles_speculating_at_its_first_draft() -> None:
    # Counters at 0 at first sight (nothing served yet): not known; the first drafts settle
    # the same epoch, no change is recorded.
    w = Watched(PageKind.LLAMACPP, replace(K4, drafts_per_second=0.0, drafts_per_request=5))
    w.scrape(3)
    assert w.epochs() == [(1, None, None, "first_seen")]
    w.engine.settings = replace(w.engine.settings, drafts_per_second=20.0)
    w.scrape(OFF_SCRAPES * 3)
    assert w.epochs() == [(1, True, 4, "first_seen")]
    (view,) = w.book.view()
    assert view.current.drafts > 0
    # ... and a server that then really stops drafting gets a new epoch.
    w.configure(speculation=False)
    w.scrapes_until_new_epoch()
    assert w.epochs()[-1] == (2, False, None, "speculation_off")


def test_a_not_yet_known_epoch_is_saved_and_restored_as_such() -> None:
    book = EpochBook()
    book.observe(read_page((PAGES / DRAFTLESS[0]).read_text()), START)
    saved = book.to_json()
    (raw,) = saved[next(iter(saved))]["epochs"]
    assert raw["spec"] is False and raw["unsure"] is True  # an older specmon reads it as off
    again = EpochBook()
    again.restore(saved, now=START + 60)
    assert _epochs(again) == [(1, None, None, "first_seen")]
    # A file written before the field existed: its epochs are known.
    del raw["unsure"]
    older = EpochBook()
    older.restore(saved, now=START + 60)
    assert _epochs(older) == [(1, False, None, "first_seen")]
    with pytest.raises(ValueError, match="not yet known"):
        EpochBook().restore(
            {"m": {"epochs": [{**raw, "unsure": True, "drafts": 3, "draft_tokens": 9}]}},
            now=START + 60,
        )


@pytest.mark.parametrize("kind", [PageKind.TGI, PageKind.TGI_HISTOGRAM])
def test_tgi_settles_its_first_epoch_either_way(kind: PageKind) -> None:
    """TGI shows no speculative figures until its first accepted token (the mirror image of a
    draft-less llama-server): its first epoch is not known until then, and is settled in place
    by the first accepted tokens, or as without speculation by tokens without any."""
    w = Watched(kind, replace(K4, drafts_per_second=0.0, drafts_per_request=5))
    w.scrape(3)
    assert [e[:2] for e in w.epochs()] == [(1, None)]
    w.engine.settings = replace(w.engine.settings, drafts_per_second=20.0)
    w.scrape(OFF_SCRAPES * 3)
    assert [e[:2] for e in w.epochs()] == [(1, True)]  # no speculation_on epoch
    assert [name for _, name, _ in w.events] == ["config_epoch_settled"]
    off = Watched(kind, replace(K4, speculation=False, drafts_per_request=5))
    off.scrape(OFF_SCRAPES + 3)
    assert off.epochs() == [(1, False, None, "first_seen")]
