"""The viewer under two requests at once (a live uvicorn server on a real snapshot):

- a light request (/api/meta) while a heavy one (a wide /view) runs: with the handlers on
  the event loop the light one waits for the heavy one to finish;
- two panes' /view requests at once against one alone.

    python3 benchmarks/bench_view_concurrency.py SNAPSHOT.pickle
    python3 benchmarks/bench_view_concurrency.py --events 400000   # a generated trace
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import httpx
import uvicorn

import memlens
from memlens.views.web.data import ViewerData
from memlens.views.web.server import create_app


def main(source: str) -> None:
    if source == "--events":
        from memlens.simulation.synthetic import generate_trace_dict

        raw = generate_trace_dict(events=int(sys.argv[2]), seed=1)
        snap, other = memlens.load(raw), memlens.load(raw)
    else:
        snap, other = memlens.load(source), memlens.load(source, cache=False)
    data = ViewerData([snap, other], ["a", "b"])
    data.warm()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(data), log_level="error"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    d = snap.default_device
    view = f"{base}/api/d/{d}/view?width=3000&height=800&q=linear"

    async def timed(*urls: str) -> float:
        async with httpx.AsyncClient(timeout=60) as c:
            t = time.perf_counter()
            await asyncio.gather(*(c.get(u) for u in urls))
            return time.perf_counter() - t

    async def light_during_heavy() -> float:
        async with httpx.AsyncClient(timeout=60) as c:
            heavy = asyncio.create_task(c.get(view))
            await asyncio.sleep(0.002)
            t = time.perf_counter()
            await c.get(f"{base}/api/meta")
            light = time.perf_counter() - t
            await heavy
            return light

    asyncio.run(timed(view, view))  # warm
    light = sorted(asyncio.run(light_during_heavy()) for _ in range(5))[2]
    one = min(asyncio.run(timed(view)) for _ in range(5))
    print(f"/view alone {one * 1e3:.0f} ms; /api/meta while /view runs {light * 1e3:.1f} ms")
    two = min(asyncio.run(timed(view, view + "&snap=1")) for _ in range(5))
    print(f"two /view at once {two * 1e3:.0f} ms")
    server.should_exit = True


if __name__ == "__main__":
    main(sys.argv[1])
