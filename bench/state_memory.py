"""What reading a state file costs in memory: a real ``specmon run`` started on a state
directory holding a file of a given shape, its peak resident set (``VmHWM``) once the file is
read, and again after its first write; beside the same daemon on an empty directory.

Run: ./dev.sh bench state --memory [--shapes NAME,...] [--targets 1000]
(under ``flock /work/heavy.lock``: each shape starts a daemon and waits for its first write,
about 35 s.)

Shapes (docs/history.md, "Memory"):

- ``empty-lists-v2``: 60 MiB of empty lists in a version-2 body (issue 61: 2.05 GB to read);
- ``empty-lists-v3``: the same as version 3's lines;
- ``junk-records``: records at the largest a record may be (1 MiB), each an object of
  numbers (a record's parse is the most transient memory a read takes), up to the cap;
- ``containers-records``: records just under the cap on objects and arrays a record may hold,
  filled up to 1 MiB, up to the cap;
- ``legit``: ``--targets`` real targets' records (12 epochs, 3 curves of 14 buckets each, the
  largest a target writes: bench state --buckets 14), the daemon configured with them (each is
  restored: its epochs and curves made);
- ``legit-at-cap``: as many such records as the cap admits, no target configured (each kept as
  its bytes);
- ``dense-at-cap``: valid records of the densest text (every number one digit, 8 models of 12
  epochs and 3 curves of 14 buckets and 64 positions), as many as the cap admits (at most
  20,000), no target configured;
- ``dense-restored``: the same file with every one of its targets configured (each restored:
  the most live state a record's bytes can make).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from specmon.daemon.persist import MAX_TARGETS
from specmon.state.store import MAX_FILE_BYTES, MAX_RECORD_BYTES, MAX_RECORD_CONTAINERS

NOW = time.time()
MiB = 2**20


def _header(body: bytes, version: int) -> bytes:
    head = {"format": "specmon-state", "version": version, "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest()}  # fmt: skip
    return orjson.dumps(head) + b"\n" + body


def _empty_lists_v2(size: int) -> bytes:
    head = b'{"written":%.1f,"shard":"0/1","targets":[' % NOW
    count = (size - len(head) - 2) // 3
    return _header(head + b"[]," * count + b"[]]}", 2)


def _empty_lists_v3(size: int) -> bytes:
    facts = b'{"written":%.1f,"shard":"0/1"}' % NOW
    return _header(facts + b"\n[]" * ((size - len(facts)) // 3), 3)


def _records_file(records: Iterator[bytes], *, limit: int = MAX_FILE_BYTES) -> bytes:
    """Records (bytes) after the facts line, as many as fit under ``limit``."""
    lines = [b'{"written":%.1f,"shard":"0/1"}' % NOW]
    size = len(lines[0]) + 200
    for record in records:
        if size + len(record) + 1 > limit:
            break
        lines.append(record)
        size += len(record) + 1
    return _header(b"\n".join(lines), 3)


def _junk(index: int) -> bytes:
    head = b'{"name":"junk-%d","numbers":[' % index
    body = b"1e0," * ((MAX_RECORD_BYTES - len(head) - 10) // 4)
    return head + body + b"1e0]}"


def _containers(index: int) -> bytes:
    head = b'{"name":"deep-%d","lists":[' % index
    count = MAX_RECORD_CONTAINERS - 2
    inner = b"[1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0,1e0],"
    filler = (MAX_RECORD_BYTES - len(head) - count * len(inner) - 100) // 4
    return head + inner * count + b"[" + b"1e0," * filler + b"1e0]]}"


def _url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _target(name: str, url: str, models: dict[str, Any], curves: dict[str, Any]) -> bytes:
    record = {"name": name, "url_sha256": _url_hash(url), "configured_engine": "",
              "configured_model": "", "engine": "vllm", "seen": NOW, "models": models,
              "curves": curves}  # fmt: skip
    return orjson.dumps(record)


def _legit(index: int) -> bytes:
    from bench.state import _curves, _model
    from specmon.state.epoch_book import EpochBook

    model = _model(12)
    book = EpochBook()
    book.restore(model, now=NOW)
    where = book.position("m")
    assert where is not None
    curve = _curves(14)
    return _target(f"vllm-{index:05d}", _legit_url(index), model,
                   {"m": {str(n): curve for n in where[2]}})  # fmt: skip


def _legit_url(index: int) -> str:
    return f"http://127.0.0.1:9/metrics/{index}"


def _dense(index: int) -> bytes:
    from specmon.load.curve import COLUMNS

    models: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    for m in range(8):
        epochs = [{"n": n, "start": 1, "end": 1, "spec": n != 10, "k": 64, "reason": "manual"}
                  for n in range(1, 12)]  # fmt: skip
        epochs.append({"n": 12, "start": 1, "end": None, "spec": False, "reason": "manual"})
        models[f"m{m}"] = {"epochs": epochs, "events": [[1, ""]] * 5}
        slots = [{"start": 0, "bucket": b, "values": [0] * (len(COLUMNS) + 64)} for b in range(14)]
        curve = {"retention_seconds": 1e9, "slot_seconds": 1e9, "columns": list(COLUMNS),
                 "slots": slots}  # fmt: skip
        curves[f"m{m}"] = {"10": curve, "11": curve, "12": curve}
    return _target(f"d{index:05d}", _dense_url(index), models, curves)


def _dense_url(index: int) -> str:
    return f"http://127.0.0.1:9/dense/{index}"


def _many(make: Callable[[int], bytes], count: int | None = None) -> Iterator[bytes]:
    index = 0
    while count is None or index < count:
        yield make(index)
        index += 1


def _vmhwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _wait(what: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError


def _written(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("specmon_state_last_write_success_timestamp_seconds{"):
            return float(line.rsplit(" ", 1)[1]) > 0
    return False


def run_daemon(state_dir: Path, config: Path, log: Path) -> dict[str, Any]:
    """Start ``specmon run``; its peak RSS after the read, after its first write."""
    args = [sys.executable, "-m", "specmon", "run", "--config.file", str(config),
            "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
            "--state.dir", str(state_dir)]  # fmt: skip
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        read = _wait(lambda: [e for e in _events(log) if e.get("event") in
                              ("state_read", "state_refused", "state_fresh")], 120)  # fmt: skip
        read_seconds = time.monotonic() - started
        at_read = _vmhwm(proc.pid)
        port = _wait(lambda: next((e.get("port") for e in _events(log)
                                   if e.get("event") == "specmon_started"), None), 120)  # fmt: skip
        listening = time.monotonic() - started
        _wait(lambda: _written(port), 60)
        after_write = _vmhwm(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    first = read[0]
    return {"read": first.get("event"), "targets_read": first.get("targets"), "read_s": round(read_seconds, 2), "listening_s": round(listening, 2),
            "peak_after_read_mib": round(at_read, 1),
            "peak_after_first_write_mib": round(after_write, 1)}  # fmt: skip


def _config(path: Path, targets: list[tuple[str, str]]) -> None:
    lines = ["global: {scrape_interval: 5s, scrape_timeout: 1s}", "targets:"]
    lines += [f"  - {{name: {name}, url: '{url}'}}" for name, url in targets]
    if not targets:
        lines.append("  - {name: none, url: 'http://127.0.0.1:9/metrics/none'}")
    path.write_text("\n".join(lines) + "\n")


def shapes(targets: int) -> dict[str, tuple[Callable[[], bytes], list[tuple[str, str]]]]:
    """Name -> (the file's bytes, the targets configured: name and URL)."""
    size = 60 * MiB
    legit = [(f"vllm-{i:05d}", _legit_url(i)) for i in range(targets)]
    dense = MAX_FILE_BYTES // (len(_dense(0)) + 1)
    return {
        "empty-lists-v2": (lambda: _empty_lists_v2(size), []),
        "empty-lists-v3": (lambda: _empty_lists_v3(size), []),
        "junk-records": (lambda: _records_file(_many(_junk)), []),
        "containers-records": (lambda: _records_file(_many(_containers)), []),
        "legit": (lambda: _records_file(_many(_legit, targets)), legit),
        "legit-at-cap": (lambda: _records_file(_many(_legit, MAX_TARGETS)), []),
        "dense-at-cap": (lambda: _records_file(_many(_dense, MAX_TARGETS)), []),
        "dense-restored": (
            lambda: _records_file(_many(_dense, MAX_TARGETS)),
            [(f"d{i:05d}", _dense_url(i)) for i in range(dense)],
        ),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench state --memory")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--shapes", default="")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None, help="append each result as JSON")
    args = parser.parse_args(argv)
    table = shapes(args.targets)
    chosen = [s for s in args.shapes.split(",") if s] or list(table)
    load = os.getloadavg()
    runs: list[tuple[str, Callable[[], bytes], list[tuple[str, str]]]] = []
    for configured in {tuple(table[name][1]): None for name in chosen}:
        # The same daemon with the same targets, and no file.
        runs.append((f"baseline-{len(configured)}", lambda: b"", list(configured)))
    runs += [(name, *table[name]) for name in chosen]
    for name, make, targets in runs:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            state_dir = root / "state"
            state_dir.mkdir(mode=0o700)
            data = make()
            if data:
                (state_dir / "specmon-state.json").write_bytes(data)
            config = root / "specmon.yml"
            _config(config, targets)
            result = run_daemon(state_dir, config, root / "daemon.log")
            events = [e.get("event") for e in _events(root / "daemon.log")]
        result = {"shape": name, "file_bytes": len(data), "targets_configured": len(targets),
                  "refused_records_logged": events.count("state_target_refused"),
                  "loadavg": [round(x, 2) for x in load], **result}  # fmt: skip
        print(json.dumps(result), flush=True)
        if args.out is not None:
            with args.out.open("a") as out:
                out.write(json.dumps(result) + "\n")
    return 0


__all__ = ["main", "run_daemon", "shapes"]
