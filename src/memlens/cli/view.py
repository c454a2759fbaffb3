"""`memlens view SNAP [SNAP2]`: the browser viewer on a local server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import click

from memlens.cli.options import (
    open_snapshots,
    opening_options,
    require_extra,
    snapshots_argument,
    status,
)

# at Ctrl+C, how long to let the column cache finish writing (4M events: about a second)
CACHE_WRITE_WAIT_S = 60.0


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
    from memlens.views.web.address import bind_socket, url_for

    # a cold load's column cache is written in the background, after the first viewport
    cache_writes: list[Callable[[], None]] = []
    opened = open_snapshots(paths, no_cache, annotation_files, device, cache_writes)
    snapshots, snaps = [p for p, _ in opened], [s for _, s in opened]
    if device is not None:
        for s in snaps:
            s.device(device)  # fails early, with the list of devices
    sock = bind_socket(host, port)
    url = url_for(host, sock.getsockname()[1], device)
    written = threading.Event()
    warming = False

    def write_cache() -> None:
        try:
            for write in cache_writes:
                write()
        finally:
            written.set()

    try:  # from here on, a Ctrl+C still lets the cache be written, for a fast next start
        # the URL as soon as the socket listens (issue 37): the browser starts loading the
        # page, its connection waiting in the socket's backlog, while the web stack is
        # imported (0.2-0.3 s of a warm start) instead of after
        status(f"memlens view: serving {', '.join(snapshots)} at {url}  (Ctrl+C to stop)")
        if host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(
                "memlens: warning: listening beyond loopback; anyone who can reach this "
                "port can read the snapshot",
                err=True,
            )
        if not no_browser:
            import webbrowser  # (not imported before it is needed: start-up time)

            threading.Timer(0.3, lambda: webbrowser.open(url)).start()
        import uvicorn

        from memlens.views.web.data import ViewerData
        from memlens.views.web.server import create_app, import_request_modules

        data = ViewerData(snaps, snapshots)
        app = create_app(data, host=host)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        data.defer_indexes()
        # what serving imports (uvicorn's protocol, anyio's backend), before the warm-up
        # thread starts and the first viewport is asked for
        config.load()
        import_request_modules()

        def background() -> None:
            try:  # the cache is written once the first viewport is out (the CPU is its)
                data.warm(after_first_view=[write_cache])  # then keeps its indexes beside it
            finally:
                written.set()  # (also when warm() failed before writing)

        # (started once the imports are done: beside them, each of its many short GIL
        # releases waited for the importing thread, docs/benchmarks-view.md)
        threading.Thread(target=background, name="memlens-warm", daemon=True).start()
        warming = True
        server.run(sockets=[sock])
    finally:
        sock.close()
        if warming:
            written.wait(CACHE_WRITE_WAIT_S)
        else:  # stopped before serving: the cache is written here
            write_cache()
