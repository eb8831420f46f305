"""``specmon run`` (the daemon) and ``specmon check-config``."""

from __future__ import annotations

import argparse
import asyncio
import glob
import logging
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from specmon.cli import web as web_cli  # security: --web.* flags (specmon/web)
from specmon.cli._args import command
from specmon.config_values import ConfigError, format_duration, parse_listen_address
from specmon.daemon.app import Daemon
from specmon.daemon.config import curve_memory_warning, load_config
from specmon.daemon.file_sd import load_file_sd
from specmon.logs import LEVELS, configure_logging, get_logger
from specmon.process.memory import CollectorSchedule, tune_gc, tune_malloc
from specmon.process.nofile import raise_open_files_limit
from specmon.sharding import Shard, parse_shard
from specmon.state.store import state_dir_problem

__all__ = ["add_parsers"]

HELP_RUN = "run the daemon: scrape engines, compute rolling windows, serve /metrics"
DESCRIPTION_RUN = (
    "Scrape vLLM, llama.cpp, SGLang, TensorRT-LLM and TGI metrics endpoints (directly or "
    "through Prometheus), compute acceptance figures "
    "over rolling windows and serve them on /metrics, with a status page on /. Without "
    "--config.file it watches http://127.0.0.1:8000/metrics and "
    "http://127.0.0.1:8080/metrics. SIGHUP reloads the config (POST /-/reload too, "
    "with --web.enable-lifecycle). --web.config.file adds TLS and basic auth."
)


def add_parsers(sub: Any) -> None:
    run = command(sub, "run", help=HELP_RUN, description=DESCRIPTION_RUN)
    run.add_argument("--config.file", dest="config_file", type=Path, default=None, metavar="FILE")
    run.add_argument(
        "--web.listen-address",
        dest="listen",
        default=":10920",
        metavar="ADDR",
        help="address to serve on (default :10920, all interfaces; 127.0.0.1:10920 for "
        "this host only). Secure it with --web.config.file: docs/security.md",
    )
    web_cli.add_run_arguments(run)  # security: --web.config.file, --web.enable-lifecycle, ...
    run.add_argument(
        "--shard",
        default="0/1",
        metavar="I/N",
        help="keep only shard I of N (from 0) of the targets and Prometheus-source instances, "
        "by the hash of their names as Prometheus's hashmod: N replicas with --shard 0/N .. "
        "N-1/N split them with no coordination (docs/fleet.md)",
    )
    run.add_argument(
        "--state.dir",
        dest="state_dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the targets' configuration epochs in DIR across restarts (overrides "
        "global.state_dir; unset: nothing is written). docs/history.md, The state directory",
    )
    run.add_argument("--log.level", dest="log_level", choices=LEVELS, default="info")
    run.add_argument(
        "--log.format",
        dest="log_format",
        choices=("json", "console"),
        default=None,
        help="default: console on a terminal, JSON otherwise",
    )
    run.set_defaults(func=_run)

    check: argparse.ArgumentParser = sub.add_parser(
        "check-config",
        help="validate a config file (and its file_sd files); exit 0 if valid, 1 if not",
    )
    check.add_argument("file", type=Path)
    check.set_defaults(func=_check)


def _run(args: argparse.Namespace) -> int:
    configure_logging(level=args.log_level, fmt=args.log_format)
    try:
        parse_listen_address(args.listen)
    except ValueError as exc:
        sys.stderr.write(f"specmon run: --web.listen-address: {exc}\n")
        return 2
    try:
        shard: Shard = parse_shard(args.shard)
    except ValueError as exc:
        sys.stderr.write(f"specmon run: --shard: {exc}\n")
        return 2
    # A socket per target kept open between scrapes: the soft limit up to the hard one, as Go
    # programs do (specmon/process/nofile.py; systemd's soft default is 1,024).
    raise_open_files_limit()
    tune_malloc()  # freed megabyte buffers go back to the system (specmon/process/memory.py)
    tune_gc()  # the cycle collector stays out of the scrapes (same module) ...
    daemon = Daemon(
        gc_schedule=CollectorSchedule(log=get_logger()),  # ... and runs once a minute
        config_path=args.config_file,
        listen=args.listen,
        web_options=web_cli.web_options(args),  # security: specmon/web
        shard=shard,
        state_dir=args.state_dir,
    )
    return _serve(daemon)


def _serve(daemon: Daemon) -> int:
    """Run the daemon to its end. Like :func:`asyncio.run`, except that the tasks a stop
    abandoned at its deadline are not waited for again: the process exits at once, with the
    status serve() returned (1), its log line naming what hung already written."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    code = loop.run_until_complete(daemon.serve())
    if daemon.abandoned:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    try:
        leftover = asyncio.all_tasks(loop)
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.wait(leftover, timeout=daemon.stop_deadline))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    return code


def _check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        out.write(f"FAILED {exc}\n")
        return 1
    problems: list[str] = []
    sd_targets = 0
    for sd in config.file_sd:
        for pattern in sd.files:
            for path in sorted(glob.glob(pattern)):
                targets, errors = load_file_sd(Path(path), sd, config.global_)
                problems.extend(errors)
                sd_targets += len(targets)
    if problems:
        out.write(f"FAILED {args.file}: {len(problems)} problem(s) in file_sd files:\n")
        out.writelines(f"  {p}\n" for p in problems)
        return 1
    g = config.global_
    if g.state_dir is not None:  # as `specmon run` would find it (run it as specmon's user)
        problem = state_dir_problem(g.state_dir)
        if problem is not None:
            out.write(f"FAILED {args.file}: global.state_dir: {g.state_dir}: {problem}\n")
            return 1
    out.write(
        f"OK {args.file}: {len(config.targets)} target(s)"
        + (f" and {sd_targets} from file_sd" if config.file_sd else "")
        + (f", {len(config.sources)} Prometheus source(s)" if config.sources else "")
        + f"; scrape every {format_duration(g.scrape_interval)} "
        f"(timeout {format_duration(g.scrape_timeout)}); windows "
        + ", ".join(format_duration(w) for w in g.windows)
        + "\n"
    )
    warning = curve_memory_warning(config)
    if warning is not None:
        out.write(f"  warning: {warning}\n")
    for source in config.sources:
        overrides = len(source.overrides)
        out.write(
            f"  source {source.name}: {source.url} selector {source.selector} instances by "
            f"[{', '.join(source.instance_labels)}]"
            + (f" named {source.name_prefix}..." if source.name_prefix else "")
            + f"; read every {format_duration(source.interval)} "
            f"(timeout {format_duration(source.timeout)}, stale after "
            f"{format_duration(source.stale_after)})"
            + (f"; {overrides} override(s)" if overrides else "")
            + "\n"
        )
    return 0
