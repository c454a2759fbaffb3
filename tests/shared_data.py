"""Where the real snapshots live, for tests that read them.

A plain module, not conftest.py: test modules import these names, and `from conftest
import ...` resolves to whichever of the suite's several conftest.py files Python imported
first under the module name `conftest` (tests/fleet and tests/integrations have their own).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_SNAPSHOTS = Path(
    os.environ.get("MEMLENS_SHARED_SNAPSHOTS", REPO_ROOT.parent / "shared" / "snapshots")
)

# how skip reasons name the folder: never its absolute path, which is outside the repository
SHARED_LABEL = (
    "$MEMLENS_SHARED_SNAPSHOTS"
    if "MEMLENS_SHARED_SNAPSHOTS" in os.environ
    else "../shared/snapshots"
)


def real_snapshot_names() -> list[str]:
    if not SHARED_SNAPSHOTS.is_dir():
        return []
    return sorted(p.name for p in SHARED_SNAPSHOTS.glob("*.pickle"))
