"""The viewer's HTTP server: a starlette app serving the page, its assets and a JSON API.

Loopback only by default; a Host-header allow-list stops DNS-rebinding pages from reading
the API, and a strict Content-Security-Policy keeps the page to its own scripts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memlens.errors import MemlensError
from memlens.views.escape import visible
from memlens.views.web.answers import (
    AllocationAnswer,
    AnnotationsAnswer,
    ChartAnswer,
    CompareAnswer,
    ErrorAnswer,
    LiveAnswer,
    MetaAnswer,
    PoolsAnswer,
    StateAnswer,
)
from memlens.views.web.assets import PageFiles
from memlens.views.web.data import PAGE_MIN_PX, ViewerData, Window
from memlens.views.web.kept_answers import json_bytes
from memlens.views.web.loading import Loading
from memlens.views.web.page import BUNDLE_URL, InlineAssets, inline_assets, served_index

if TYPE_CHECKING:  # the summary's type only: its module is imported when one is asked for
    from memlens.analysis.results import DeviceSummary

# the page and its ES modules (static/js/), package data like the report templates; read
# into memory when an app is made (assets.py; str() of it: memlens is never imported from
# a zip)
STATIC = files("memlens.views.web") / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
log = logging.getLogger("memlens.view")
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return content if isinstance(content, bytes) else json_bytes(content)


# Bounds of every numeric query parameter: the page never sends anything near them, so a
# value past one is a hand-made URL; it gets HTTP 400 and a message, never a 500.
MAX_PIXELS = 100_000  # width, height
MAX_COUNT = 1 << 62  # event indices, rows, byte counts
MAX_POSITION = 1e18  # fractional event positions and times (µs since the epoch fit)


def _number(req: Request, name: str) -> float | None:
    v = req.query_params.get(name)
    if v is None or v == "":
        return None
    if len(v) > 40:
        raise MemlensError(f"{name} must be a number (got {len(v)} characters)")
    try:
        out = float(v)
    except ValueError:
        raise MemlensError(f"{name} must be a number") from None
    if not math.isfinite(out):
        raise MemlensError(f"{name} must be a finite number")
    return out


@overload
def _int(req: Request, name: str, default: int, lo: int = ..., hi: int = ...) -> int: ...
@overload
def _int(
    req: Request, name: str, default: None = None, lo: int = ..., hi: int = ...
) -> int | None: ...
def _int(
    req: Request, name: str, default: int | None = None, lo: int = -1, hi: int = MAX_COUNT
) -> int | None:
    """An integer parameter within [lo, hi] (a float such as 3.0 is taken; 1e400, NaN and
    anything past the bounds are a 400)."""
    out = _number(req, name)
    if out is None:
        return default
    if not lo <= out <= hi:
        raise MemlensError(f"{name} must be between {lo} and {hi}")
    return int(out)


def _float(
    req: Request, name: str, lo: float = -MAX_POSITION, hi: float = MAX_POSITION
) -> float | None:
    out = _number(req, name)
    if out is not None and not lo <= out <= hi:
        raise MemlensError(f"{name} must be between {lo:g} and {hi:g}")
    return out


def _window(req: Request) -> Window:
    """A viewport's size and x range (event or time), as the charts' endpoints take them."""
    return {
        # 0 is clamped to 1 px (and wide views to the data's own cap) as always
        "width": _int(req, "width", 1000, lo=0, hi=MAX_PIXELS) or 1,
        "height": _int(req, "height", 400, lo=0, hi=MAX_PIXELS) or 1,
        "e0": _float(req, "e0"),
        "e1": _float(req, "e1"),
        "t0": _float(req, "t0"),
        "t1": _float(req, "t1"),
    }


def _split(req: Request) -> Literal["stream"] | None:
    """split=stream: streams drawn apart; absent or empty: one stack."""
    split = req.query_params.get("split") or None
    if split not in (None, "stream"):
        raise MemlensError("split must be 'stream' (or absent)")
    return "stream" if split else None


def _snap(req: Request) -> int:
    return _int(req, "snap", 0, lo=0, hi=1 << 20)


def create_app(
    data: ViewerData | Loading, host: str = "127.0.0.1", frame_ancestors: Sequence[str] = ()
) -> Starlette:
    """The viewer app for `data` (or for the data a Loading will have: its API requests
    wait for it). `host` is the bind address (it decides allowed Hosts).
    `frame_ancestors`: origins that may show the page in a frame (a notebook's iframe,
    memlens.notebook); by default none may."""
    loading = data if isinstance(data, Loading) else Loading(data)
    loaded = loading.wait  # every endpoint's data, once loaded (at once when given)

    def api(fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(req: Request) -> Response:
            try:
                # the numpy work and the JSON encoding off the event loop: two panes'
                # requests are served side by side (numpy releases the GIL in its loops)
                return await run_in_threadpool(lambda: JSON(fn(req)))
            except MemlensError as exc:  # the user's (a bad parameter, no such row)
                error: ErrorAnswer = {"error": str(exc)}
                return JSON(error, status_code=400)
            except Exception as exc:  # a bug (KeyError, IndexError too): its traceback logged
                log.exception("internal error on %s", visible(req.url.path))
                error = {"error": f"internal error ({type(exc).__name__})"}
                return JSON(error, status_code=500)

        return endpoint

    def device(req: Request) -> int:
        raw = req.path_params["device"]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 7):
            raise MemlensError("device must be a small non-negative integer")
        return int(raw)

    def meta(req: Request) -> MetaAnswer:
        return loaded().meta()

    def view(req: Request) -> bytes:  # ChartAnswer's JSON (loaded().view_json)
        min_px = _float(req, "min_px", lo=0, hi=MAX_PIXELS)
        return loaded().view_json(
            _snap(req),
            device(req),
            **_window(req),
            ymax=_int(req, "ymax", lo=0),
            ymin=_int(req, "ymin", lo=0),
            detail=req.query_params.get("detail", "1") != "0",
            min_px=PAGE_MIN_PX if min_px is None else min_px,
            q=req.query_params.get("q"),
            split=_split(req),
        )

    def alloc(req: Request) -> AllocationAnswer:
        row = req.path_params["row"]  # {row:int}: digits only, but any number of them
        if row >= MAX_COUNT:
            raise MemlensError(f"row must be below {MAX_COUNT}")
        return loaded().allocation(_snap(req), device(req), row)

    def live(req: Request) -> LiveAnswer:
        return loaded().live(
            _snap(req),
            device(req),
            _int(req, "event", -1, lo=-1),
            python_only=req.query_params.get("python_only", "1") != "0",
        )

    def segments(req: Request) -> ChartAnswer:
        return loaded().segments(_snap(req), device(req), **_window(req))

    def allocator(req: Request) -> StateAnswer:
        return loaded().state(_snap(req), device(req), _int(req, "event", -1, lo=-1))

    def pools(req: Request) -> PoolsAnswer:
        from memlens.views.web.pools_view import pool_envelopes

        width = _int(req, "width", 400, lo=1, hi=MAX_PIXELS)
        return pool_envelopes(loaded().dev(_snap(req), device(req)), width)

    def summary(req: Request) -> DeviceSummary:
        return loaded().summary(_snap(req), device(req))

    def annotations(req: Request) -> AnnotationsAnswer:
        return loaded().annotations(_snap(req), device(req))

    def compare(req: Request) -> CompareAnswer:
        return loaded().compare(
            [_int(req, "d0", lo=0, hi=1 << 20), _int(req, "d1", lo=0, hi=1 << 20)]
        )

    page = PageFiles(Path(str(STATIC)))
    # the script and the stylesheet written into the page `/` serves (page.py)
    inline = inline_assets(page.text(BUNDLE_URL.removeprefix("/static")), page.text("/app.css"))
    # the page without /api/meta's answer (it preloads it): while the snapshots load, or
    # when the answer fails (the page's own request then says what is wrong)
    without_meta = served_index(page.text("/index.html"), None, inline).encode()
    served: list[bytes] = []  # the page `/` serves, made once /api/meta's answer is known

    def make_index() -> bytes:
        if not served:
            try:
                meta = loaded().meta()
            except Exception:
                return without_meta
            served.append(served_index(page.text("/index.html"), meta, inline).encode())
        return served[0]

    async def index(req: Request) -> Response:
        # /api/meta's answer is written in (page.py): made on the event loop once the
        # warm-up thread has it (the usual case: it is the first thing it does), else on a
        # worker thread, which waits for it without holding up the page's other files.
        # While the snapshots load, the page without it (its preload of /api/meta, which
        # waits for the load): the browser parses the page meanwhile
        if not (served or loading.loaded()):
            body = without_meta
        elif served or loaded().meta_ready():
            body = make_index()
        else:
            body = await run_in_threadpool(make_index)
        return Response(body, media_type="text/html")

    routes = [
        Route("/", index),
        Route("/api/meta", api(meta)),
        Route("/api/d/{device}/view", api(view)),
        Route("/api/d/{device}/alloc/{row:int}", api(alloc)),
        Route("/api/d/{device}/live", api(live)),
        Route("/api/d/{device}/annotations", api(annotations)),
        Route("/api/d/{device}/summary", api(summary)),
        Route("/api/d/{device}/state", api(allocator)),
        Route("/api/d/{device}/segments", api(segments)),
        Route("/api/d/{device}/pools", api(pools)),
        Route("/api/compare", api(compare)),
        Mount("/static", app=page, name="static"),
    ]
    allowed = ["*"] if host in ("0.0.0.0", "::", "") else sorted({*LOOPBACK_NAMES, host})
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders, frame_ancestors=tuple(frame_ancestors), inline=inline),
            Middleware(TrustedHostMiddleware, allowed_hosts=allowed),
        ],
    )
    app.state.loading = loading
    return app


def import_request_modules() -> None:
    """Import now what the first API request would: anyio's asyncio backend, which
    starlette's run_in_threadpool imports on its first use (0.05-0.12 s, on the path of the
    page's first viewport otherwise). For `memlens view`, before it starts serving."""
    import anyio._backends._asyncio  # noqa: F401


class SecurityHeaders:
    """Pure ASGI middleware: security headers on every response, CSP on the page."""

    def __init__(
        self,
        app: ASGIApp,
        frame_ancestors: tuple[str, ...] = (),
        inline: InlineAssets | None = None,
    ) -> None:
        self.app = app
        self.page_headers = _page_headers(frame_ancestors, inline)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        page = scope["path"] == "/" or scope["path"].endswith(".html")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
                headers["Cache-Control"] = "no-store"
                if page:
                    for k, v in self.page_headers.items():
                        headers[k] = v
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _page_headers(
    frame_ancestors: tuple[str, ...] = (), inline: InlineAssets | None = None
) -> dict[str, str]:
    policy = inline.csp(CSP) if inline is not None else CSP  # the page's own, by hash
    if not frame_ancestors:
        return {"Content-Security-Policy": policy, "X-Frame-Options": "DENY"}
    # X-Frame-Options cannot name origins; CSP frame-ancestors supersedes it where given
    csp = policy.replace("frame-ancestors 'none'", "frame-ancestors " + " ".join(frame_ancestors))
    return {"Content-Security-Policy": csp}
