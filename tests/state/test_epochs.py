"""Configuration epochs from simulated engines' pages (specmon.state.epochs): each change is
detected within its stated number of scrapes, a restart alone is an event, and saved epochs
come back only within the bounds a live one obeys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specmon.engines import read_page
from specmon.sim.engine import SimEngine, SimSettings
from specmon.sim.pages import PageKind, load_template
from specmon.state.epoch_book import EpochBook
from specmon.state.epochs import (
    K_SCRAPES,
    MAX_EPOCHS,
    MIN_EPOCH_SECONDS,
    OFF_SCRAPES,
    VANISH_SCRAPES,
    Reason,
)
from tests.support.captured import DRAFTLESS, PAGES

INTERVAL = 5.0
START = 1_780_000_000.0
#: Scrapes an epoch lasts before the next change (a briefer one is a flap).
LASTING = int(MIN_EPOCH_SECONDS / INTERVAL) + K_SCRAPES + 1


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
    w.scrape(LASTING)  # the epoch lasts (a briefer one is a flap: folded back)
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
    w.scrape(LASTING)
    w.configure(speculation=True)
    w.scrape(LASTING)
    for i in range(3 * MAX_EPOCHS):
        w.configure(survival=(0.9, 0.7) if i % 2 == 0 else (0.9, 0.7, 0.5))
        w.scrape(LASTING)
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


# --------------------------------------------------------------------------- hostile pages
# Issue 61: what an epoch counts obeys the laws a restored one must (a target whose counters
# alternated, or whose positions did, was counted anyway, written, and its record then
# refused the whole state file at the next start).

MOST = 2**53 - 1


def _vllm(drafts: int, tokens: int, accepted: int, positions: list[int], gen: int = 0) -> str:
    m = 'engine="0",model_name="m"'
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{m}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{m}}} {tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{m}}} {accepted}",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{m},position="{i}"}} {v}'
            for i, v in enumerate(positions)
        ),
        f"vllm:generation_tokens_total{{{m}}} {gen}",
    ]
    return "\n".join(lines) + "\n"


def _feed(book: EpochBook, pages: list[str]) -> None:
    for i, page in enumerate(pages):
        reading = read_page(page)
        assert reading.models, reading.rejected  # each page is valid alone
        book.observe(reading, START + INTERVAL * (i + 1))


def _within_bounds(book: EpochBook) -> None:
    """Every epoch within the laws, and its saved form restored without a refusal."""
    (view,) = book.view()
    for e in view.epochs:
        assert max(e.drafts, e.draft_tokens, e.accepted_tokens, e.generated_tokens) <= 2**53
        if e.drafts:
            assert 1 + e.accepted_tokens / e.drafts <= (e.chain_length or 64) + 1 + 1e-9
    EpochBook().restore(book.to_json(), now=START + 10**6)


def test_counters_alternating_between_0_and_2_53_stay_within_every_bound() -> None:
    big = _vllm(MOST // 4, MOST, MOST // 2, [MOST // 4, MOST // 8], gen=MOST)
    zero = _vllm(0, 0, 0, [0, 0], gen=0)
    book = EpochBook()
    _feed(book, [big, zero] * 50)
    _within_bounds(book)


def test_positions_alternating_between_2_and_4_keep_the_epoch_within_k_plus_1() -> None:
    pages = []
    for i in range(1, 101):
        d = 1000 * i  # 3.5 tokens accepted a draft: a k = 4 server's, not a k = 2 one's
        positions = [d, d, d, d // 2] if i % 2 else [d, d]
        pages.append(_vllm(d, 4 * d, 7 * d // 2, positions, gen=10 * d))
    book = EpochBook()
    _feed(book, pages)
    (view,) = book.view()
    assert view.current.chain_length == 4 and len(view.epochs) == 1  # first seen with 4
    _within_bounds(book)
    two_first = EpochBook()
    _feed(two_first, pages[1:])  # first seen with 2: the k = 4 intervals do not fit k = 2
    (view,) = two_first.view()
    assert view.current.chain_length == 2 and view.current.drafts == 0
    assert view.current.generated_tokens == 10 * 1000 * (100 - 2)  # the rest counted
    _within_bounds(two_first)


def test_a_counter_falling_while_the_drafts_do_not_is_no_rise() -> None:
    """A broken page (accepted tokens down to 0, drafts rising) is neither counted nor the
    baseline, as the windows refuse it: the rise back is not taken whole."""
    pages = [_vllm(100 * i, 400 * i, 200 * i, [100 * i, 60 * i], gen=1000 * i) for i in (1, 2)]
    pages.append(_vllm(300, 1200, 0, [0, 0], gen=3000))  # the broken page
    pages += [_vllm(100 * i, 400 * i, 200 * i, [100 * i, 60 * i], gen=1000 * i) for i in (4, 5)]
    book = EpochBook()
    _feed(book, pages)
    (view,) = book.view()
    assert view.current.accepted_tokens == 200 * 5 - 200  # from the first page: no more
    assert view.current.drafts == 100 * 5 - 100
    (event,) = view.events if view.events else (None,)
    assert event is None  # not a restart either


def test_an_epoch_not_yet_known_to_speculate_counts_no_drafts() -> None:
    """Drafted tokens rising while the drafts counter stays at 0: the epoch is not known to
    speculate (the drafts are its evidence) and must not count them (the saved form is
    refused with them)."""
    pages = [_vllm(0, 40 * i, 0, [0, 0], gen=100 * i) for i in range(1, 4)]
    book = EpochBook()
    _feed(book, pages)
    (view,) = book.view()
    assert view.current.speculation is None and view.current.draft_tokens == 0
    assert view.current.generated_tokens == 200
    _within_bounds(book)


def test_speculation_flapping_every_2_scrapes_makes_no_new_epoch_numbers() -> None:
    """Issue 61: the `epoch` label of specmon_config_epoch_info took a new value every few
    seconds. A change that ends an epoch younger than MIN_EPOCH_SECONDS folds it back (or
    takes its place): the numbers stay those of the epochs that lasted."""
    w = Watched(PageKind.VLLM, K4)
    w.scrape(LASTING)
    numbers: set[int] = set()
    for i in range(60):
        w.configure(speculation=i % 2 == 1)
        w.scrape(VANISH_SCRAPES)
        numbers.update(e.number for e in w.book.view()[0].epochs)
    assert numbers <= {1, 2}, numbers
    (view,) = w.book.view()
    assert any("flapping" in text for _, text in view.events)
    names = {name for _, name, _ in w.events}
    assert names <= {"config_epoch_started", "config_epoch_folded", "config_epoch_replaced"}
    _within_bounds(w.book)
    # A configuration that then holds is a new epoch as before.
    w.configure(survival=(0.9, 0.7))
    w.scrape(LASTING)
    assert w.epochs()[-1][1:] == (True, 2, "chain_length")


def test_a_page_from_another_engine_now_and_then_clears_no_epoch() -> None:
    """Issue 61: a page alternating between vLLM and llama.cpp cleared the epochs (and the
    curves) at every scrape. Another engine must hold ENGINE_SCRAPES pages in a row."""
    w = Watched(PageKind.VLLM, K4)
    other = load_template(PageKind.LLAMACPP)
    w.scrape(5)
    (before,) = w.book.view()
    for _ in range(20):
        w.scrape(2)
        w.book.observe(read_page(other.render(w.engine, model="m")), START + w.now + 1)
    (after,) = w.book.view()
    assert w.book.engine == "vllm"
    assert after.epochs[0].start == before.epochs[0].start
    assert after.current.scrapes > before.current.scrapes
    for i in range(3):  # three llama.cpp pages in a row: another engine
        w.book.observe(read_page(other.render(w.engine, model="m")), START + w.now + 2 + i)
    assert w.book.engine == "llamacpp"


def test_a_wall_clock_stepping_back_keeps_the_epochs_in_order() -> None:
    w = Watched(PageKind.VLLM, K4)
    w.scrape(LASTING)
    w.now -= 3600.0  # the wall clock stepped back an hour
    w.configure(survival=(0.9, 0.7))
    w.scrape(LASTING)
    (view,) = w.book.view()
    assert view.current.start >= view.epochs[0].start
    EpochBook().restore(w.book.to_json(), now=START + w.now)
