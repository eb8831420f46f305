"""Redaction: secrets are taken out of a remote text before it is cut, and nothing of four or
more characters of a secret survives, whatever the cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.secrets import REDACTED, Secret, redact

SECRET = "tok-9f8e7d6c5b4a3210"


def _parts(secret: str, n: int = 4) -> set[str]:
    return {secret[i : i + n] for i in range(len(secret) - n + 1)}


def _leaks(text: str, secret: str) -> list[str]:
    return [part for part in _parts(secret) if part in text]


def test_no_cut_leaves_a_prefix_of_a_secret() -> None:
    for before in range(40):
        text = "x" * before + "Authorization: Bearer " + SECRET + " was sent"
        for limit in range(1, len(text) + 3):
            out = redact(text, [Secret(SECRET)], limit=limit)
            assert not _leaks(out, SECRET), (before, limit, out)
            assert len(out) <= limit + 3 + len(REDACTED)


def test_a_secret_the_server_echoed_in_part_is_taken_out() -> None:
    out = redact("upstream said: Bearer tok-9f8e7d (truncated)", [SECRET])
    assert not _leaks(out, SECRET) and REDACTED in out
    assert out.startswith("upstream said: Bearer ")


def test_short_secrets_and_ordinary_text_are_left_alone() -> None:
    assert redact("HTTP 500: internal error", ["ab", ""]) == "HTTP 500: internal error"
    assert redact("HTTP 500: internal error", [SECRET]) == "HTTP 500: internal error"


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(alphabet="abcdef0123456789-_", min_size=8, max_size=40),
    noise=st.lists(st.text(alphabet="xyz <>:", max_size=30), max_size=6),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    limit=st.one_of(st.none(), st.integers(1, 200)),
)
def test_nothing_of_four_characters_survives(
    secret: str, noise: list[str], cuts: list[int], limit: int | None
) -> None:
    """Any text made of noise and whole or cut copies of the secret, cut anywhere."""
    pieces = []
    for i, part in enumerate(noise):
        pieces.append(part)
        cut = cuts[i] if i < len(cuts) else len(secret)
        pieces.append(secret[:cut] if i % 2 else secret[-cut:] if cut else "")
    text = "".join(pieces) + secret
    out = redact(text, [Secret(secret)], limit=limit)
    assert not _leaks(out, secret), (text, out)
