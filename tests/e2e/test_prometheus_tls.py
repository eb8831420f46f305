"""Debian's Prometheus scraping specmon over TLS with basic auth, configured with the secured
Compose stack's own files: deploy/compose/make-certs.sh makes the certificates,
deploy/compose/secure/web.yml is specmon's web config and the specmon job of
deploy/compose/secure/prometheus.yml is Prometheus's (addresses and file paths mapped to this
test's; nothing else changed). Two copies of the job, one with a wrong password and one
without TLS, must fail."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.stack import Proc, Prometheus, free_port, require_binaries, wait_until
from tests.support.daemon import get

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose"


def _specmon_job(tls_dir: Path, target: str) -> dict[str, Any]:
    shipped = yaml.safe_load((COMPOSE / "secure" / "prometheus.yml").read_text())
    job: dict[str, Any]
    (job,) = [j for j in shipped["scrape_configs"] if j["job_name"] == "specmon"]
    job = copy.deepcopy(job)
    assert job["tls_config"]["ca_file"] == "/etc/prometheus/specmon-tls/ca.crt"
    job["tls_config"]["ca_file"] = str(tls_dir / "ca.crt")
    assert job["basic_auth"]["password_file"] == "/etc/prometheus/specmon-password"
    job["basic_auth"]["password_file"] = str(COMPOSE / "secure" / "scrape-password")
    assert job["static_configs"] == [{"targets": ["specmon:10920"]}]
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    return job


def test_prometheus_scrapes_specmon_over_tls_with_basic_auth(tmp_path: Path) -> None:
    require_binaries("prometheus", "openssl")
    tls_dir = tmp_path / "tls"
    made = subprocess.run(
        ["sh", str(COMPOSE / "make-certs.sh"), str(tls_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    # The web config beside the certificates, as in the container (/etc/specmon/web.yml,
    # /etc/specmon/tls/...): its relative paths resolve unchanged.
    web = tmp_path / "web.yml"
    shutil.copy(COMPOSE / "secure" / "web.yml", web)
    config = tmp_path / "specmon.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 500ms}\n"
        "targets: [{name: nowhere, url: 'http://127.0.0.1:9/metrics'}]\n"
    )
    port = free_port()
    specmon = Proc.start(
        "specmon run",
        [sys.executable, "-m", "specmon", "run", f"--config.file={config}",
         f"--web.config.file={web}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.format=json"],
        tmp_path / "specmon.log",
    )  # fmt: skip
    prometheus: Proc | None = None
    try:
        job = _specmon_job(tls_dir, f"127.0.0.1:{port}")
        wrong = copy.deepcopy(job)
        wrong["job_name"] = "wrong-password"
        del wrong["basic_auth"]["password_file"]
        wrong["basic_auth"]["password"] = "not the password"
        plain = {k: v for k, v in job.items() if k not in ("scheme", "tls_config")}
        plain["job_name"] = "no-tls"
        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(
            yaml.safe_dump(
                {"global": {"scrape_interval": "1s"}, "scrape_configs": [job, wrong, plain]}
            )
        )
        prom_port = free_port()
        prometheus = Proc.start(
            "prometheus",
            ["prometheus", f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            tmp_path / "prometheus.log",
        )  # fmt: skip
        api = Prometheus(f"http://127.0.0.1:{prom_port}")

        def alive() -> None:
            specmon.check_alive()
            assert prometheus is not None
            prometheus.check_alive()

        def targets() -> dict[str, dict[str, Any]] | None:
            try:
                active = api.api("targets")["activeTargets"]
            except OSError:
                return None
            found = {t["labels"]["job"]: t for t in active}
            done = len(found) == 3 and all(t["health"] != "unknown" for t in found.values())
            return found if done else None

        found = wait_until("three scraped targets", targets, timeout=60, alive=alive)
        assert found["specmon"]["health"] == "up", found["specmon"]
        assert found["specmon"]["scrapeUrl"].startswith("https://")
        assert found["wrong-password"]["health"] == "down"
        assert "401" in found["wrong-password"]["lastError"], found["wrong-password"]
        assert found["no-tls"]["health"] == "down"

        def up() -> list[dict[str, Any]] | None:
            result = api.query('up{job="specmon"} == 1')
            return result or None

        wait_until("up == 1", up, timeout=30, alive=alive)
        build = wait_until(
            "specmon_build_info stored",
            lambda: api.query('specmon_build_info{job="specmon"}') or None,
            timeout=30,
            alive=alive,
        )
        assert build[0]["metric"]["instance"] == f"127.0.0.1:{port}"
        assert api.query('up{job="wrong-password"}')[0]["value"][1] == "0"
        # specmon counted the refusals; its probes answer over TLS without a password.
        assert get(f"https://127.0.0.1:{port}/healthz", context=_context(tls_dir))[0] == 200
    finally:
        if prometheus is not None:
            prometheus.stop()
        specmon.stop()
    log = (tmp_path / "specmon.log").read_text()
    assert "specmon-demo-only" not in log and "not the password" not in log


def _context(tls_dir: Path) -> Any:
    import ssl

    return ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
