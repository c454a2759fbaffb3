"""`memlens rules SNAP RULES.(json|yaml)`: memory per custom rule (regexes over frames,
first match wins), at the peak and over time."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    event_option,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
    points_option,
    snapshot_argument,
)


@click.command("rules")
@snapshot_argument
@click.argument("rules_file", type=click.Path(dir_okay=False))
@event_option
@points_option(400)
@click.option("--top", type=int, default=3, show_default=True, help="Top call sites per rule.")
@device_option
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, rules_file: str, event: int | None, points: int, top: int,
            device: int | None, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """Memory per rule. RULES_FILE maps names to regexes searched in each frame's
    "filename:line:name"; an allocation takes the first rule matching any of its frames.

    \b
    {"rules": [{"name": "attention", "pattern": "attn|attention"},
               {"name": "mlp", "pattern": "mlp|ffn"}]}
    or simply {"attention": "attn|attention", "mlp": "mlp|ffn"} (YAML works too).
    """
    from memlens.analysis.rules import load_rules, rules_analysis
    from memlens.analysis.text import groups_lines, when_text
    from memlens.units import format_bytes as fb

    rules = load_rules(rules_file)
    dev = open_snapshot(snapshot, no_cache).device(device)
    result = rules_analysis(dev, rules, event=event, points=points, top=top,
                            hide_patterns=hide_patterns(hide))  # fmt: skip
    if as_json:
        emit_json(result)
        return
    lines = [
        f"device {dev.device}: {fb(result['active_bytes'])} active {when_text(result['event'])}"
    ]
    lines += groups_lines("rule", result["rules"])
    click.echo("\n".join(lines))
