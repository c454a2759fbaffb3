"""`memlens report`: one self-contained, shareable HTML file (no network) about a snapshot."""

from __future__ import annotations

from memlens.views.report.build import build_report, default_output, write_report

__all__ = ["build_report", "default_output", "write_report"]
