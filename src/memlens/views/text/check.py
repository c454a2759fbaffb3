"""Text of `memlens check`: one line per budget; the broken ones (and the verdict, when a
budget is broken) go to stderr, where CI logs show them."""

from __future__ import annotations

from typing import Any


def render_check(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """(line, to_stderr) pairs."""
    lines = [
        (("ok:   " if c["ok"] else "FAIL: ") + c["message"], not c["ok"])
        for r in result["devices"]
        for c in r["checks"]
    ]
    ok = result["ok"]
    lines.append(("memlens check: " + ("all budgets met" if ok else "budget exceeded"), not ok))
    return lines
