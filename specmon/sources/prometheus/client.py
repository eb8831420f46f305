"""The client: one read of a source, its queries run concurrently within the read's
timeout and the process's budget of response bytes, every outcome a ReadResult."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from specmon.process.memory import collector_paused
from specmon.secrets import redact
from specmon.sources.client_config import Credentials, ssl_reason
from specmon.sources.http import open_session
from specmon.sources.prometheus.answers import (
    Failure,
    check_shape,
    clean,
    http_failure,
    parse_answer,
)
from specmon.sources.prometheus.grouping import build_instances
from specmon.sources.prometheus.model import (
    DEFAULT_STRATEGY,
    ERROR_BODY_BYTES,
    QueryStrategy,
    ReadResult,
    ReadStatus,
)
from specmon.sources.prometheus.queries import freshness_query, value_queries
from specmon.sources.prometheus_config import PrometheusSourceConfig, QueryMethod


class InFlight:
    """The response bytes every Prometheus read of the process holds at once (bodies being
    received or not yet decoded): sources that each answer up to their cap must not add up.
    A read that would take the total past ``limit`` (or past its own cap, when that is
    larger) fails at once as ``too_large``, letting its bytes go, rather than wait."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int, *, cap: int) -> bool:
        if self.held + size > max(self.limit, cap):
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


#: Response bytes in flight for the whole process: two full answers at the default cap.
IN_FLIGHT = InFlight(128 * 2**20)


@dataclass
class _Budget:
    remaining: int
    used: int = 0
    shared: InFlight = IN_FLIGHT
    #: Bytes this read took from ``shared`` (given back once its answers are decoded).
    held: int = 0

    def release(self) -> None:
        self.shared.give(self.held)
        self.held = 0


