"""`memlens view SNAP [SNAP2]`: the browser viewer on a local server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import TYPE_CHECKING

import click

from memlens.cli.options import (
    opening_options,
    require_extra,
    snapshots_argument,
    status,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from memlens.views.web.data import ViewerData

# at Ctrl+C, how long to let the column cache finish writing (4M events: about a second)
CACHE_WRITE_WAIT_S = 60.0
# how long the load waits for the browser's launch to return (xdg-open: tens of ms)
BROWSER_LAUNCH_WAIT_S = 1.0


@click.command("view")
@snapshots_argument()
@click.option(
    "--port",
    "-p",
    type=int,
    default=0,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Keep loopback and use SSH port forwarding to reach it "
    "remotely; 0.0.0.0 exposes the snapshot to your network.",
)
@click.option("--no-browser", is_flag=True, help="Do not open a browser; just print the URL.")
@opening_options(device_help="Device shown first (default: the longest trace).")
def command(
    paths: tuple[str, str | None],
    port: int,
    host: str,
    no_browser: bool,
    device: int | None,
    no_cache: bool,
    annotation_files: tuple[str, ...],
) -> None:
    """Open the interactive timeline of SNAPSHOT in the browser (with SNAPSHOT2: compare).

    Zoom with the wheel, pan by dragging, hover an allocation for its call site, click it for
    its stack, click the time axis strip for what is live at that moment. Press ? for keys.
    """
    require_extra("view", "its web server", ("starlette", "uvicorn"), "web")
    from memlens.cli.view_loading import check_cheaply, start_loading
    from memlens.views.web.address import bind_socket, url_for
    from memlens.views.web.loading import Loading

    check_cheaply(paths)  # a missing or text file: one error line, no URL
    sock = bind_socket(host, port)
    url = url_for(host, sock.getsockname()[1], device)
    written = threading.Event()
    stopping = threading.Event()  # the server has stopped (Ctrl+C, or a failed load)
    go = threading.Event()  # the load may start

    def warm(data: ViewerData, cache_writes: list[Callable[[], None]]) -> None:
        def write_cache() -> None:
            for write in cache_writes:
                write()

        try:
            if stopping.is_set():  # stopped during the load: no page to wait for
                write_cache()
            else:  # the cache is written once the first viewport is out (the CPU is its)
                data.warm(after_first_view=[write_cache])  # then keeps its indexes beside it
        finally:
            written.set()  # (also when warm() failed before writing)

    loading = Loading()  # the snapshots, loaded once the server is ready to serve
    try:  # from here on, a Ctrl+C still lets the cache be written, for a fast next start
        # (the loading thread exists before the URL is out: a Ctrl+C at any moment after it
        # lets the load run and its cache be written, as when the load came first)
        start_loading(loading, paths, no_cache, annotation_files, device, go, then=warm)
        # the URL as soon as the socket listens (issue 37): the browser starts, and asks
        # for the page (its connection waiting in the socket's backlog), while the web
        # stack is imported and the snapshots load
        shown = ", ".join(p for p in paths if p is not None)
        status(f"memlens view: serving {shown} at {url}  (Ctrl+C to stop)")
        if host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(
                "memlens: warning: listening beyond loopback; anyone who can reach this "
                "port can read the snapshot",
                err=True,
            )
        if not no_browser:
            open_browser(url)
        # the page's API requests wait for the load (loading.py), then answer as always;
        # it starts once the server is ready to serve (the compiled reader holds the GIL
        # for most of a load: the web stack's imports would wait for it), or at a Ctrl+C
        # (its cache is then written, as for a Ctrl+C just after the URL before)
        import uvicorn

        from memlens.views.web.server import create_app, import_request_modules

        app = create_app(loading, host=host)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        # what serving imports (uvicorn's protocol, anyio's backend), before the first
        # request is answered
        config.load()
        import_request_modules()

        def stop_if_failed(done: Future[ViewerData]) -> None:
            if done.exception() is not None:  # said below, once the server has stopped
                server.should_exit = True

        loading.future.add_done_callback(stop_if_failed)
        go.set()
        server.run(sockets=[sock])
        failed = loading.future.exception() if loading.future.done() else None
        if failed is not None:  # one `memlens: error:` line and exit 2, as before serving
            raise failed
    finally:
        sock.close()
        stopping.set()
        go.set()
        # a Ctrl+C during the load lets it end (the compiled reader cannot be interrupted:
        # it holds the GIL) and its cache be written, for a fast next start; a second
        # Ctrl+C stops at once (one before the load started: nothing to wait for)
        if loading.future.running():
            futures.wait([loading.future])
        if loading.loaded():
            written.wait(CACHE_WRITE_WAIT_S)


def open_browser(url: str) -> None:
    """Launch the browser on `url` (its connection waits in the socket's backlog), before
    the load starts: the compiled reader holds the GIL for most of a load (1.7 s at 4M
    events), which a launch on another thread would wait for."""
    import webbrowser  # (not imported before it is needed: start-up time)

    launched = threading.Event()

    def launch() -> None:
        try:
            webbrowser.open(url)
        finally:
            launched.set()

    # (a console browser named in $BROWSER runs until it is quit: not waited for)
    threading.Thread(target=launch, name="memlens-browser", daemon=True).start()
    launched.wait(BROWSER_LAUNCH_WAIT_S)
