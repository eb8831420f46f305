"""``specmon tap --event-loop``: uvloop when installed (auto) or asked for, asyncio's own
otherwise; uvloop asked for and missing is an error, never a silent fallback."""

from __future__ import annotations

import asyncio
import importlib
import types

import pytest

from specmon.cli import tap as tap_cli


def _missing(name: str) -> types.ModuleType:
    raise ImportError(name)


def test_asyncio_is_asyncios_own_loop() -> None:
    assert tap_cli.loop_factory("asyncio") is None


def test_without_uvloop_auto_falls_back_and_uvloop_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib, "import_module", _missing)
    assert tap_cli.loop_factory("auto") is None
    with pytest.raises(ImportError):
        tap_cli.loop_factory("uvloop")


def test_with_uvloop_auto_takes_its_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("uvloop")
    fake.new_event_loop = asyncio.new_event_loop  # type: ignore[attr-defined]
    real = importlib.import_module
    monkeypatch.setattr(
        importlib, "import_module", lambda name: fake if name == "uvloop" else real(name)
    )
    assert tap_cli.loop_factory("auto") is asyncio.new_event_loop
    assert tap_cli.loop_factory("uvloop") is asyncio.new_event_loop
