"""``specmon mark``: tell a running daemon that a target's configuration changed in a way no
page shows (a new draft model): ``POST /-/mark`` (needs ``--web.enable-lifecycle``)."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from specmon.cli._args import command

__all__ = ["add_parser"]

#: Seconds to wait for the daemon's answer.
TIMEOUT = 10.0


#: The subcommand's one line in ``specmon --help``, and its description.
HELP = "mark a configuration change of a target by hand (a new draft model): a new epoch"
DESCRIPTION = (
    "Start a new configuration epoch for TARGET in a running specmon, with a note "
    "saying what changed (POST /-/mark; the daemon needs --web.enable-lifecycle). "
    "Speculation turned on or off and a new chain length are detected without it."
)


def add_parser(sub: Any) -> None:
    mark = command(sub, "mark", help=HELP, description=DESCRIPTION)
    mark.add_argument("target", help="the target's name")
    mark.add_argument("note", help='what changed, e.g. "draft model: Qwen3-0.6B"')
    mark.add_argument("--model", default=None, help="only this model (default: every one)")
    mark.add_argument(
        "--specmon.url",
        dest="url",
        default="http://127.0.0.1:10920",
        metavar="URL",
        help="the daemon's address (default http://127.0.0.1:10920)",
    )
    mark.set_defaults(func=_mark)


def _mark(args: argparse.Namespace) -> int:
    query = {"target": args.target, "note": args.note}
    if args.model is not None:
        query["model"] = args.model
    base = args.url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        sys.stderr.write("specmon mark: --specmon.url must start with http:// or https://\n")
        return 2
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        f"{base}/-/mark?{urllib.parse.urlencode(query)}", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            sys.stdout.write(response.read(4096).decode("utf-8", "replace"))
            return 0
    except urllib.error.HTTPError as exc:
        body = exc.read(4096).decode("utf-8", "replace").strip()
        sys.stderr.write(f"specmon mark: HTTP {exc.code}: {body}\n")
        return 1
    except (urllib.error.URLError, OSError) as exc:
        sys.stderr.write(f"specmon mark: cannot reach {base}: {exc}\n")
        return 1
