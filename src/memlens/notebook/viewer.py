"""`memlens.notebook.view(...)`: the interactive viewer of `memlens view`, served from a
background thread of the kernel on 127.0.0.1 and shown in the cell as an iframe.

The server is the viewer's own (views/web/server.py) with one change: its page may be
framed by a notebook, i.e. by a page on a loopback origin or a VS Code webview (the page's
Content-Security-Policy otherwise forbids any frame). It stops with `.stop()`, with
`stop_all()`, or when the kernel exits (atexit); dropping the object does not stop it, so
a displayed viewer keeps working after its variable is gone.
"""

from __future__ import annotations

import html
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.snapshot.model import Snapshot

# Where notebooks run: Jupyter/JupyterLab on a loopback port (also through an SSH tunnel),
# VS Code's notebook webviews. No "http://[::1]:*": a CSP host-source cannot be an IPv6
# literal, and Chromium rejects it (a notebook on [::1] is opened as localhost instead).
FRAME_ANCESTORS = (
    "http://localhost:*",
    "http://127.0.0.1:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "vscode-webview:",
    "vscode-file:",
)
START_TIMEOUT_S = 15.0

_live: set[Viewer] = set()


def _shutdown(server: Any, thread: threading.Thread, sock: Any) -> None:
    server.should_exit = True
    thread.join(timeout=5)
    sock.close()


class Viewer:
    """A running viewer: displays as an iframe of its page (`url`); `stop()` ends it."""

    def __init__(
        self,
        snapshots: list[Snapshot],
        names: list[str],
        *,
        device: int | None = None,
        height: int = 600,
        frame_ancestors: tuple[str, ...] = FRAME_ANCESTORS,
    ) -> None:
        try:
            import uvicorn
        except ImportError:
            raise MemlensError(
                "the viewer needs its web server: pip install 'memlens[notebook]'"
            ) from None

        from memlens.views.web.address import bind_socket, url_for
        from memlens.views.web.data import ViewerData
        from memlens.views.web.server import create_app

        data = ViewerData(snapshots, names)
        sock = bind_socket("127.0.0.1", 0)
        self.port: int = sock.getsockname()[1]
        self.url: str = url_for("127.0.0.1", self.port, device)
        self.height = height
        app = create_app(data, host="127.0.0.1", frame_ancestors=frame_ancestors)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="memlens-viewer", daemon=True
        )
        thread.start()
        # atexit=True (the default): the kernel's exit stops it too
        self._finalizer = weakref.finalize(self, _shutdown, self._server, thread, sock)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self._finalizer()
                raise MemlensError(f"the viewer did not start on {self.url}")
            time.sleep(0.01)
        threading.Thread(target=data.warm, name="memlens-warm", daemon=True).start()
        _live.add(self)

    @property
    def running(self) -> bool:
        return self._finalizer.alive

    def stop(self) -> None:
        """Stop the server (the iframe then shows nothing new)."""
        _live.discard(self)
        self._finalizer()

    def _repr_html_(self) -> str:
        if not self.running:
            return f"<p>memlens viewer stopped (was {html.escape(self.url)})</p>"
        return (
            f'<iframe src="{html.escape(self.url, quote=True)}" width="100%" '
            f'height="{int(self.height)}" style="border:1px solid #ccc" '
            'title="memlens viewer"></iframe>'
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<memlens viewer {state} at {self.url}>"


def view(
    snapshot: Snapshot | str | os.PathLike[str],
    compare: Snapshot | str | os.PathLike[str] | None = None,
    *,
    device: int | None = None,
    height: int = 600,
) -> Viewer:
    """The interactive viewer of `snapshot` (a loaded Snapshot or a path) in the cell;
    with `compare`, the two side by side as `memlens view A B`. Returns the Viewer (it
    displays as the iframe; `.url` to open it in a browser tab, `.stop()` to end it)."""
    from memlens.snapshot.loader import load

    snaps, names = [], []
    for s in (snapshot, compare):
        if s is None:
            continue
        snap = s if isinstance(s, Snapshot) else load(Path(s))
        if device is not None:
            snap.device(device)  # fails early, with the list of devices
        snaps.append(snap)
        names.append(snap.source)
    return Viewer(snaps, names, device=device, height=height)


def stop_all() -> None:
    """Stop every viewer this kernel started."""
    for v in list(_live):
        v.stop()
