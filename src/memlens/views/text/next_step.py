"""The "next:" line after a headline command's text: the command a user usually runs next,
with their own paths filled in (memray ends its reports the same way). Never in --json.

Text only; the CLI prints it dimmed on a terminal (click drops the style elsewhere).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

# command -> (the next command's arguments after `memlens`, with {snap} / {a} {b}; why)
NEXT: dict[str, tuple[str, str]] = {
    "summary": ("peak {snap}", "what is live at the peak, by call stack"),
    "peak": ("advise {snap}", "ranked fixes with the bytes at stake"),
    "advise": ("view {snap}", "the timeline in your browser"),
    "leaks": ("stages {snap}", "memory per stage, and the sites that grew or shrank"),
    "diff": ("view {a} {b}", "both timelines side by side"),
}


def next_step(command: str, paths: str | Sequence[str] | None) -> str | None:
    """`next: memlens peak run.pickle   (what is live at the peak, by call stack)` for a
    headline command given the snapshot path(s) it read, or None."""
    hint = NEXT.get(command)
    if hint is None or not paths:
        return None
    given = [paths] if isinstance(paths, str) else [str(p) for p in paths if p]
    if not given:
        return None
    quoted = [shlex.quote(p) for p in given]
    args, why = hint
    line = args.format(snap=quoted[0], a=quoted[0], b=quoted[-1])
    return f"next: memlens {line}   ({why})"
