"""Build-artifact check for CI: the wheel must carry every asset memlens loads at run time.

A missing asset only shows when a user opens the viewer, a report or an inspector
dashboard from an installed wheel (an editable install reads the source tree and hides
it), so CI inspects the wheel itself.
"""

from __future__ import annotations

import fnmatch
import sys
import zipfile
from pathlib import Path

# (glob inside the wheel, minimum number of matches, why it is needed)
REQUIRED: list[tuple[str, int, str]] = [
    ("memlens/py.typed", 1, "PEP 561 marker: users' type checkers read memlens's annotations"),
    ("memlens/views/web/static/index.html", 1, "viewer page"),
    ("memlens/views/web/static/*.css", 1, "viewer styles"),
    ("memlens/views/web/static/**.js", 5, "viewer ES modules"),
    ("memlens/views/report/templates/report.html", 1, "report page"),
    ("memlens/views/report/templates/report.css", 1, "report styles"),
    ("memlens/views/report/templates/report.js", 1, "report script"),
    ("memlens/inspector/render/templates/*", 2, "inspector dashboard assets"),
    ("memlens/agents/skill/SKILL.md", 1, "the agent skill `memlens skill install` writes"),
    ("memlens/agents/docs/json-schema.md", 1, "MCP resource: the JSON schema"),
    ("memlens/agents/docs/concepts.md", 1, "MCP resource: the concepts"),
    # optional at `pip install` (no compiler: the Python path), never missing from CI's build
    ("memlens/snapshot/_fastreader*.so", 1, "compiled snapshot reader"),
    ("memlens/snapshot/_fastreplay*.so", 1, "compiled replay"),
    ("memlens/snapshot/_fast*.pyi", 2, "types of the compiled modules"),
    ("memlens/snapshot/store/_checksum*.so", 1, "compiled CRC-32C of the column cache"),
    ("memlens/snapshot/store/_checksum.pyi", 1, "types of the compiled checksum"),
]

# Nothing from the tests, benchmarks or local data may ship.
FORBIDDEN = ["tests/*", "benchmarks/*", "*.pickle", "*.pickle.gz"]
# The C sources (src/memlens/snapshot/csrc) are the sdist's, built into the two .so files.
FORBIDDEN += ["memlens/snapshot/csrc/*", "*.c", "*.h"]


def check(wheel: Path) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    problems = []
    for pattern, minimum, why in REQUIRED:
        found = [n for n in names if fnmatch.fnmatch(n, pattern)]
        if len(found) < minimum:
            problems.append(f"{pattern}: {len(found)} file(s), need {minimum} ({why})")
    for pattern in FORBIDDEN:
        problems += [f"{n}: must not ship" for n in names if fnmatch.fnmatch(n, pattern)]
    return problems


def main() -> int:
    wheels = [Path(p) for p in sys.argv[1:]]
    if len(wheels) != 1:
        print("usage: check_wheel.py DIST/memlens-*.whl", file=sys.stderr)
        return 2
    problems = check(wheels[0])
    for p in problems:
        print(f"wheel: {p}", file=sys.stderr)
    if not problems:
        print(f"wheel: {wheels[0].name} carries every runtime asset")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
