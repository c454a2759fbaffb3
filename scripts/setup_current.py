"""Exit 0 when `pip install -c constraints-dev.txt -e ".[dev]"` would change nothing, so
that scripts/setup.sh can skip it (the editable build alone takes about 30 s of CPU: a
fresh build environment, then the C extensions compiled again). Exit 1 otherwise, saying
why. It is current when
- memlens is installed from this checkout, editable;
- each compiled module is there and newer than setup.py, pyproject.toml and every C file;
- every requirement of `memlens[dev]` (the extras it names, followed) is met;
- and every pin of constraints-dev.txt is met.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
COMPILED = ["snapshot/_fastreader", "snapshot/_fastreplay", "snapshot/store/_checksum"]


def _why_not() -> str | None:
    try:
        origin = json.loads(md.distribution("memlens").read_text("direct_url.json") or "{}")
    except md.PackageNotFoundError:
        return "memlens is not installed"
    editable = origin.get("dir_info", {}).get("editable", False)
    if not editable or Path(urlparse(origin.get("url", "")).path) != ROOT:
        return f"memlens is installed from {origin.get('url')}, not this checkout (editable)"
    sources = [ROOT / "setup.py", ROOT / "pyproject.toml",
               *(ROOT / "src/memlens/snapshot/csrc").iterdir()]  # fmt: skip
    newest = max(p.stat().st_mtime for p in sources)
    for module in COMPILED:
        built = sorted((ROOT / "src/memlens").glob(f"{module}.*.so"))
        if not built:
            return f"{module} is not built"
        if built[0].stat().st_mtime < newest:
            return f"{module} is older than its sources"
    try:
        import tomllib
        from packaging.requirements import Requirement
    except ImportError:  # Python 3.10 (no TOML reader), or no packaging yet
        return "pyproject.toml cannot be read here yet"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    todo, seen = ["dev"], set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for req in map(Requirement, project["optional-dependencies"][extra]):
            if req.name == "memlens":
                todo += sorted(req.extras - seen)
            else:
                wanted.append(req)
    pins = (line.split("#")[0].strip() for line in (ROOT / "constraints-dev.txt").open())
    wanted += [Requirement(pin) for pin in pins if pin]
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            return f"{req.name} is not installed"
        if not req.specifier.contains(have, prereleases=True):
            return f"{req.name} {have} is installed, {req} is asked for"
    return None


if __name__ == "__main__":
    why = _why_not()
    if why is not None:
        print(f"memlens setup: installing ({why})", file=sys.stderr)
    sys.exit(0 if why is None else 1)
