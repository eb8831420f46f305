"""Capture the fixture pages in tests/fixtures/pages/ from real servers.

    python -m tests.realengines.capture_pages [--only vllm|vllm-multi|llamacpp] [--out DIR]

Every page is written verbatim: the body bytes exactly as received, and next to it
``<name>.headers.txt`` with the raw status line and headers. Responses are read from a plain
socket (HTTP/1.1, ``Connection: close``), so nothing is re-encoded. A ``capture-log.json`` in
the output directory records what was sent and when, for the README.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realengines import models, provision, servers

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"
OPENMETRICS_ACCEPT = "application/openmetrics-text; version=1.0.0"


@dataclass
class RawResponse:
    head: bytes  # status line + headers, CRLF-separated, without the blank line
    body: bytes  # de-chunked body
    raw: bytes  # everything read from the socket

    @property
    def status_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode()

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.decode().partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


def raw_request(
    port: int,
    path: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 300.0,
) -> RawResponse:
    """One HTTP/1.1 request over a plain socket; the response exactly as sent."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {servers.HOST}:{port}", "Connection: close"]
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
        hdrs["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
    chunks: list[bytes] = []
    with socket.create_connection((servers.HOST, port), timeout=timeout) as sock:
        sock.sendall(request)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, payload = raw.partition(b"\r\n\r\n")
    resp = RawResponse(head, payload, raw)
    if (resp.header("Transfer-Encoding") or "").lower() == "chunked":
        resp.body = _dechunk(payload)
    return resp


class Capture:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        log_file = out / "capture-log.json"
        self.record: dict[str, Any] = json.loads(log_file.read_text()) if log_file.exists() else {}

    def save(self, name: str, resp: RawResponse, **info: Any) -> RawResponse:
        (self.out / name).write_bytes(resp.body)
        (self.out / f"{name}.headers.txt").write_bytes(resp.head + b"\r\n")
        entry = {
            "status": resp.status_line,
            "content_type": resp.header("Content-Type"),
            "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "bytes": len(resp.body),
            **info,
        }
        self.record[name] = entry
        print(f"captured {name}: {resp.status_line}; {resp.header('Content-Type')}", flush=True)
        return resp

    def note(self, key: str, value: Any) -> None:
        self.record[key] = value

    def flush(self) -> None:
        (self.out / "capture-log.json").write_text(
            json.dumps(self.record, indent=2, sort_keys=True) + "\n"
        )


def chat_body(model: str, max_tokens: int, prompt: str = servers.REPETITIVE_PROMPTS[0]) -> bytes:
    return json.dumps(
        servers.chat_request_body(prompt, model=model, max_tokens=max_tokens)
    ).encode()


def load(
    base_url: str, *, model: str, n_requests: int, concurrency: int, max_tokens: int
) -> dict[str, Any]:
    """Drive chat-completion load; return a description of it for the capture log."""
    res = servers.drive_load(
        base_url,
        model=model,
        n_requests=n_requests,
        concurrency=concurrency,
        max_tokens=max_tokens,
    )
    return {
        "endpoint": "POST /v1/chat/completions",
        "n_requests": n_requests,
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "prompts": "servers.REPETITIVE_PROMPTS, round robin",
        "completion_tokens": res.completion_tokens,
        "seconds": round(res.seconds, 1),
    }


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------

SPEC_LINE = re.compile(r"Accepted: (\d+) tokens, Drafted: (\d+) tokens")


def _wait_spec_log_quiet(srv: servers.VllmServer, after: int, quiet: float = 25.0) -> None:
    """Wait until a SpecDecoding line past index ``after`` exists and none came for ``quiet`` s.

    vLLM logs every 10 s and only intervals with drafts, so ``quiet`` s without a new line
    after the traffic means everything the engine counted has been logged.
    """
    deadline = time.monotonic() + 180
    seen = len(srv.spec_log_lines())
    last_change = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        n = len(srv.spec_log_lines())
        if n != seen:
            seen, last_change = n, time.monotonic()
        if seen > after and time.monotonic() - last_change >= quiet:
            return
    raise servers.ServerError("vLLM logged no SpecDecoding metrics line\n" + srv.log_tail())


def capture_vllm_single(cap: Capture) -> None:
    with servers.vllm_server() as srv:
        cap.note("vllm-single.command", srv.argv)
        cap.save("vllm-models.json", raw_request(srv.port, "/v1/models"))
        cap.save(
            "vllm-chat-completion.json",
            raw_request(
                srv.port, "/v1/chat/completions", method="POST", body=chat_body("tiny-llama", 64)
            ),
            request=json.loads(chat_body("tiny-llama", 64)),
        )
        phase1 = load(
            srv.base_url, model="tiny-llama", n_requests=16, concurrency=4, max_tokens=200
        )
        _wait_spec_log_quiet(srv, after=0)
        n_before = len(srv.spec_log_lines())
        cap.save(
            "vllm-single.txt",
            raw_request(srv.port, "/metrics"),
            traffic=["1 chat completion (max_tokens 64), the one saved", phase1],
        )
        cap.save(
            "vllm-openmetrics.txt",
            raw_request(srv.port, "/metrics/", headers={"Accept": OPENMETRICS_ACCEPT}),
            request_headers={"Accept": OPENMETRICS_ACCEPT},
            traffic="same server and traffic as vllm-single.txt, fetched right after it",
        )
        phase2 = load(
            srv.base_url, model="tiny-llama", n_requests=12, concurrency=4, max_tokens=300
        )
        _wait_spec_log_quiet(srv, after=n_before)
        cap.save(
            "vllm-single-later.txt",
            raw_request(srv.port, "/metrics"),
            traffic=["everything before vllm-single.txt", phase2],
        )
        lines = srv.spec_log_lines()[n_before:]
        (cap.out / "vllm-single-log.txt").write_text("".join(ln + "\n" for ln in lines))
        acc = sum(int(m.group(1)) for ln in lines if (m := SPEC_LINE.search(ln)))
        dra = sum(int(m.group(2)) for ln in lines if (m := SPEC_LINE.search(ln)))
        cap.note(
            "vllm-single-log.txt",
            {"lines": len(lines), "sum_accepted": acc, "sum_drafted": dra},
        )
        (cap.out / "vllm-single-full-spec-log.txt").write_text(
            "".join(ln + "\n" for ln in srv.spec_log_lines())
        )


def capture_vllm_multi(cap: Capture) -> None:
    with servers.vllm_server(api_server_count=2) as srv:
        cap.note("vllm-multiproc.command", srv.argv)
        traffic = load(
            srv.base_url, model="tiny-llama", n_requests=16, concurrency=4, max_tokens=200
        )
        time.sleep(12)
        cap.save("vllm-multiproc.txt", raw_request(srv.port, "/metrics"), traffic=traffic)
        cap.save(
            "vllm-multiproc-openmetrics.txt",
            raw_request(srv.port, "/metrics/", headers={"Accept": OPENMETRICS_ACCEPT}),
            request_headers={"Accept": OPENMETRICS_ACCEPT},
            traffic="same server and traffic as vllm-multiproc.txt",
        )


# --------------------------------------------------------------------------------------------
# llama.cpp
# --------------------------------------------------------------------------------------------


def capture_llamacpp(cap: Capture) -> None:
    draft = models.ensure_tiny_gguf(noise=0.05)
    with servers.llama_spec_server() as srv:
        cap.note("llamacpp-before.command", srv.argv)
        cap.save(
            "llamacpp-before.txt",
            raw_request(srv.port, "/metrics"),
            traffic="none (fresh server; only GET /health polls)",
        )
        cap.save("llamacpp-models.json", raw_request(srv.port, "/v1/models"))
        cap.save(
            "llamacpp-chat-completion.json",
            raw_request(
                srv.port, "/v1/chat/completions", method="POST", body=chat_body("tiny-llama", 64)
            ),
            request=json.loads(chat_body("tiny-llama", 64)),
        )
        traffic = load(
            srv.base_url, model="tiny-llama", n_requests=6, concurrency=2, max_tokens=300
        )
        cap.save(
            "llamacpp-after.txt",
            raw_request(srv.port, "/metrics"),
            traffic=["1 chat completion (max_tokens 64), the one saved", traffic],
        )
        accept_lines = [ln for ln in srv.log_text().splitlines() if "draft acceptance" in ln]
        (cap.out / "llamacpp-after-log.txt").write_text("".join(ln + "\n" for ln in accept_lines))
        cap.note("llamacpp-after-log.txt", {"lines": len(accept_lines)})
        cap.save("llamacpp-slots.json", raw_request(srv.port, "/slots"))
        cap.save("llamacpp-props.json", raw_request(srv.port, "/props"))
    rates = (0.9, 0.7, 0.5, 0.3)
    with servers.llama_synth_server(rates) as srv:
        cap.note("llamacpp-synth.command", srv.argv)
        traffic = load(
            srv.base_url, model="tiny-llama", n_requests=16, concurrency=2, max_tokens=300
        )
        cap.save("llamacpp-synth.txt", raw_request(srv.port, "/metrics"), traffic=traffic)
    with servers.llama_server(draft=draft, metrics=False) as srv:
        cap.note("llamacpp-501.command", srv.argv)
        resp = raw_request(srv.port, "/metrics")
        (cap.out / "llamacpp-501.txt").write_bytes(resp.raw)
        cap.record["llamacpp-501.txt"] = {
            "status": resp.status_line,
            "content_type": resp.header("Content-Type"),
            "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "note": "whole raw response: status line, headers, blank line, body",
        }
        print(f"captured llamacpp-501.txt: {resp.status_line}", flush=True)


def capture_llamacpp_stream(cap: Capture) -> None:
    """A streamed chat completion (``stream: true``, ``stream_options.include_usage``) as
    ``specmon measure`` asks for it: its server-sent events as sent, for
    specmon/measure/stream.py's tests and the simulator's streamed answers."""
    with servers.llama_spec_server() as srv:
        cap.note("llamacpp-chat-stream.command", srv.argv)
        body = json.loads(chat_body("tiny-llama", 24))
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        data = json.dumps(body).encode()
        cap.save(
            "llamacpp-chat-stream.sse",
            raw_request(srv.port, "/v1/chat/completions", method="POST", body=data),
            request=body,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realengines.capture_pages")
    parser.add_argument(
        "--only", choices=["vllm", "vllm-multi", "llamacpp", "llamacpp-stream"], action="append"
    )
    parser.add_argument("--out", type=Path, default=PAGES)
    args = parser.parse_args(argv)
    only = set(args.only or ["vllm", "vllm-multi", "llamacpp", "llamacpp-stream"])
    cap = Capture(args.out)
    versions = cap.record.setdefault("versions", {})
    try:
        if "llamacpp" in only:
            versions["llama-server"] = provision.llama_server_version(
                provision.ensure_llama_server()
            )
            capture_llamacpp(cap)
        if "llamacpp-stream" in only:
            versions["llama-server"] = provision.llama_server_version(
                provision.ensure_llama_server()
            )
            capture_llamacpp_stream(cap)
        if only & {"vllm", "vllm-multi"}:
            versions["vllm"] = provision.vllm_version(provision.ensure_vllm())
        if "vllm" in only:
            capture_vllm_single(cap)
        if "vllm-multi" in only:
            capture_vllm_multi(cap)
    finally:
        cap.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
