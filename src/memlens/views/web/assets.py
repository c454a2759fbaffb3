"""The page's files (static/: the HTML, its stylesheet and ES modules, 190 KB), read once
when the app is made and served from memory, with the modules joined into one script
(/static/bundle.js, bundle.py).

Why not starlette's StaticFiles: each file it serves is a stat, an open and reads, each
sent to a worker thread; while the page loads, `memlens view`'s warm-up thread is finding
what the first viewport needs, and every hand-over waits for the GIL (up to the 5 ms
switch interval each). The page `/` serves is three requests before its first viewport
(index, stylesheet, bundle); /static/index.html is 20 (issue 37).
"""

from __future__ import annotations

from mimetypes import guess_type
from pathlib import Path

from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from memlens.views.web.bundle import bundle
from memlens.views.web.page import BUNDLE_URL


class PageFiles:
    """An ASGI app serving the files under `root` by their path below it (GET and HEAD);
    anything else under it is a 404, another method a 405, as StaticFiles answers."""

    def __init__(self, root: Path) -> None:
        self.files: dict[str, tuple[bytes, str]] = {
            "/" + p.relative_to(root).as_posix(): (p.read_bytes(), _media_type(p))
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }
        # the modules of js/main.js as one script (bundle.py), for the page `/` serves
        modules = {k[1:]: v.decode() for k, (v, _) in self.files.items() if k.endswith(".js")}
        script = bundle(modules, "js/main.js").encode()
        self.files[BUNDLE_URL.removeprefix("/static")] = (script, "text/javascript")

    def text(self, path: str) -> str:
        """A file's text ("/index.html")."""
        return self.files[path][0].decode()

    def response(self, path: str) -> Response:
        """The file at `path` ("/js/main.js"), or a 404."""
        found = self.files.get(path)
        if found is None:
            return PlainTextResponse("Not Found", status_code=404)
        return Response(found[0], media_type=found[1])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            response: Response = PlainTextResponse("Method Not Allowed", status_code=405)
        else:
            response = self.response(_below_mount(scope))
        await response(scope, receive, send)


def _below_mount(scope: Scope) -> str:
    """The request's path below the mount point ("/static/js/main.js" -> "/js/main.js"):
    Mount keeps the whole path and puts its own part in root_path."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path


def _media_type(path: Path) -> str:
    """As StaticFiles says it (text types get "; charset=utf-8" from Response)."""
    return guess_type(path.name)[0] or "text/plain"
