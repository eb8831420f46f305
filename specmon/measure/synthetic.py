"""Synthetic prompts of a given length, in the server's own tokens. Pure.

specmon carries no tokenizer: the length is calibrated against the server, which reports
each request's ``usage.prompt_tokens`` (the chat template included, as the server counts
it). Two probe prompts of known word counts give the template's overhead and the tokens per
word (:func:`fit`); each prompt is then made with the words that should reach the target
(:func:`words_for`), probed, and corrected once. The runner does the probing
(:mod:`specmon.measure.runner`); the measured mean is reported beside the length asked for.

The words are common English ones drawn from a seeded generator: distinct prompts, the same
on every run with the same seed.
"""

from __future__ import annotations

import random

__all__ = [
    "PROBE_WORDS",
    "SYNTHETIC_PROMPTS",
    "VOCABULARY",
    "fit",
    "synthetic_name",
    "synthetic_text",
    "words_for",
]

#: Distinct prompts per synthetic workload (each sent --repeats times).
SYNTHETIC_PROMPTS = 8
#: Word counts of the two calibration probes.
PROBE_WORDS = (16, 128)
#: Largest prompt made, in words (a bound on a mistaken --input-tokens).
MAX_WORDS = 200_000

VOCABULARY = (
    "the", "model", "server", "token", "request", "answer", "question", "time", "people",
    "water", "river", "mountain", "city", "history", "music", "garden", "morning", "light",
    "number", "system", "memory", "paper", "window", "energy", "market", "school", "story",
    "table", "language", "bridge", "winter", "summer", "forest", "engine", "signal", "field",
    "simple", "quiet", "bright", "early", "small", "large", "green", "careful", "open",
    "write", "read", "build", "measure", "follow", "explain", "describe", "carry", "find",
    "and", "of", "to", "in", "with", "for", "on", "after", "before", "under",
)  # fmt: skip


def synthetic_name(tokens: int) -> str:
    """The workload's name: ``in-256``."""
    return f"in-{tokens}"


def synthetic_text(words: int, *, seed: int) -> str:
    """``words`` words from :data:`VOCABULARY`, deterministic for a seed (the model goes on
    from them: the point is the prompt's length)."""
    words = max(1, min(words, MAX_WORDS))
    rng = random.Random(seed)  # noqa: S311 - text, not security
    return " ".join(rng.choice(VOCABULARY) for _ in range(words))


def fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(overhead, tokens per word) of the line through the (words, prompt tokens) points
    (least squares). Raises ValueError when the points do not grow with the words."""
    if len(points) < 2:
        raise ValueError("two probes are needed")
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx <= 0:
        raise ValueError("the probes have the same length")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    if slope <= 0:
        raise ValueError(
            "the server's prompt_tokens did not grow with the prompt: it does not count them"
        )
    return mean_y - slope * mean_x, slope


def words_for(tokens: int, *, overhead: float, per_word: float) -> int:
    """Words that should make a prompt of ``tokens`` prompt tokens (at least one)."""
    return max(1, min(MAX_WORDS, round((tokens - overhead) / per_word)))
