"""Text of `memlens check`: one line per budget; the broken ones (and the verdict, when a
budget is broken) go to stderr, where CI logs show them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import CheckOutput
from memlens.views.text.lines import NO_OPTIONS


def render_check(
    result: CheckOutput, options: Mapping[str, Any] = NO_OPTIONS
) -> list[tuple[str, bool]]:
    """(line, to_stderr) pairs."""
    lines = [
        (("ok:   " if c["ok"] else "FAIL: ") + c["message"], not c["ok"])
        for r in result["devices"]
        for c in r["checks"]
    ]
    ok = result["ok"]
    lines.append(("memlens check: " + ("all budgets met" if ok else "budget exceeded"), not ok))
    return lines
