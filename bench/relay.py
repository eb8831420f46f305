"""A bare TCP relay, the control of ``bench tap``: every byte from a client to the upstream
and back, through one Python process (asyncio streams, uvloop when installed), with no HTTP
parsing, no per-request work and no reading of responses. What it adds is what one more
process hop costs on this machine; what the tap adds beyond it is the tap's own work.

Run: ``python -m bench.relay --upstream HOST:PORT --listen PORT`` (stops on SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from specmon.cli.tap import loop_factory

READ = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(READ):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(upstream: tuple[str, int], port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.relay", description=__doc__)
    parser.add_argument("--upstream", required=True, metavar="HOST:PORT")
    parser.add_argument("--listen", type=int, required=True, metavar="PORT")
    parser.add_argument("--event-loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
        runner.run(_serve((host, int(port)), args.listen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