class PrometheusSource:
    """Reads one configured Prometheus source. Use as an async context manager, or call
    :meth:`close`; pass ``session`` to share the daemon's (it is then not closed here).

    ``read()`` never raises (but for cancellation): every outcome is a :class:`ReadResult`.
    """

    def __init__(
        self,
        config: PrometheusSourceConfig,
        *,
        session: aiohttp.ClientSession | None = None,
        strategy: QueryStrategy = DEFAULT_STRATEGY,
        concurrency: int = 4,
        in_flight: InFlight = IN_FLIGHT,
    ) -> None:
        self.config = config
        self.strategy = strategy
        self._in_flight = in_flight
        self._session = session
        self._own_session = session is None
        #: Why the TLS files cannot be used now (they were valid when the config was loaded).
        self._tls_error: str | None = None
        self._ssl: ssl.SSLContext | None = None
        try:
            self._ssl = config.client.ssl_context()
        except (OSError, ssl.SSLError) as exc:
            self._tls_error = f"cannot use the tls files: {clean(ssl_reason(exc), 160)}"
        self._concurrency = max(1, concurrency)
        self._values = value_queries(config, strategy)
        self._freshness = freshness_query(config)
        parts = urlsplit(config.url)
        self.display_url = f"{parts.scheme}://{parts.netloc}{parts.path}"

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # specmon's one session factory, as the daemon's shared session: no cookies (a
            # query API's Set-Cookie was kept without bound and sent back), no proxy or netrc
            # from the environment, specmon's User-Agent.
            self._session = open_session(
                max_connections=self._concurrency + 1, purpose="prometheus source"
            )
        return self._session

    @property
    def queries(self) -> tuple[str, ...]:
        """Every query of one read, value queries first."""
        return (*self._values, self._freshness)

    async def read(self, *, at: float | None = None) -> ReadResult:
        at = time.time() if at is None else at
        started = time.perf_counter()
        try:
            result = await self._read(at, started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must cost one read, never the daemon
            _raise_if_cancelling()
            return ReadResult(
                status=ReadStatus.INTERNAL_ERROR,
                at=at,
                message=f"internal error: {type(exc).__name__}: {clean(exc, 200)}",
                duration_seconds=time.perf_counter() - started,
            )
        # A cancellation that arrived while a query failed is reported by the task group as
        # that failure, not raised: the read must not come back as if it had merely failed,
        # or the source's loop would go on reading after a stop.
        _raise_if_cancelling()
        return result

    async def _read(self, at: float, started: float) -> ReadResult:
        config = self.config
        if self._tls_error is not None:
            return ReadResult(
                status=ReadStatus.CREDENTIALS_ERROR,
                at=at,
                message=self._tls_error,
                duration_seconds=time.perf_counter() - started,
            )
        try:
            secrets = self._credentials()
        except OSError as exc:
            return ReadResult(
                status=ReadStatus.CREDENTIALS_ERROR,
                at=at,
                message=f"cannot read a credentials file: {exc.strerror or type(exc).__name__}"
                + (f" ({exc.filename})" if exc.filename else ""),
                duration_seconds=time.perf_counter() - started,
            )
        budget = _Budget(config.max_response_bytes, shared=self._in_flight)
        try:
            return await self._read_within(budget, at, started, secrets)
        finally:
            budget.release()

    async def _read_within(
        self, budget: _Budget, at: float, started: float, secrets: Credentials
    ) -> ReadResult:
        config = self.config
        queries = self.queries
        try:
            bodies = await self._fetch_all(queries, at=at, budget=budget, secrets=secrets)
        except Failure as failure:
            return self._failed(failure, at=at, started=started, budget=budget, secrets=secrets)
        cpu = time.process_time()
        try:
            # Decoding and grouping allocate hundreds of thousands of small objects and no
            # cycles; the cyclic collector would spend about 40 % of the time walking them
            # (measured at 2,000 instances). No other task runs during this synchronous block.
            with collector_paused():
                for body in bodies:
                    check_shape(body, max_series=config.max_series)
                answers = [parse_answer(body, secrets=secrets.secrets) for body in bodies]
                del bodies  # decoded: the bodies' megabytes go before the grouping
                budget.release()
                values, freshness = answers[:-1], answers[-1]
                instances, problems, series = build_instances(
                    (a.result for a in values),
                    freshness.result,
                    config=config,
                    at=at,
                    consume=True,
                )
        except Failure as failure:
            return self._failed(
                failure,
                at=at,
                started=started,
                budget=budget,
                secrets=secrets,
                cpu=time.process_time() - cpu,
            )
        warnings: list[str] = []
        for answer in answers:
            warnings.extend(w for w in answer.warnings if w not in warnings)
        partial = any(a.partial for a in answers)
        status = ReadStatus.PARTIAL if partial else ReadStatus.OK
        return ReadResult(
            status=status,
            at=at,
            instances=tuple(instances),
            message=(
                "Prometheus answered with warnings; some series may be missing" if partial else None
            ),
            warnings=tuple(redact(w, secrets.secrets) for w in warnings),
            problems=tuple(problems),
            usable=not partial or config.accept_partial,
            queries=len(queries),
            bytes=budget.used,
            series=series,
            duration_seconds=time.perf_counter() - started,
            parse_cpu_seconds=time.process_time() - cpu,
        )

    async def _fetch_all(
        self, queries: Sequence[str], *, at: float, budget: _Budget, secrets: Credentials
    ) -> list[bytes]:
        """Every query's answer body, concurrently, within the read's timeout; the most
        specific failure when any fails.

        The queries run as plain tasks awaited with :func:`asyncio.wait`, not in a task
        group: a group reports a child's failure instead of its parent's cancellation when
        both happen at once (and Python 3.11's leaves its own cancel request counted), and
        a read cancelled by a stop must end as cancelled. Whatever happens, every query task
        has ended when this returns or raises."""
        config = self.config
        deadline = asyncio.get_running_loop().time() + config.timeout
        gate = asyncio.Semaphore(self._concurrency)
        tasks = [
            asyncio.create_task(
                self._query(q, at=at, deadline=deadline, budget=budget, secrets=secrets, gate=gate)
            )
            for q in queries
        ]
        if not tasks:
            return []
        try:
            async with asyncio.timeout(config.timeout):
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except TimeoutError:
            raise Failure(
                ReadStatus.TIMEOUT,
                f"no complete answer from {self.display_url} within {config.timeout:g}s",
            ) from None
        finally:
            for task in tasks:
                task.cancel()  # nothing for the finished ones
            await asyncio.wait(tasks)
        errors = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
        if not errors:
            return [task.result() for task in tasks]
        failures = [e for e in errors if isinstance(e, Failure)]
        chosen = min(failures, key=_severity) if failures else errors[0]
        # A failure's traceback holds its query's frame and every body received so far:
        # nothing of this read may outlive it.
        for error in errors:
            error.__traceback__ = None
        del errors, failures
        tasks.clear()
        raise chosen

    def _failed(
        self,
        failure: Failure,
        *,
        at: float,
        started: float,
        budget: _Budget,
        secrets: Credentials,
        cpu: float = 0.0,
    ) -> ReadResult:
        return ReadResult(
            status=failure.status,
            at=at,
            message=redact(failure.message, secrets.secrets),
            error_type=failure.error_type,
            http_status=failure.http_status,
            queries=len(self.queries),
            bytes=budget.used,
            duration_seconds=time.perf_counter() - started,
            parse_cpu_seconds=cpu,
        )

    def _credentials(self) -> Credentials:
        """Request headers, with token and password files read now (they rotate)."""
        credentials = self.config.client.credentials()
        credentials.headers["Accept"] = "application/json"
        return credentials

    async def _query(
        self,
        query: str,
        *,
        at: float,
        deadline: float,
        budget: _Budget,
        secrets: Credentials,
        gate: asyncio.Semaphore,
    ) -> bytes:
        config = self.config
        async with gate:
            remaining = deadline - asyncio.get_running_loop().time()
            params = {
                "query": query,
                "time": f"{at:.3f}",
                # Prometheus stops evaluating at its own timeout too (ms: every
                # Prometheus-compatible API parses it).
                "timeout": f"{max(1, int(remaining * 1000))}ms",
            }
            session = self._get_session()
            ssl_arg: Any = self._ssl if self._ssl is not None else True
            try:
                # POST sends the parameters as a form body, GET in the URL.
                post = config.method is QueryMethod.POST
                request = session.request(
                    config.method.value,
                    config.api_url,
                    params=None if post else params,
                    data=params if post else None,
                    headers=secrets.headers,
                    ssl=ssl_arg,
                    allow_redirects=False,
                )
                async with request as resp:
                    if resp.status == 200:
                        return await _read_capped(resp, budget, config.max_response_bytes)
                    body = await _read_error_body(resp, budget)
                    if 300 <= resp.status < 400:
                        location = resp.headers.get("Location", "")
                        loc = urlsplit(location)
                        shown = f"{loc.scheme}://{loc.netloc}{loc.path}" if loc.netloc else ""
                        raise Failure(
                            ReadStatus.HTTP_ERROR,
                            f"HTTP {resp.status}: redirected"
                            + (f" to {clean(shown, 120, secrets.secrets)}" if shown else "")
                            + "; set url to the final address",
                            http_status=resp.status,
                        )
                    parse_answer(body, http_status=resp.status, secrets=secrets.secrets)
                    raise http_failure(
                        resp.status, body, secrets.secrets
                    )  # not reached: parse_answer raises
            except Failure:
                raise
            except aiohttp.ClientConnectorCertificateError as exc:
                raise Failure(
                    ReadStatus.DOWN,
                    f"TLS certificate of {self.display_url} not accepted: "
                    f"{clean(exc.certificate_error, 160, secrets.secrets)}",
                ) from None
            except aiohttp.ClientConnectorError as exc:
                err = exc.os_error
                reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
                raise Failure(
                    ReadStatus.DOWN, f"cannot connect to {exc.host}:{exc.port}: {reason}"
                ) from None
            except aiohttp.ServerDisconnectedError:
                raise Failure(
                    ReadStatus.DOWN, f"{self.display_url} closed the connection"
                ) from None
            except aiohttp.ServerTimeoutError:
                raise Failure(
                    ReadStatus.TIMEOUT, f"{self.display_url} did not answer in time"
                ) from None
            except aiohttp.ClientPayloadError as exc:
                raise Failure(
                    ReadStatus.BAD_RESPONSE,
                    f"broken response body: {clean(exc, 160, secrets.secrets)}",
                ) from None
            except aiohttp.ClientResponseError as exc:
                raise Failure(
                    ReadStatus.HTTP_ERROR,
                    f"HTTP error {exc.status}: {clean(exc.message, 120, secrets.secrets)}",
                    http_status=exc.status,
                ) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise Failure(
                    ReadStatus.DOWN,
                    f"{type(exc).__name__} talking to {self.display_url}: {clean(exc, 160, secrets.secrets)}",
                ) from None


def _raise_if_cancelling() -> None:
    """Raise CancelledError when the current task has a cancellation pending: cancellation
    always wins over a failure that happened at the same time."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _severity(failure: BaseException) -> int:
    """Which failure of several concurrent ones to report: the most specific."""
    order = (
        ReadStatus.QUERY_ERROR,
        ReadStatus.HTTP_ERROR,
        ReadStatus.TOO_LARGE,
        ReadStatus.BAD_RESPONSE,
        ReadStatus.TIMEOUT,
        ReadStatus.DOWN,
    )
    status = getattr(failure, "status", None)
    return order.index(status) if status in order else len(order)


async def _read_capped(resp: aiohttp.ClientResponse, budget: _Budget, cap: int) -> bytes:
    declared = resp.content_length
    if (
        declared is not None
        and declared > budget.remaining
        and not resp.headers.get("Content-Encoding")
    ):
        raise Failure(
            ReadStatus.TOO_LARGE,
            f"the answers exceed max_response_bytes ({cap} bytes decoded, all queries of a "
            "read together)",
        )
    chunks: list[bytes] = []
    message = None
    async for chunk in resp.content.iter_chunked(65536):
        size = len(chunk)
        budget.used += size
        budget.remaining -= size
        if budget.remaining < 0:
            message = (
                f"the answers exceed max_response_bytes ({cap} bytes decoded, all queries of "
                "a read together)"
            )
        elif not budget.shared.take(size, cap=cap):
            message = (
                f"the process's response bytes in flight ({budget.shared.limit} bytes, every "
                "source together) are taken by other reads; this read gave up"
            )
        if message is not None:
            # Nothing of the body may outlive the failure (its traceback holds this frame).
            chunk = b""
            chunks.clear()
            raise Failure(ReadStatus.TOO_LARGE, message)
        budget.held += size
        chunks.append(chunk)
    body = b"".join(chunks)
    chunks.clear()
    return body


async def _read_error_body(resp: aiohttp.ClientResponse, budget: _Budget) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(16384):
        take = chunk[: ERROR_BODY_BYTES - size]
        chunks.append(take)
        size += len(take)
        budget.used += len(take)
        if size >= ERROR_BODY_BYTES:
            break
    return b"".join(chunks)
