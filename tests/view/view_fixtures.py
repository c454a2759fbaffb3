"""Hand-built snapshots and a live server for the viewer tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EVIL = "<img src=x onerror=alert(1)>"
USER = {"filename": "/home/u/train.py", "line": 10, "name": "train_step"}
CPP = {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 1, "name": "c10::malloc"}
EVIL_FRAME = {"filename": f"/home/u/{EVIL}.py", "line": 7, "name": EVIL}


def ev(
    action: str,
    addr: int,
    size: int,
    i: int,
    frames: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1000 + 10 * i,
         "frames": [USER] if frames is None else frames}  # fmt: skip
    e.update(extra)
    return e


def small_snapshot(evil: bool = False) -> dict[str, Any]:
    """Seven events, four allocations A(100) B(10) C(300) D(50); reserved 1000 after event 0.

    active after each event: 0, 100, 110, 410, 400, 300, 350.
    """
    A, B, C, D = 0x1000, 0x2000, 0x3000, 0x4000
    c_frames = [EVIL_FRAME, CPP, USER] if evil else [CPP, USER]
    trace = [
        ev("segment_alloc", 0x1000, 1000, 0),
        ev("alloc", A, 100, 1),
        ev("alloc", B, 10, 2),
        ev(
            "alloc",
            C,
            300,
            3,
            c_frames,
            compile_context="Torch-Compiled Region: 0/0",
            user_metadata=EVIL if evil else "step=1",
        ),  # fmt: skip
        ev("free_completed", B, 10, 4),
        ev("free_completed", A, 100, 5),
        ev("alloc", D, 50, 6),
    ]
    ann = [
        {"name": "fwd", "stage": "START", "device": 0, "time_us": 1005},
        {"name": "inner", "stage": "START", "device": 0, "time_us": 1010},
        {"name": "inner", "stage": "END", "device": 0, "time_us": 1020},
        {"name": "fwd", "stage": "END", "device": 0, "time_us": 1035},
        {"name": EVIL if evil else "orphan", "stage": "END", "device": 0, "time_us": 1050},
        {"name": "open", "stage": "START", "device": 0, "time_us": 1055},
    ]
    return {"segments": [], "device_traces": [trace], "external_annotations": ann}


HEAD = {"filename": "/home/u/model.py", "line": 99, "name": "build_head"}


def stacked_snapshot() -> dict[str, Any]:
    """A (400 bytes, train_step), 40 allocations of 2 bytes, then C (300 bytes, build_head):
    43 events, reserved 1000 from event 0, active 780 after the last (the peak).

    At 1000 bytes over 410 pixels (2.44 bytes a pixel) A and C are bands, stacked A at
    0-400 then C at 400-700; the 2-byte ones (0.8 pixel) are thin bands at 700-780 for the
    page (min_px 1/16), the aggregate band at min_px=1.
    """
    trace = [ev("segment_alloc", 0x1000, 1000, 0), ev("alloc", 0x1000, 400, 1)]
    trace += [ev("alloc", 0x1190 + 2 * k, 2, 2 + k) for k in range(40)]
    trace.append(ev("alloc", 0x11E0, 300, 42, [CPP, HEAD]))
    ann = [
        {"name": "fwd", "stage": "START", "device": 0, "time_us": 1005},
        {"name": "fwd", "stage": "END", "device": 0, "time_us": 1300},
    ]
    return {"segments": [], "device_traces": [trace], "external_annotations": ann}


OPT = {"filename": "/home/u/optim.py", "line": 5, "name": "adam_state"}


def layered_snapshot() -> dict[str, Any]:
    """Bands, thin stripes and an aggregate band on one 10,000-byte segment (event 0):
    A (4010 bytes, train_step, event 1), 320 allocations of 1 byte (train_step, events
    2-321), C (3000, build_head, event 322), ten stripes of 12 bytes (adam_state, events
    323-332: the peak, 7450 bytes), then 20 of the 1-byte ones freed (events 333-352).

    At 10,000 bytes over 410 pixels (24.4 bytes a pixel) A and C are bands; a stripe is half
    a pixel, at least the page's 1/16, so the ten are drawn one by one; the 1-byte ones are
    under 1/16 of a pixel: the aggregate band. After event 340: A 0-4010, C 4010-7010,
    stripes 7010-7130, aggregate 7130-7442 (312 bytes). A ends 0.4 pixel into a pixel row
    that C covers the rest of.
    """
    trace = [ev("segment_alloc", 0x1000, 10_000, 0), ev("alloc", 0x1000, 4010, 1)]
    tiny = [0x1000 + 4010 + k for k in range(320)]
    trace += [ev("alloc", addr, 1, 2 + k) for k, addr in enumerate(tiny)]
    trace.append(ev("alloc", 0x1000 + 4330, 3000, 322, [CPP, HEAD]))
    trace += [ev("alloc", 0x1000 + 7330 + 12 * k, 12, 323 + k, [CPP, OPT]) for k in range(10)]
    trace += [ev("free_completed", addr, 1, 333 + k) for k, addr in enumerate(tiny[:20])]
    ann = [
        {"name": "fwd", "stage": "START", "device": 0, "time_us": 1005},
        {"name": "fwd", "stage": "END", "device": 0, "time_us": 2005},
    ]
    return {"segments": [], "device_traces": [trace], "external_annotations": ann}


@contextmanager
def serving(data: Any) -> Iterator[str]:
    """Run the viewer app for `data` on a free loopback port in a thread; yield its URL."""
    import uvicorn

    from memlens.views.web.address import bind_socket
    from memlens.views.web.server import create_app

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(data), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
