"""One tool call, whatever carries it: the answer as bounded JSON, or one error line.

The MCP server (server.py) is a thin layer over this, so the behaviour (the same JSON as
--json, the bounds, the error lines) is tested without the SDK. Calls may run at once,
each in its own thread (server.py, calls.py): the session guards what they share (a file
is loaded once, a second call for it waits for that load), and the analyses' memos on a
loaded snapshot are computed the same by whichever call gets there first.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memlens.agents.bound import Bounds, bound
from memlens.agents.session import Session
from memlens.agents.tools import Tool, to_json
from memlens.errors import MemlensError
from memlens.views.escape import error_line as error_line  # server.py names it here


@dataclass
class Reply:
    text: str  # the JSON as text, or the error line
    data: Any = None  # the JSON (None for an error)
    notes: list[str] = field(default_factory=list)  # what the bounds cut
    error: bool = False


class Dispatcher:
    def __init__(self, tools: list[Tool], session: Session, bounds: Bounds) -> None:
        self.tools = {t.name: t for t in tools}
        self.session = session
        self.bounds = bounds

    def call(
        self, name: str, args: dict[str, Any] | None, progress: Callable[[str], None] | None = None
    ) -> Reply:
        """`progress` hears the tool's progress lines (estimate, simulate, plan, advise's
        script check), from this thread."""
        tool = self.tools.get(name)
        try:
            if tool is None:
                raise MemlensError(f"no tool {name!r}; the tools: {', '.join(self.tools)}")
            if args is not None and not isinstance(args, dict):
                raise MemlensError(f"{name}: the arguments must be an object")
            with self.session.reporting(progress):
                result = to_json(tool.run(self.session, dict(args or {})))
        except Exception as exc:  # every failure is one line to the agent; the server goes on
            if os.environ.get("MEMLENS_DEBUG") == "1":
                traceback.print_exc()  # stderr: the host's log, not the protocol
            return Reply(error_line(exc), error=True)
        data, notes = bound(result, self.bounds)
        return Reply(json.dumps(data, separators=(",", ":")), data, notes)
