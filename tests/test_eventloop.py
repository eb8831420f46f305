"""The daemon's event loop choice (specmon/eventloop.py)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from specmon import eventloop


async def _which() -> str:
    return eventloop.loop_name(asyncio.get_running_loop())


def test_auto_runs_on_uvloop_where_installed() -> None:
    pytest.importorskip("uvloop")  # a dependency on Linux: installed by ./dev.sh
    assert eventloop.run(_which()) == "uvloop"
    assert eventloop.run(_which(), choice="uvloop") == "uvloop"


def test_asyncio_is_the_standard_loop() -> None:
    assert eventloop.loop_factory("asyncio") is None
    assert eventloop.run(_which(), choice="asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert eventloop.loop_factory("auto") is None
    assert eventloop.run(_which()) == "asyncio"
    with pytest.raises(ValueError, match="uvloop is not installed"):
        eventloop.loop_factory("uvloop")


def test_unknown_choice() -> None:
    with pytest.raises(ValueError, match="unknown event loop 'tokio'"):
        eventloop.loop_factory("tokio")


def test_the_result_and_exceptions_come_back() -> None:
    async def fails() -> None:
        raise KeyError("x")

    for choice in eventloop.CHOICES:
        with pytest.raises(KeyError):
            eventloop.run(fails(), choice=choice)
