"""What the servers say, parsed: URLs, chat responses, engine and version. Pure.

The HTTP calls live in :mod:`specmon.measure.client`; everything here works on text and JSON
already received, so it can be tested against captured responses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "ChatAnswer",
    "Endpoint",
    "RequestSpec",
    "ServerInfo",
    "endpoint",
    "engine_from_props",
    "engine_from_version",
    "models_from_list",
    "parse_chat_response",
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One OpenAI-compatible server: its API base and the URLs derived from it."""

    #: The API base as given (``.../v1``), without a trailing slash.
    base_url: str
    #: ``scheme://host[:port]``.
    root: str
    metrics_url: str
    #: True when ``metrics_url`` was given explicitly.
    metrics_given: bool = False

    @property
    def chat_url(self) -> str:
        return self.base_url + "/chat/completions"

    @property
    def models_url(self) -> str:
        return self.base_url + "/models"

    @property
    def props_url(self) -> str:
        return self.root + "/props"

    @property
    def version_url(self) -> str:
        return self.root + "/version"


def _check_url(url: str, what: str) -> tuple[str, str, str]:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{what} {url!r}: expected an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{what} {url!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{what}: credentials in the URL are not accepted; put the API key in an "
            "environment variable and name it with --api-key-env"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"{what} {url!r}: no query string or fragment, please")
    return parts.scheme, parts.netloc, parts.path


def endpoint(url: str, *, metrics_url: str | None = None, what: str = "URL") -> Endpoint:
    """The endpoint of an OpenAI-compatible base URL (``http://host:port/v1``).

    A URL without a path gets ``/v1``. The metrics URL is ``{scheme}://{host}/metrics`` unless
    ``metrics_url`` is given. Raises ValueError with a message for the operator.
    """
    scheme, netloc, path = _check_url(url, what)
    path = path.rstrip("/") or "/v1"
    root = urlunsplit((scheme, netloc, "", "", ""))
    if metrics_url is not None:
        m_scheme, m_netloc, m_path = _check_url(metrics_url, "metrics URL")
        metrics = urlunsplit((m_scheme, m_netloc, m_path or "/metrics", "", ""))
    else:
        metrics = root + "/metrics"
    return Endpoint(
        base_url=root + path,
        root=root,
        metrics_url=metrics,
        metrics_given=metrics_url is not None,
    )


