"""``specmon check-web-config`` and the ``--web.*`` security flags of ``specmon run``."""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
from pathlib import Path
from typing import Any, TextIO

from specmon.cli._args import command, integer
from specmon.config_values import parse_duration
from specmon.web.config import WebConfigError
from specmon.web.server import WebOptions, load_web_settings

__all__ = ["add_parser", "add_run_arguments", "web_options"]

HELP = "validate a --web.config.file (and the certificates it names); exit 0 or 1"
DESCRIPTION = (
    "Validate a web configuration file (exporter-toolkit format: tls_server_config, "
    "http_server_config, basic_auth_users) and load the certificate, key and client "
    "CAs it names. Exit 0 if specmon would serve with it, 1 with every problem."
)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _connections(text: str) -> int:
    value = integer(text)
    if not 1 <= value <= 65536:
        raise argparse.ArgumentTypeError("must be between 1 and 65536")
    return value


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The flags that secure ``specmon run``'s HTTP server (docs/security.md)."""
    defaults = WebOptions()
    run.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=Path,
        default=None,
        metavar="FILE",
        help="TLS, client certificates, basic auth and headers, in the exporter-toolkit "
        "format Prometheus uses; re-read on reload and when it or its files change "
        "(check it with `specmon check-web-config FILE`)",
    )
    run.add_argument(
        "--web.enable-lifecycle",
        dest="web_enable_lifecycle",
        action="store_true",
        help="allow POST /-/reload and POST /-/mark (a configuration change marked by hand: "
        "`specmon mark`); otherwise both answer 403, as in Prometheus (SIGHUP always reloads)",
    )
    run.add_argument(
        "--web.read-header-timeout",
        dest="web_read_header_timeout",
        type=_duration,
        default=defaults.read_header_timeout,
        metavar="DURATION",
        help="drop a connection whose request head (or TLS handshake) takes longer (default 10s)",
    )
    run.add_argument(
        "--web.max-connections",
        dest="web_max_connections",
        type=_connections,
        default=defaults.max_connections,
        metavar="N",
        help=f"refuse connections beyond this many open at once (default {defaults.max_connections})",
    )


def web_options(args: argparse.Namespace) -> WebOptions:
    return WebOptions(
        config_file=args.web_config_file,
        enable_lifecycle=args.web_enable_lifecycle,
        read_header_timeout=args.web_read_header_timeout,
        max_connections=args.web_max_connections,
    )


def add_parser(sub: Any) -> None:
    check = command(sub, "check-web-config", help=HELP, description=DESCRIPTION)
    check.add_argument("file", type=Path)
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        try:
            settings = load_web_settings(args.file, executor=executor)
        except WebConfigError as exc:
            out.write(f"FAILED {exc}\n")
            return 1
    config = settings.config
    parts = []
    if config.tls is None:
        parts.append("plain HTTP (no tls_server_config)")
    else:
        parts.append(
            f"TLS {config.tls.min_version.value}-{config.tls.max_version.value}, client "
            f"certificates: {config.tls.client_auth.value}"
            + (
                f" ({len(config.tls.client_allowed_sans)} allowed SAN(s))"
                if config.tls.client_allowed_sans
                else ""
            )
        )
    parts.append(f"{len(config.users)} basic-auth user(s)" if config.users else "no basic auth")
    if config.http.headers:
        parts.append("headers " + ", ".join(name for name, _ in config.http.headers))
    out.write(f"OK {args.file}: " + "; ".join(parts) + "\n")
    return 0
