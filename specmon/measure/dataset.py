"""A dataset of conversations in the common chat JSONL form, as a workload. Pure, apart from
:func:`load_dataset`.

One JSON object a line, ``{"messages": [{"role": "system" | "user" | "assistant",
"content": "..."}, ...]}``: OpenAI's chat fine-tuning format, which most shared chat datasets
(ShareGPT converted, evaluation sets) are written in, and AIPerf's and GuideLLM's chat
inputs. ``content`` may also be a list of text parts (``[{"type": "text", "text": "..."}]``),
joined. Each line is one request: its messages as they are, except trailing assistant
messages (a dataset's reference answers; the server writes its own), which are dropped and
counted. A conversation must then end with a user message. Other fields of a line (``id``,
``tools``...) are ignored; blank lines are skipped. Every error names its line.

Bounded: :data:`MAX_BYTES` per file, :data:`MAX_CONVERSATIONS` lines, :data:`MAX_MESSAGES`
messages per line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_BYTES",
    "MAX_CONVERSATIONS",
    "MAX_MESSAGES",
    "ROLES",
    "Conversation",
    "Dataset",
    "DatasetError",
    "load_dataset",
    "parse_dataset",
]

#: A single message: (role, content).
Message = tuple[str, str]
#: One request's messages.
Conversation = tuple[Message, ...]

MAX_BYTES = 64 * 1024 * 1024
MAX_CONVERSATIONS = 100_000
MAX_MESSAGES = 1_000
ROLES = ("system", "user", "assistant")


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    conversations: tuple[Conversation, ...]
    #: Trailing assistant messages dropped (reference answers).
    answers_dropped: int


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise DatasetError(f"{where}: only text content parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise DatasetError(f"{where}: a text part without a string 'text'")
            texts.append(text)
        return "".join(texts)
    raise DatasetError(f"{where}: 'content' must be a string or a list of text parts")


def _conversation(item: Any, where: str) -> tuple[Conversation, int]:
    if not isinstance(item, dict):
        raise DatasetError(f"{where}: a line must be a JSON object")
    messages = item.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f'{where}: needs a non-empty list "messages"')
    if len(messages) > MAX_MESSAGES:
        raise DatasetError(f"{where}: more than {MAX_MESSAGES} messages")
    out: list[Message] = []
    for index, message in enumerate(messages):
        at = f"{where}: messages[{index}]"
        if not isinstance(message, dict):
            raise DatasetError(f"{at}: not an object")
        role = message.get("role")
        if role not in ROLES:
            raise DatasetError(f"{at}: role {role!r} (expected one of {', '.join(ROLES)})")
        out.append((str(role), _content(message.get("content"), at)))
    dropped = 0
    while out and out[-1][0] == "assistant":
        out.pop()
        dropped += 1
    if not out or out[-1][0] != "user":
        raise DatasetError(f"{where}: the conversation must end with a user message")
    if not out[-1][1].strip():
        raise DatasetError(f"{where}: the last user message is empty")
    return tuple(out), dropped


def parse_dataset(text: str, *, name: str, source: str = "dataset") -> Dataset:
    """The conversations of a chat JSONL text; :class:`DatasetError` naming the line."""
    conversations: list[Conversation] = []
    dropped = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{number}"
        if len(conversations) >= MAX_CONVERSATIONS:
            raise DatasetError(f"{where}: more than {MAX_CONVERSATIONS} conversations")
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from None
        conversation, answers = _conversation(item, where)
        conversations.append(conversation)
        dropped += answers
    if not conversations:
        raise DatasetError(f"{source}: no conversations (only blank lines)")
    return Dataset(name, tuple(conversations), dropped)


def load_dataset(path: Path) -> Dataset:
    """Read and parse a dataset file, at most :data:`MAX_BYTES`; the workload is named after
    its stem."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise DatasetError(f"dataset {path}: larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"dataset {path}: not UTF-8") from None
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)[:32].strip("-.") or "dataset"
    return parse_dataset(text, name=name, source=str(path))
