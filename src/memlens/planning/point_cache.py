"""The plan's cache of point figures, keyed by what determines them: the script's bytes,
its arguments, the simulation's settings and knobs (the `PointRequest`), and the
simulator itself (its sources and torch's version: a fix in the allocator model must not
serve figures computed before it)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path

import memlens
from memlens.errors import MemlensError
from memlens.planning.request import PointRequest
from memlens.planning.worker import PointFigures
from memlens.snapshot.store.cache import cache_root

# Bump when the figures a cached point holds change meaning.
CACHE_FORMAT = 3

# The sources a point's figures come from, relative to the package: the simulation, the
# allocator model it drives, and the worker that turns a run into figures.
SIMULATOR_SOURCES = (
    "simulation",
    "analysis/allocator_model.py",
    "planning/worker.py",
    "planning/sites.py",
)


@functools.cache
def simulator_identity() -> str:
    """sha256 over the simulator's Python sources (path and bytes, in a fixed order) and
    torch's version: computed once per process, without importing torch."""
    root = Path(memlens.__file__).parent
    digest = hashlib.sha256()
    for name in SIMULATOR_SOURCES:
        where = root / name
        files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    digest.update(f"torch {torch}".encode())
    return digest.hexdigest()


def cache_key(request: PointRequest) -> str:
    """The script's bytes (not its path or time: a copy or a touch still hits), the
    request's arguments, settings, knobs and environment, and the simulator's identity.
    Modules the script imports are not part of the key."""
    script = request.target.script
    try:
        source = script.encode() if request.target.module else Path(script).read_bytes()
    except OSError as exc:
        raise MemlensError(f"no such script: {script} ({exc.strerror})") from None
    ident = {
        "script_sha256": hashlib.sha256(source).hexdigest(),
        "request": request.identity(),
        "simulator": simulator_identity(),
        "format": CACHE_FORMAT,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]


def _cache_path(key: str) -> Path:
    return cache_root() / "plan" / f"{key}.json"


def cached(key: str) -> PointFigures | None:
    try:
        data = json.loads(_cache_path(key).read_text())
    except (OSError, ValueError):
        return None
    want = PointFigures.__annotations__.keys()
    return data if isinstance(data, dict) and data.keys() == want else None  # type: ignore[return-value]


def store(key: str, figures: PointFigures) -> None:
    """Write atomically (a concurrent plan reads a whole entry or none)."""
    path = _cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(figures, f)
    os.replace(tmp, path)
