"""Byte-for-byte comparison of the two servers' completions. Pure.

At temperature 0, verification keeps exactly the tokens the target would have produced, so the
completions of the server without a draft and of its twin with one should be identical bytes.
They can still differ "within hardware numerics" (Chen et al. 2023; docs/background.md): a different
batch shape changes the order of floating-point reductions and can flip a near-tie. This module
says where the first difference is; :data:`DIVERGENCE_CAVEAT` says what to make of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "DIVERGENCE_CAVEAT",
    "Comparison",
    "Difference",
    "Key",
    "compare",
    "escape",
    "first_difference",
    "unstable_prompts",
]

#: (workload, prompt index, repeat)
Key = tuple[str, int, int]

DIVERGENCE_CAVEAT = (
    "Greedy speculative decoding keeps only tokens the target itself would have chosen, so at "
    "temperature 0 the two servers should return identical bytes. The guarantee holds "
    '"within hardware numerics" (Chen et al.): a different batch shape - the verification '
    "pass over k + 1 positions, or other requests batched alongside at concurrency above 1 - "
    "changes the order of floating-point reductions, which can shift a logit in the last "
    "place and flip a near-tie between two tokens; from there the texts go their own ways. A "
    "difference that appears only under concurrency, late in a long completion, is most "
    "likely that. A difference in the first tokens, or at concurrency 1 on every run, is a "
    "bug to investigate: check that both servers load the same weights at the same "
    "quantisation, context length and build, with the same chat template, before publishing "
    "any speed figure."
)

_BEFORE = 24
_AFTER = 48


@dataclass(frozen=True, slots=True)
class Difference:
    workload: str
    prompt_index: int
    repeat: int
    #: Offset of the first differing byte in the UTF-8 encoding.
    byte_offset: int
    #: Offset of the first differing character (the common prefix length in characters).
    char_offset: int
    baseline_bytes: int
    speculative_bytes: int
    #: Text from a little before the difference, on each side.
    baseline_excerpt: str
    speculative_excerpt: str
    #: True when the excerpt does not start at the beginning of the completion.
    excerpt_cut: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "prompt_index": self.prompt_index,
            "repeat": self.repeat,
            "byte_offset": self.byte_offset,
            "char_offset": self.char_offset,
            "baseline_bytes": self.baseline_bytes,
            "speculative_bytes": self.speculative_bytes,
            "baseline_excerpt": self.baseline_excerpt,
            "speculative_excerpt": self.speculative_excerpt,
            "excerpt_cut": self.excerpt_cut,
        }


def first_difference(baseline: str, speculative: str) -> tuple[int, int] | None:
    """(byte offset, character offset) of the first difference, or None when identical.

    When one text is a prefix of the other, the difference is at the shorter one's end.
    """
    a, b = baseline.encode("utf-8"), speculative.encode("utf-8")
    if a == b:
        return None
    chars = 0
    for ca, cb in zip(baseline, speculative, strict=False):
        if ca != cb:
            break
        chars += 1
    prefix = baseline[:chars].encode("utf-8")
    byte = len(prefix)
    # Inside the first differing character, the encodings may share leading bytes.
    rest_a, rest_b = a[byte:], b[byte:]
    for xa, xb in zip(rest_a, rest_b, strict=False):
        if xa != xb:
            break
        byte += 1
    return byte, chars


def _difference(key: Key, baseline: str, speculative: str) -> Difference | None:
    found = first_difference(baseline, speculative)
    if found is None:
        return None
    byte, char = found
    start = max(0, char - _BEFORE)
    return Difference(
        workload=key[0],
        prompt_index=key[1],
        repeat=key[2],
        byte_offset=byte,
        char_offset=char,
        baseline_bytes=len(baseline.encode("utf-8")),
        speculative_bytes=len(speculative.encode("utf-8")),
        baseline_excerpt=baseline[start : char + _AFTER],
        speculative_excerpt=speculative[start : char + _AFTER],
        excerpt_cut=start > 0,
    )


@dataclass(frozen=True, slots=True)
class Comparison:
    #: Pairs where both servers answered.
    compared: int
    identical: int
    #: Pairs where at least one server failed: nothing to compare.
    not_compared: int
    differences: tuple[Difference, ...]
    #: Prompts whose repeats did not all return the same text, per side (non-determinism that
    #: has nothing to do with the draft when it shows on the baseline).
    baseline_unstable: int = 0
    speculative_unstable: int = 0

    @property
    def differing(self) -> int:
        return len(self.differences)

    @property
    def all_identical(self) -> bool | None:
        """True/False once something was compared; None when nothing could be."""
        return None if self.compared == 0 else self.differing == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "compared": self.compared,
            "identical": self.identical,
            "differing": self.differing,
            "not_compared": self.not_compared,
            "all_identical": self.all_identical,
            "baseline_unstable_prompts": self.baseline_unstable,
            "speculative_unstable_prompts": self.speculative_unstable,
            "differences": [d.as_dict() for d in self.differences],
        }

    @staticmethod
    def combine(parts: Iterable[Comparison]) -> Comparison:
        items = list(parts)
        return Comparison(
            compared=sum(p.compared for p in items),
            identical=sum(p.identical for p in items),
            not_compared=sum(p.not_compared for p in items),
            differences=tuple(d for p in items for d in p.differences),
            baseline_unstable=sum(p.baseline_unstable for p in items),
            speculative_unstable=sum(p.speculative_unstable for p in items),
        )


def unstable_prompts(texts: Mapping[Key, str]) -> int:
    """How many (workload, prompt) pairs returned more than one distinct text across repeats."""
    by_prompt: dict[tuple[str, int], set[str]] = defaultdict(set)
    for (workload, index, _repeat), text in texts.items():
        by_prompt[(workload, index)].add(text)
    return sum(1 for variants in by_prompt.values() if len(variants) > 1)


def compare(
    baseline: Mapping[Key, str | None], speculative: Mapping[Key, str | None]
) -> Comparison:
    """Compare completions key by key; ``None`` (or a missing key) is a failed request."""
    keys = sorted(set(baseline) | set(speculative))
    identical = not_compared = 0
    differences: list[Difference] = []
    for key in keys:
        a, b = baseline.get(key), speculative.get(key)
        if a is None or b is None:
            not_compared += 1
            continue
        difference = _difference(key, a, b)
        if difference is None:
            identical += 1
        else:
            differences.append(difference)
    return Comparison(
        compared=identical + len(differences),
        identical=identical,
        not_compared=not_compared,
        differences=tuple(differences),
        baseline_unstable=unstable_prompts({k: v for k, v in baseline.items() if v is not None}),
        speculative_unstable=unstable_prompts(
            {k: v for k, v in speculative.items() if v is not None}
        ),
    )


def escape(text: str) -> str:
    """Text with control and other invisible characters made visible (``\\n``, ``\\x07``)."""
    out: list[str] = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x100:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    return "".join(out)
