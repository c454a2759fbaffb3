"""Assemble changelog.d/ fragments into CHANGELOG.md (towncrier's idea, in 60 lines).

`python3 scripts/changelog.py` prints the entry the next release would get;
`--release X.Y.Z` writes it into CHANGELOG.md under a new version heading and removes the
fragments. Fragment rules are in changelog.d/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAGMENTS = ROOT / "changelog.d"
CHANGELOG = ROOT / "CHANGELOG.md"
KINDS = {
    "added": "Added",
    "changed": "Changed",
    "fixed": "Fixed",
    "removed": "Removed",
    "security": "Security",
}
NAME = re.compile(r"^(?P<issue>\d+)-(?P<slug>[a-z0-9-]+)\.(?P<kind>[a-z]+)\.md$")


def fragments() -> list[tuple[str, Path]]:
    """Every fragment as (kind, path), in name order; a badly named file is an error."""
    found: list[tuple[str, Path]] = []
    for path in sorted(FRAGMENTS.glob("*.md")):
        if path.name == "README.md":
            continue
        match = NAME.match(path.name)
        if match is None or match["kind"] not in KINDS:
            raise SystemExit(f"changelog.d/{path.name}: name must be <issue>-<slug>.<kind>.md")
        found.append((match["kind"], path))
    return found


def entry() -> str:
    """The Markdown of all fragments, grouped under Keep a Changelog's section names."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for kind, path in fragments():
        by_kind[kind].append(path.read_text().strip())
    parts = [
        f"### {KINDS[kind]}\n" + "\n".join(bodies) for kind, bodies in by_kind.items() if bodies
    ]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--release", metavar="VERSION")
    args = parser.parse_args(argv)
    text = entry()
    if args.release is None:
        print(text or "(no fragments)")
        return 0
    if not text:
        print("no fragments to release", file=sys.stderr)
        return 1
    heading = f"## [{args.release}] - {dt.date.today().isoformat()}\n\n"
    old = CHANGELOG.read_text()
    marker = "## [Unreleased]"
    at = old.index(marker) + len(marker)
    CHANGELOG.write_text(old[:at] + "\n\n" + heading + text + "\n" + old[at:])
    for _kind, path in fragments():
        path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
