"""`memlens rules SNAP RULES.(json|yaml)`: memory per custom rule (regexes over frames,
first match wins), at the peak and over time."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import event_option, points_option, top_option
from memlens.snapshot.model import DeviceTrace


def _load(rules_file: str, **options: Any) -> dict[str, Any]:
    """The rules file is read (and checked) before the snapshot."""
    from memlens.analysis.rules import load_rules

    return {**options, "rules": load_rules(rules_file)}


@analysis_command(
    "rules",
    click.argument("rules_file", type=click.Path(dir_okay=False)),
    event_option,
    points_option(400),
    top_option(3, "Top call sites per rule."),
    prepare=_load,
)  # fmt: skip
def command(dev: DeviceTrace, rules: list[Any], event: int | None, points: int, top: int,
            hide: list[str] | None) -> Answer:  # fmt: skip
    """Memory per rule. RULES_FILE maps names to regexes searched in each frame's
    "filename:line:name"; an allocation takes the first rule matching any of its frames.

    \b
    {"rules": [{"name": "attention", "pattern": "attn|attention"},
               {"name": "mlp", "pattern": "mlp|ffn"}]}
    or simply {"attention": "attn|attention", "mlp": "mlp|ffn"} (YAML works too).
    """
    from memlens.analysis.rules import rules_analysis
    from memlens.views.text.categories import render_rules

    result = rules_analysis(dev, rules, event=event, points=points, top=top, hide_patterns=hide)
    return Answer(result, render_rules, dev.device)
