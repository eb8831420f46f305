"""One ``/api/v1/query`` answer decoded within bounds, or the failure it is; remote text
cleaned and redacted before it is cut."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specmon.secrets import redact
from specmon.sources.prometheus.model import CONTROL, MAX_WARNINGS_KEPT, ReadStatus


class Failure(Exception):
    def __init__(
        self,
        status: ReadStatus,
        message: str,
        *,
        error_type: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class Answer:
    """A successful vector answer."""

    result: list[Any]
    warnings: tuple[str, ...] = ()
    partial: bool = False


def clean(text: object, limit: int = 300, secrets: Sequence[str] = ()) -> str:
    """Remote text made safe to log: the secrets taken out of the whole text first (a cut
    must never leave part of one behind), then valid UTF-8, no control characters, cut."""
    value = redact(str(text), secrets, limit=limit * 4)
    value = value.encode("utf-8", "replace").decode("utf-8")
    value = CONTROL.sub(" ", value).strip()
    return value if len(value) <= limit else value[:limit] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def check_shape(body: bytes, *, max_series: int) -> None:
    """Bound what decoding ``body`` can build, before decoding it: a vector answer holds about
    two objects and one array a series, so more than ``max_series`` times that is refused as
    ``too_large`` (a few C-speed scans; 60 MB of ``{}`` decoded would take gigabytes and hold
    the event loop for seconds). Deep nesting is refused by the decoder itself."""
    limit = 3 * max_series + 64
    if body.count(b"{") + body.count(b"[") > limit:
        raise Failure(
            ReadStatus.TOO_LARGE,
            f"the answer holds more JSON objects and arrays than max_series ({max_series}) "
            "series could; narrow the selector or raise max_series",
        )


def parse_answer(body: bytes, *, http_status: int = 200, secrets: Sequence[str] = ()) -> Answer:
    """Decode one ``/api/v1/query`` answer; raise :class:`Failure` unless it is a
    successful vector. Error answers (any HTTP status) become QUERY_ERROR or TIMEOUT."""
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise Failure(
            ReadStatus.BAD_RESPONSE, "the answer's JSON is nested too deeply", http_status=None
        ) from None
    except ValueError as exc:  # also UnicodeDecodeError and over-long integers
        if http_status != 200:
            raise http_failure(http_status, body, secrets) from None
        raise Failure(
            ReadStatus.BAD_RESPONSE, f"the answer is not JSON: {clean(exc, 120, secrets)}"
        ) from None
    if not isinstance(doc, dict):
        if http_status != 200:
            raise http_failure(http_status, body, secrets)
        raise Failure(ReadStatus.BAD_RESPONSE, f"the answer is a JSON {type(doc).__name__}")
    status = doc.get("status")
    if status == "error":
        error_type = clean(doc.get("errorType", ""), 60, secrets) or None
        error = clean(doc.get("error", ""), 500, secrets)
        kind = ReadStatus.TIMEOUT if error_type == "timeout" else ReadStatus.QUERY_ERROR
        raise Failure(
            kind,
            f"Prometheus answered {error_type or 'an error'}: {error or '(no message)'}",
            error_type=error_type,
            http_status=http_status,
        )
    if http_status != 200:
        raise http_failure(http_status, body, secrets)
    if status != "success":
        raise Failure(
            ReadStatus.BAD_RESPONSE, f'"status" is {clean(status, 40, secrets)!r}, not "success"'
        )
    data = doc.get("data")
    if not isinstance(data, dict):
        raise Failure(ReadStatus.BAD_RESPONSE, '"data" is not an object')
    result_type = data.get("resultType")
    if result_type != "vector":
        raise Failure(
            ReadStatus.BAD_RESPONSE,
            f'"resultType" is {clean(result_type, 40, secrets)!r}; an instant query must give a vector',
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise Failure(ReadStatus.BAD_RESPONSE, '"result" is not a list')
    raw_warnings = doc.get("warnings", [])
    if raw_warnings is None:
        raw_warnings = []
    if not isinstance(raw_warnings, list):
        raise Failure(ReadStatus.BAD_RESPONSE, '"warnings" is not a list')
    warnings = tuple(clean(w, 300, secrets) for w in raw_warnings[:MAX_WARNINGS_KEPT])
    if len(raw_warnings) > MAX_WARNINGS_KEPT:
        warnings += (f"... and {len(raw_warnings) - MAX_WARNINGS_KEPT} more warnings",)
    partial = doc.get("isPartial") is True  # VictoriaMetrics cluster
    if partial and not warnings:
        warnings = ("isPartial: some storage nodes did not answer",)
    return Answer(result=result, warnings=warnings, partial=partial or bool(warnings))


def http_failure(http_status: int, body: bytes, secrets: Sequence[str] = ()) -> Failure:
    snippet = clean(body.decode("utf-8", "replace"), 200, secrets)
    hint = {
        401: " (check bearer_token_file or basic_auth)",
        403: " (check the credentials' permissions)",
        404: " (check url: the base URL of the API, with any path prefix)",
        405: " (try method: GET or POST)",
    }.get(http_status, "")
    detail = f": {snippet}" if snippet else ""
    return Failure(
        ReadStatus.HTTP_ERROR, f"HTTP {http_status}{hint}{detail}", http_status=http_status
    )
