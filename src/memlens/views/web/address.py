"""The viewer's listening socket and its URL, apart from the web stack: `memlens view`
binds and prints the URL before it imports starlette and uvicorn (issue 37), so a browser
starts loading the page (its connection waits in the socket's backlog) while they load."""

from __future__ import annotations

import socket

from memlens.errors import MemlensError


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind first, so port 0 resolves to a real port before the URL is printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MemlensError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_for(host: str, port: int, device: int | None) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    query = f"?device={device}" if device is not None else ""
    return f"http://{shown}:{port}/{query}"
