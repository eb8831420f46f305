"""Workloads: the built-in prompt sets, a prompts file that adds or replaces them, a chat
dataset (:mod:`specmon.measure.dataset`) and synthetic prompts of a given length
(:mod:`specmon.measure.synthetic`).

Pure: ``parse_prompts`` takes the file's text; only :func:`load_prompts_file` touches disk.
A workload is a list of requests, each a list of (role, content) messages: a prompt is one
user message.

A prompts file holds either one prompt per non-blank line, or JSON lines
``{"workload": "copy", "prompt": "..."}`` (a JSON line is one that starts with ``{``; both kinds
may be mixed). A line without a workload belongs to the workload named after the file (its
stem). A workload named like a built-in one replaces it; any other name adds a workload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BUILTIN_WORKLOADS",
    "WORKLOAD_TITLES",
    "Conversation",
    "PromptsError",
    "Workload",
    "available_workloads",
    "load_prompts_file",
    "parse_prompts",
    "select_workloads",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")

#: Three shapes of work (``measure-speculative.py``), verbatim. "copy" repeats
#: material already in the prompt, where lookup-based drafting wins; "closed" has one
#: predictable answer; "open" is high-entropy writing, where a draft agrees least often.
BUILTIN_WORKLOADS: Mapping[str, tuple[str, ...]] = {
    "copy": (
        "Here is a function:\n\ndef total(rows):\n    out = 0\n    for r in rows:\n"
        "        out += r['amount']\n    return out\n\nRewrite it to skip rows whose 'amount' "
        "key is missing, and show the whole function.",
        "Reformat this list as a JSON array of objects with keys name and port: "
        "llama-server 8080, vllm 8000, sglang 30000, litellm 4000.",
        "Copy this sentence exactly, then explain it in one sentence: "
        "decode is bandwidth-bound because every active weight is read once per token.",
        "Take this shell line and add error handling, showing the complete result: "
        "curl -s http://127.0.0.1:8080/v1/models | jq .data",
    ),
    "closed": (
        "In two sentences, what does a KV cache hold and why does it grow with the conversation?",
        "Name the two halves of a generation step and say which one is compute-bound.",
        "What is an acceptance rate in speculative decoding? Answer in one sentence.",
        "List four fields that must accompany a tokens-per-second measurement.",
    ),
    "open": (
        "Write a short paragraph, in your own words, about why a smaller model that fits in "
        "memory can beat a larger one that does not.",
        "Describe, as if to a colleague over coffee, what surprised you most about running "
        "language models on your own hardware.",
        "Invent a plausible name and one-line description for a tool that records benchmark "
        "context automatically.",
        "Write three sentences of encouragement for somebody whose first fine-tune made their "
        "model worse.",
    ),
}

#: How the A/B table names the built-in workloads.
WORKLOAD_TITLES: Mapping[str, str] = {
    "copy": "copy-heavy (quote the input back)",
    "closed": "closed questions",
    "open": "open-ended writing",
}


class PromptsError(ValueError):
    """A prompts file or a workload selection that cannot be used; the message says why."""


#: One request's messages: (role, content) pairs.
Conversation = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    #: The requests, each its messages (empty for a synthetic workload not yet made).
    requests: tuple[Conversation, ...]
    #: "built-in", the prompts or dataset file's path, or "synthetic".
    source: str
    #: Synthetic prompts: the prompt length asked for, in the server's tokens, and how many.
    input_tokens: int | None = None
    synthetic_count: int = 0
    #: What the output says about the workload (e.g. answers dropped from a dataset).
    note: str | None = None

    @classmethod
    def from_prompts(cls, name: str, prompts: Sequence[str], source: str) -> Workload:
        return cls(name, tuple(((("user", p),)) for p in prompts), source)

    @property
    def prompts(self) -> tuple[str, ...]:
        """Each request's last message (its prompt)."""
        return tuple(request[-1][1] for request in self.requests)

    @property
    def size(self) -> int:
        """Requests per repeat."""
        return len(self.requests) if self.requests else self.synthetic_count


def _check_name(name: str, where: str) -> str:
    if not _NAME.match(name):
        raise PromptsError(
            f"{where}: workload name {name!r} must be 1-32 letters, digits, '_', '.' or '-'"
        )
    if name == "all":
        raise PromptsError(f"{where}: 'all' is reserved for the table's total row")
    return name


def parse_prompts(
    text: str, *, default_workload: str, source: str = "prompts"
) -> dict[str, list[str]]:
    """Workload name -> prompts, in file order. Raises :class:`PromptsError` with line numbers."""
    _check_name(default_workload, source)
    out: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{number}"
        workload = default_workload
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PromptsError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(item, dict):
                raise PromptsError(f"{where}: a JSON line must be an object")
            prompt = item.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                raise PromptsError(f'{where}: a JSON line needs a non-empty string "prompt"')
            name = item.get("workload", default_workload)
            if not isinstance(name, str):
                raise PromptsError(f'{where}: "workload" must be a string')
            workload = _check_name(name, where)
            unknown = sorted(set(item) - {"prompt", "workload"})
            if unknown:
                raise PromptsError(f"{where}: unknown field(s) {', '.join(unknown)}")
        else:
            prompt = line
        out.setdefault(workload, []).append(prompt)
    if not out:
        raise PromptsError(f"{source}: no prompts (the file has only blank lines)")
    return out


def load_prompts_file(path: Path) -> dict[str, list[str]]:
    """Read and parse a prompts file; the file's stem names its plain-line workload."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"cannot read prompts file {path}: {exc}") from None
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)[:32].strip("-.") or "file"
    return parse_prompts(text, default_workload=stem, source=str(path))


def available_workloads(
    extra: Mapping[str, Sequence[str]] | None = None, *, extra_source: str = "prompts file"
) -> dict[str, Workload]:
    """Built-in workloads, with ``extra`` (from a prompts file) replacing or adding."""
    out = {
        name: Workload.from_prompts(name, p, "built-in") for name, p in BUILTIN_WORKLOADS.items()
    }
    for name, prompts in (extra or {}).items():
        out[name] = Workload.from_prompts(name, prompts, extra_source)
    return out


def select_workloads(
    available: Mapping[str, Workload], names: Iterable[str] | None
) -> list[Workload]:
    """The named workloads in the order given (None: all, built-ins first)."""
    if names is None:
        return list(available.values())
    chosen: list[Workload] = []
    for name in names:
        if name not in available:
            known = ", ".join(available)
            raise PromptsError(f"unknown workload {name!r} (available: {known})")
        if all(w.name != name for w in chosen):
            chosen.append(available[name])
    if not chosen:
        raise PromptsError("no workloads selected")
    return chosen
