"""An open-loop HTTP/1.1 load generator, run as its own process so that it does not share the service's CPU
time slices with the interpreter being measured: `python -m bench.loadgen SPEC.json` prints a JSON result.

Requests are sent at fixed times (`rate` per second) over `connections` keep-alive connections; latency is
measured from the *scheduled* send time, so a stalled service shows up as latency instead of silently lowering
the offered rate (no coordinated omission). With `rate` 0 the connections send back to back (throughput).
The HTTP client is a few lines over asyncio streams because a full client (httpx) costs more CPU per request
than the service's acknowledgement path itself and would be what the figure measured.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Request:
    raw: bytes  # the complete HTTP/1.1 request


def build_request(path: str, host: str, headers: dict[str, str], body: bytes) -> Request:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return Request(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def run(host: str, port: int, requests: list[Request], rate: float, connections: int) -> dict[str, object]:
    queue: asyncio.Queue[tuple[float, Request] | None] = asyncio.Queue()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = 0
    start = time.perf_counter() + 0.2

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        while (item := await queue.get()) is not None:
            scheduled, request = item
            if rate:
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                scheduled = time.perf_counter()
            try:
                writer.write(request.raw)
                status = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            latencies.append(time.perf_counter() - scheduled)
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    for index, request in enumerate(requests):
        queue.put_nowait((start + index / rate if rate else 0.0, request))
    for _ in range(connections):
        queue.put_nowait(None)
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.perf_counter() - max(began, start) if rate else time.perf_counter() - began
    return {"latencies": latencies, "statuses": {str(k): v for k, v in statuses.items()}, "errors": errors,
            "elapsed": elapsed}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    requests = [Request(bytes.fromhex(raw)) for raw in spec["requests"]]
    result = asyncio.run(run(spec["host"], spec["port"], requests, spec["rate"], spec["connections"]))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
