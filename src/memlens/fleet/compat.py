"""Where fleet finds the summary and the synthetic generator while they move (issue 14:
summarize -> memlens.analysis.summary, the generator -> memlens.simulation.synthetic)."""

from __future__ import annotations

from typing import Any

try:
    from memlens.analysis.summary import device_summary
except ImportError:  # before the move
    from memlens.views.text.summary import device_summary  # type: ignore[no-redef]


def generate_trace_dict(**options: Any) -> dict[str, Any]:
    try:
        from memlens.simulation.synthetic import generate_trace_dict as gen
    except ImportError:  # before the move
        from memlens.snapshot.generate import generate_trace_dict as gen  # type: ignore[no-redef]
    return gen(**options)


__all__ = ["device_summary", "generate_trace_dict"]
