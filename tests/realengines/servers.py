"""Start real engines on loopback, wait for them, drive load, stop them.

Every server binds 127.0.0.1 on a free port, runs in its own session (process group) so
vLLM's worker processes go with it, and writes its output to ``log_path``. Use them as
context managers::

    with llama_spec_server() as srv:
        drive_load(srv.base_url, n_requests=4, concurrency=2, max_tokens=100)
        page = fetch(srv.metrics_url).body

``kill()`` (SIGKILL to the whole group, a crash) and ``restart()`` (same port, same
arguments) are for "engine dies mid-run" tests.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from tests.realengines import models, provision

HOST: Final = "127.0.0.1"
LLAMA_READY_TIMEOUT: Final = 60.0
VLLM_READY_TIMEOUT: Final = 300.0
VLLM_NGRAM_K: Final = 3
TINY_HF_NAME: Final = "tiny-llama"
TINY_GGUF_NAME: Final = "tiny-llama"

REPETITIVE_PROMPTS: Final = (
    "one two three four one two three four one two three four one two three four",
    "the cat sat on the mat and the cat sat on the mat and the cat sat on the mat",
    "alpha beta gamma alpha beta gamma alpha beta gamma alpha beta gamma alpha beta",
    "red green blue red green blue red green blue red green blue red green blue red",
)


_RUNNING: set[EngineServer] = set()


@atexit.register
def _stop_leftovers() -> None:
    """Safety net: stop every server a test forgot to stop (no orphans after the run)."""
    for srv in list(_RUNNING):
        with contextlib.suppress(Exception):
            srv.stop(timeout=5)


class ServerError(RuntimeError):
    """A server failed to start or died; the message carries the tail of its log."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class HttpResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def fetch(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> HttpResponse:
    """One HTTP request with urllib; non-2xx statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    hdrs = dict(headers or {})
    if data is not None:
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return HttpResponse(resp.status, resp.reason, list(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as err:
        return HttpResponse(err.code, str(err.reason), list(err.headers.items()), err.read())


class EngineServer:
    """A real engine process on ``127.0.0.1:<port>``."""

    kind: str = "engine"

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        port: int,
        env: Mapping[str, str] | None = None,
        ready_timeout: float,
        ready_path: str = "/health",
        log_dir: Path | None = None,
        name: str | None = None,
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.port = port
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.ready_timeout = ready_timeout
        self.ready_path = ready_path
        self.name = name or self.kind
        self._log_dir = log_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.log_path: Path = Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- addresses ------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, *, wait: bool = True) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            raise ServerError(f"{self.name} already running (pid {self.proc.pid})")
        if self._log_dir is None and self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"specmon-{self.name}-")
        log_dir = self._log_dir or Path(self._tmp.name if self._tmp else ".")
        log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        suffix = "" if self.starts == 1 else f".{self.starts}"
        self.log_path = log_dir / f"{self.name}-{self.port}{suffix}.log"
        with open(self.log_path, "wb") as log:
            log.write(("$ " + " ".join(self.argv) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        _RUNNING.add(self)
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()
                raise
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _fail(self, why: str) -> ServerError:
        return ServerError(
            f"{self.name} on port {self.port} {why}\n--- last lines of {self.log_path} ---\n"
            f"{self.log_tail()}"
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll ``ready_path`` until it answers 200; raise with the log tail otherwise."""
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        url = self.base_url + self.ready_path
        while True:
            if self.proc is None or self.proc.poll() is not None:
                rc = None if self.proc is None else self.proc.returncode
                raise self._fail(f"exited (code {rc}) before becoming ready")
            with contextlib.suppress(OSError):
                if fetch(url, timeout=5).status == 200:
                    return
            if time.monotonic() > deadline:
                raise self._fail(f"not ready after {timeout or self.ready_timeout:.0f} s")
            time.sleep(0.25)

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(10)
        # Children (vLLM's engine core, API servers) may outlive the leader briefly.
        self._signal_group(signal.SIGKILL)
        _RUNNING.discard(self)

    def kill(self) -> None:
        """Crash it: SIGKILL to the whole group, no clean shutdown."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        _RUNNING.discard(self)

    def restart(self, *, wait: bool = True, port_timeout: float = 30.0) -> Self:
        """Start again with the same arguments on the same port (after ``kill``/``stop``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        deadline = time.monotonic() + port_timeout
        while not _port_free(self.port):
            if time.monotonic() > deadline:
                raise ServerError(f"port {self.port} still busy {port_timeout:.0f} s after stop")
            time.sleep(0.2)
        return self.start(wait=wait)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None and os.environ.get("SPECMON_KEEP_LOGS") != "1":
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- convenience ----------------------------------------------------------------------
    def metrics(self, *, headers: Mapping[str, str] | None = None) -> HttpResponse:
        return fetch(self.metrics_url, headers=headers)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


# --------------------------------------------------------------------------------------------
# llama.cpp
# --------------------------------------------------------------------------------------------


class LlamaServer(EngineServer):
    kind = "llama-server"
    model_name = TINY_GGUF_NAME


def llama_server(
    model: Path | None = None,
    *,
    draft: Path | None = None,
    n_max: int = 4,
    synth_rates: Sequence[float] | None = None,
    metrics: bool = True,
    n_parallel: int = 2,
    threads: int = 1,
    ctx: int = 4096,
    extra_args: Sequence[str] = (),
    port: int | None = None,
    log_dir: Path | None = None,
    binary: Path | None = None,
    ready_timeout: float = LLAMA_READY_TIMEOUT,
) -> LlamaServer:
    """A (not yet started) llama-server; ``draft`` turns on draft-model speculation.

    ``synth_rates`` adds ``--spec-synth-rates`` (exactly ``n_max`` non-increasing values;
    needs ``draft``). ``metrics=False`` leaves out ``--metrics`` (``/metrics`` then answers 501).
    """
    binary = binary or provision.ensure_llama_server()
    model = model or models.ensure_tiny_gguf()
    port = port or free_port()
    argv: list[str | os.PathLike[str]] = [binary, "-m", model, "-a", TINY_GGUF_NAME]
    if draft is not None:
        argv += ["-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max)]
    if synth_rates is not None:
        if draft is None:
            raise ValueError("--spec-synth-rates needs a draft model")
        if len(synth_rates) != n_max or list(synth_rates) != sorted(synth_rates, reverse=True):
            raise ValueError("synth_rates must be n_max non-increasing values")
        argv += ["--spec-synth-rates", ",".join(f"{r:g}" for r in synth_rates)]
    if metrics:
        argv.append("--metrics")
    argv += [
        "--host",
        HOST,
        "--port",
        str(port),
        "-c",
        str(ctx),
        "-np",
        str(n_parallel),
        "-t",
        str(threads),
        "--no-webui",
        *extra_args,
    ]
    return LlamaServer(
        argv, port=port, ready_timeout=ready_timeout, ready_path="/health", log_dir=log_dir
    )


def llama_spec_server(*, draft_noise: float = 0.05, n_max: int = 4, **kw: Any) -> LlamaServer:
    """Target + perturbed draft (5% noise: alpha ~0.28)."""
    return llama_server(draft=models.ensure_tiny_gguf(noise=draft_noise), n_max=n_max, **kw)


def llama_self_draft_server(*, n_max: int = 4, **kw: Any) -> LlamaServer:
    """Draft = target: every draft token is accepted (alpha = 1)."""
    return llama_server(draft=models.ensure_tiny_gguf(), n_max=n_max, **kw)


def llama_synth_server(rates: Sequence[float] = (0.9, 0.7, 0.5, 0.3), **kw: Any) -> LlamaServer:
    """Synthetic per-position survival rates: ``k = len(rates)`` (2, 4, 6 in tests)."""
    return llama_server(
        draft=models.ensure_tiny_gguf(noise=0.05), n_max=len(rates), synth_rates=rates, **kw
    )


def llama_baseline_server(**kw: Any) -> LlamaServer:
    """No draft model: the baseline of an A/B comparison."""
    return llama_server(draft=None, **kw)


def llama_no_metrics_server(**kw: Any) -> LlamaServer:
    """Speculation on but no ``--metrics``: ``GET /metrics`` answers HTTP 501."""
    return llama_server(draft=models.ensure_tiny_gguf(noise=0.05), metrics=False, **kw)


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


class VllmServer(EngineServer):
    kind = "vllm"
    model_name = TINY_HF_NAME

    def spec_log_lines(self) -> list[str]:
        """vLLM's own ``SpecDecoding metrics: ...`` log lines so far."""
        return [ln for ln in self.log_text().splitlines() if "SpecDecoding metrics:" in ln]


def vllm_server(
    model_dir: Path | None = None,
    *,
    api_server_count: int = 1,
    k: int | None = VLLM_NGRAM_K,
    max_model_len: int = 512,
    max_num_seqs: int = 8,
    extra_args: Sequence[str] = (),
    port: int | None = None,
    log_dir: Path | None = None,
    python: Path | None = None,
    ready_timeout: float = VLLM_READY_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> VllmServer:
    """A (not yet started) vLLM OpenAI server with n-gram speculation of ``k`` tokens.

    ``api_server_count == 1`` runs ``python -m vllm.entrypoints.openai.api_server``;
    more goes through ``vllm_launcher.py`` (``vllm serve``, multiprocess metrics).
    ``k=None`` turns speculation off.
    """
    python = python or provision.ensure_vllm()
    model_dir = model_dir or models.ensure_tiny_hf_llama(python=python)
    port = port or free_port()
    common: list[str | os.PathLike[str]] = [
        "--host",
        HOST,
        "--port",
        str(port),
        "--served-model-name",
        TINY_HF_NAME,
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--enforce-eager",
    ]
    if k is not None:
        spec = {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        }
        common += ["--speculative-config", json.dumps(spec)]
    argv: list[str | os.PathLike[str]]
    if api_server_count == 1:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir]
    else:
        argv = [python, provision.LAUNCHER, "serve", model_dir]
        common += ["--api-server-count", str(api_server_count)]
    argv += [*common, *extra_args]
    full_env = provision.vllm_env()
    full_env.update(env or {})
    return VllmServer(
        argv,
        port=port,
        env=full_env,
        ready_timeout=ready_timeout,
        ready_path="/v1/models",
        log_dir=log_dir,
    )


# --------------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    responses: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def completion_tokens(self) -> int:
        return sum(int(r.get("usage", {}).get("completion_tokens", 0)) for r in self.responses)


def chat_request_body(
    prompt: str, *, model: str, max_tokens: int, ignore_eos: bool = True
) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,
        "stream": False,
    }


def drive_load(
    base_url: str,
    *,
    n_requests: int = 4,
    concurrency: int = 2,
    max_tokens: int = 300,
    model: str = TINY_GGUF_NAME,
    prompts: Sequence[str] = REPETITIVE_PROMPTS,
    timeout: float = 300.0,
    raise_on_error: bool = True,
    retry_seconds: float = 0.0,
) -> LoadResult:
    """POST ``n_requests`` chat completions (temperature 0, ignore_eos) ``concurrency`` at a time.

    Bounded in count and time; returns the parsed JSON responses. With ``retry_seconds > 0``
    a request that fails to connect or loses its connection (engine killed or restarting) is
    sent again, for at most that long, so load goes on across a restart.
    """
    url = base_url.rstrip("/") + "/v1/chat/completions"
    result = LoadResult()

    def one(i: int) -> dict[str, Any]:
        body = chat_request_body(prompts[i % len(prompts)], model=model, max_tokens=max_tokens)
        give_up = time.monotonic() + retry_seconds
        while True:
            try:
                resp = fetch(url, method="POST", body=body, timeout=timeout)
                break
            except (ConnectionError, urllib.error.URLError):
                if time.monotonic() >= give_up:
                    raise
                time.sleep(0.2)
        if resp.status != 200:
            raise ServerError(f"POST {url} -> {resp.status}: {resp.body[:500]!r}")
        data: dict[str, Any] = resp.json()
        return data

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [pool.submit(one, i) for i in range(n_requests)]
        for fut in futures:
            try:
                result.responses.append(fut.result(timeout=timeout))
            except Exception as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - start
    if raise_on_error and result.errors:
        raise ServerError(
            f"{len(result.errors)} of {n_requests} requests failed: {result.errors[0]}"
        )
    return result


class BackgroundLoad:
    """:func:`drive_load` in a background thread (e.g. to kill the engine mid-run)::

    with BackgroundLoad(srv.base_url, n_requests=20, raise_on_error=False) as bg:
        srv.kill()
        srv.restart()
    result = bg.result  # requests that hit the dead server are in result.errors
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        self._base_url = base_url
        self._kwargs = kwargs
        self._result: LoadResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="specmon-load", daemon=True)

    def _run(self) -> None:
        try:
            self._result = drive_load(self._base_url, **self._kwargs)
        except BaseException as exc:
            self._error = exc

    def start(self) -> Self:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> LoadResult:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("background load still running")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @property
    def result(self) -> LoadResult:
        return self.join(0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._thread.join(self._kwargs.get("timeout", 300.0) * 2)
