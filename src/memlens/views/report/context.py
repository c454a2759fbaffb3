"""What every report section gets: the loaded snapshot(s), options, and shared results."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from memlens.analysis.results import DeviceSummary
from memlens.snapshot.model import DeviceTrace, Snapshot


class SectionUnavailable(Exception):
    """A section has nothing it can show; the message is shown instead (not an error)."""


@dataclass
class ReportContext:
    snap: Snapshot
    dev: DeviceTrace
    hide_patterns: Sequence[str] | None = None
    rules_path: str | None = None
    snap2: Snapshot | None = None
    dev2: DeviceTrace | None = None
    # how to call A and B in the page (the paths the user gave; default: Snapshot.source)
    names: tuple[str, str] = ("", "")
    # JSON handed to the page script (timeline bins, trees, ...), filled by the sections
    data: dict[str, Any] = field(default_factory=dict)
    # one line per section that could not be built, for the CLI to print as warnings
    problems: list[str] = field(default_factory=list)

    @cached_property
    def summary(self) -> DeviceSummary:
        from memlens.analysis.summary import device_summary

        return device_summary(self.dev, top=15, hide_patterns=self.hide_patterns)

    @cached_property
    def peak_rows(self) -> np.ndarray:  # allocation rows live at the peak
        return self.dev.live_at(self.dev.peak_event_index)


def guarded(
    ctx: ReportContext, title: str, fn: Callable[..., str | None], *args: Any
) -> str | None:
    """fn(ctx, *args), or a one-line note when it has nothing to show or fails: never
    raises, so one broken analysis never costs the user the rest of the report."""
    from memlens.errors import MemlensError
    from memlens.views.report.page import note

    try:
        return fn(ctx, *args)
    except SectionUnavailable as exc:
        return note(f"Not available: {exc}")
    except MemlensError as exc:
        ctx.problems.append(f"{title}: {exc}")
        return note(f"Not available: {exc}")
    except Exception as exc:
        ctx.problems.append(f"{title}: {type(exc).__name__}: {exc}")
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return note(f"Not available: this section failed ({detail}).")


SectionFn = Callable[[ReportContext], "str | None"]


@dataclass
class Section:
    """One section of the report: each module of memlens.views.report.sections has one
    (SECTION), and build.sections() puts them in page order."""

    id: str
    title: str
    # the section's HTML (already safe), or None to leave it out
    fn: SectionFn
    # built only when this returns True (e.g. the diff needs a second snapshot)
    when: Callable[[ReportContext], bool] = lambda ctx: True
