"""Text of `memlens categories` and `memlens rules`: bytes per group, then by compile context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import CategoriesOutput, RulesResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, groups_lines, table_lines, when_text


def render_categories(result: CategoriesOutput, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    device = result["device"]
    lines = [f"device {device}: {fb(result['active_bytes'])} active {when_text(result['event'])}"]
    lines += groups_lines("category", result["categories"])
    cc = result["compile_contexts"]
    lines.append("")
    if cc["has_context"]:
        lines.append("by compile context:")
        lines += table_lines(
            ["context", "at event", "allocated in trace"],
            [[x["context"], fb(x["bytes"]), fb(x["allocated_bytes"])] for x in cc["contexts"]],
        )
    else:
        lines.append(
            "by compile context: not recorded (record with compile_context=True, PyTorch 2.8+)"
        )
    return "\n".join(lines)


def render_rules(result: RulesResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    device = result["device"]
    lines = [f"device {device}: {fb(result['active_bytes'])} active {when_text(result['event'])}"]
    lines += groups_lines("rule", result["rules"])
    return "\n".join(lines)
