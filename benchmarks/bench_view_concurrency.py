"""The viewer under two requests at once (a live uvicorn server on a real snapshot):

- a light request (/api/meta) while a heavy one (/live, the whole tree) runs: with the
  handlers on the event loop the light one waits for the heavy one to finish;
- two panes' /view requests at once against one alone.

    python3 benchmarks/bench_view_concurrency.py SNAPSHOT.pickle
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


def main(path: str) -> None:
    snap = memlens.load(path)
    data = ViewerData([snap, memlens.load(path, cache=False)], ["a", "b"])
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
    live = f"{base}/api/d/{d}/live?event=-1&python_only=0"

    async def timed(*urls: str) -> float:
        async with httpx.AsyncClient(timeout=60) as c:
            t = time.perf_counter()
            await asyncio.gather(*(c.get(u) for u in urls))
            return time.perf_counter() - t

    async def light_during_heavy() -> float:
        async with httpx.AsyncClient(timeout=60) as c:
            heavy = asyncio.create_task(c.get(live))
            await asyncio.sleep(0.002)
            t = time.perf_counter()
            await c.get(f"{base}/api/meta")
            light = time.perf_counter() - t
            await heavy
            return light

    asyncio.run(timed(view, view))  # warm
    heavy = min(asyncio.run(timed(live)) for _ in range(3))
    light = sorted(asyncio.run(light_during_heavy()) for _ in range(5))[2]
    print(f"/live alone {heavy * 1e3:.0f} ms; /api/meta while /live runs {light * 1e3:.1f} ms")
    one = min(asyncio.run(timed(view)) for _ in range(5))
    two = min(asyncio.run(timed(view, view + "&snap=1")) for _ in range(5))
    print(f"/view alone {one * 1e3:.0f} ms; two at once {two * 1e3:.0f} ms")
    server.should_exit = True


if __name__ == "__main__":
    main(sys.argv[1])
