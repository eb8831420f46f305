"""50 SIGKILLs at random moments of a writer writing the state file back to back: after each,
the file is read whole (every target of the same write) or, before the first write ended,
not at all; never refused, never half read. A subprocess, as a crash is one."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from specmon.state.store import read_state, remove_temporaries

KILLS = 50

WRITER = r"""
import sys
from pathlib import Path
from specmon.state.store import encode, write_atomic

path = Path(sys.argv[1])
first = int(sys.argv[2])
blobs = []  # encoded before the first write: the loop does nothing but write
for generation in range(first, first + 8):
    count = 50 + (generation * 7919) % 4000  # 6 KB to 500 KB: writes of varied length
    body = {"gen": generation, "count": count,
            "targets": [{"name": f"t{i}", "gen": generation, "pad": "x" * 100}
                        for i in range(count)]}
    blobs.append(encode(body))
print("ready", flush=True)
while True:
    for blob in blobs:
        write_atomic(path, blob)
"""


def test_sigkill_during_writes_never_leaves_a_half_read_state(tmp_path: Path) -> None:
    path = tmp_path / "specmon-state.json"
    rng = random.Random(55)
    generations: list[int] = []
    interrupted = 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for kill in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(kill * 1_000_000)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if any(tmp_path.glob(".*.tmp")):
            interrupted += 1  # killed inside a write: its temporary is left
        body = read_state(path)  # raises StateRefused on anything half written
        if body is None:
            assert not generations, "the file vanished after a completed write"
            continue
        assert body["count"] == len(body["targets"])
        assert {t["gen"] for t in body["targets"]} == {body["gen"]}
        assert [t["name"] for t in body["targets"]] == [f"t{i}" for i in range(body["count"])]
        generations.append(body["gen"])
        remove_temporaries(path)
    print(f"{KILLS} kills, {interrupted} inside a write, {len(generations)} files read whole")
    # The kills landed inside writes, not only between them (the writer writes back to back).
    assert interrupted >= KILLS // 5, interrupted
    assert len(generations) >= KILLS - 5