#: Longest acceptance histogram accepted (k + 1 entries; engines use k <= 64).
MAX_HISTOGRAM = 257


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """vLLM's per-request speculative-decoding metrics (``metrics.speculative_decoding`` of a
    response, with ``--per-request-spec-decode-metrics summary|detailed``; vLLM's
    ``RequestSpecDecodeMetrics.to_dict``). Only the counts are kept: every ratio is recomputed
    from them, and the ``detailed`` per-step arrays are not stored."""

    #: ``acceptance_histogram[j]``: verification steps of this request that accepted exactly j
    #: draft tokens (bonus token excluded); length num_spec_tokens + 1.
    histogram: tuple[int, ...]
    #: Proposed draft tokens (after vLLM's grammar-invalidated adjustment).
    draft_tokens: int
    #: The configured k (``num_spec_tokens``).
    spec_tokens: int

    @property
    def steps(self) -> int:
        return sum(self.histogram)

    @property
    def accepted(self) -> int:
        return sum(j * n for j, n in enumerate(self.histogram))

    @property
    def accepted_per_position(self) -> tuple[int, ...]:
        """Steps that accepted at least i + 1 tokens, for i in 0..k-1 (vLLM's per_pos)."""
        out = []
        remaining = self.steps
        for count in self.histogram[:-1]:
            remaining -= count
            out.append(remaining)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    text: str
    #: ``usage.completion_tokens``; None when the server sent no usage (never estimated).
    completion_tokens: int | None
    #: llama.cpp ``timings.draft_n`` / ``timings.draft_n_accepted`` when present.
    draft_tokens: int | None
    draft_accepted: int | None
    finish_reason: str | None
    fingerprint: str | None
    #: vLLM's per-request speculative metrics, when the server sends them.
    spec: RequestSpec | None = None
    #: Why ``metrics.speculative_decoding`` was present but not used.
    spec_problem: str | None = None
    #: ``usage.prompt_tokens`` (the chat template included, as the server counts).
    prompt_tokens: int | None = None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def parse_chat_response(body: Any) -> ChatAnswer:
    """Read a non-streaming chat completion; ValueError when it has no usable answer."""
    if not isinstance(body, dict):
        raise ValueError("the response is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the response has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ValueError("the first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("the message content is not a string")
    usage = body.get("usage")
    tokens = _count(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    prompt_tokens = _count(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
    timings = body.get("timings")
    draft_n = accepted = None
    if isinstance(timings, dict):
        draft_n = _count(timings.get("draft_n"))
        accepted = _count(timings.get("draft_n_accepted"))
        if draft_n is None or accepted is None:
            draft_n = accepted = None
    finish = choice.get("finish_reason")
    fingerprint = body.get("system_fingerprint")
    spec: RequestSpec | None = None
    problem: str | None = None
    metrics = body.get("metrics")
    if isinstance(metrics, dict) and metrics.get("speculative_decoding") is not None:
        try:
            spec = parse_request_spec(metrics["speculative_decoding"])
        except ValueError as exc:
            problem = str(exc)
    return ChatAnswer(
        text=content or "",
        completion_tokens=tokens,
        draft_tokens=draft_n,
        draft_accepted=accepted,
        finish_reason=finish if isinstance(finish, str) else None,
        fingerprint=fingerprint if isinstance(fingerprint, str) and fingerprint else None,
        spec=spec,
        spec_problem=problem,
        prompt_tokens=prompt_tokens,
    )


def parse_request_spec(data: Any) -> RequestSpec:
    """vLLM's ``metrics.speculative_decoding``; ValueError (with the reason) when it is not
    self-consistent: the counts must agree with the histogram they summarise."""
    if not isinstance(data, dict):
        raise ValueError("metrics.speculative_decoding is not an object")
    raw = data.get("acceptance_histogram")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_HISTOGRAM:
        raise ValueError("acceptance_histogram is not a list of 1 to 257 counts")
    histogram = tuple(_count(v) for v in raw)
    if any(v is None for v in histogram):
        raise ValueError("acceptance_histogram holds a value that is not a count")
    counts = tuple(v for v in histogram if v is not None)
    draft_tokens = _count(data.get("num_draft_tokens"))
    spec_tokens = _count(data.get("num_spec_tokens"))
    if draft_tokens is None or spec_tokens is None:
        raise ValueError("num_draft_tokens or num_spec_tokens missing")
    if len(counts) != spec_tokens + 1:
        raise ValueError(
            f"acceptance_histogram has {len(counts)} entries, num_spec_tokens is {spec_tokens}"
        )
    spec = RequestSpec(histogram=counts, draft_tokens=draft_tokens, spec_tokens=spec_tokens)
    for key, value in (("num_spec_steps", spec.steps),
                       ("num_accepted_draft_tokens", spec.accepted)):  # fmt: skip
        given = data.get(key)
        if given is not None and _count(given) != value:
            raise ValueError(f"{key} {given!r} disagrees with acceptance_histogram ({value})")
    if spec.accepted > draft_tokens:
        raise ValueError("more accepted than proposed draft tokens")
    return spec


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """Engine and version of one server, and how they were found out."""

    #: specmon's engine name (``llamacpp``, ``vllm``, ``sglang``...) or None.
    engine: str | None = None
    version: str | None = None
    #: Where the engine and version came from, e.g. "GET /props build_info".
    found_by: tuple[str, ...] = ()
    #: Model ids from GET /v1/models (None when it could not be read).
    models: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "version": self.version,
            "found_by": list(self.found_by),
            "models": None if self.models is None else list(self.models),
        }


def engine_from_props(body: Any) -> str | None:
    """llama.cpp's build from GET /props (``build_info``, e.g. ``b11434-...``)."""
    if isinstance(body, dict):
        build = body.get("build_info")
        if isinstance(build, str) and build:
            return build
    return None


def engine_from_version(body: Any) -> str | None:
    """vLLM's version from GET /version (``{"version": "0.32.0"}``)."""
    if isinstance(body, dict):
        version = body.get("version")
        if isinstance(version, str) and version:
            return version
    return None


def models_from_list(body: Any) -> tuple[str, ...] | None:
    """Model ids from GET /v1/models (``data[].id``)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    return tuple(
        str(item["id"]) for item in body["data"] if isinstance(item, dict) and "id" in item
    )
