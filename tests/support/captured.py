"""Captured pages shared by several tests (tests/fixtures/pages/README.md says where each
comes from)."""

from __future__ import annotations

from pathlib import Path

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"

#: A real llama-server started without a draft model (the real-engine tier's), read at
#: concurrency 1 then 4, then idle: it publishes its speculative counters, at 0, on every page.
DRAFTLESS = (
    "llamacpp-load-baseline-c1-before.txt",
    "llamacpp-load-baseline-c1-after.txt",
    "llamacpp-load-baseline-c4-before.txt",
    "llamacpp-load-baseline-c4-during.txt",
    "llamacpp-load-baseline-c4-after.txt",
    "llamacpp-load-baseline-c4-after.txt",  # idle: nothing generated, still no draft
)
