"""`memlens categories SNAP`: parameter, gradient, optimizer state, activation,
temporary, autograd internals, other — at the peak and over time; by compile context."""

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


@click.command("categories")
@snapshot_argument
@event_option
@click.option("--override", "overrides", multiple=True, metavar="CATEGORY=REGEX",
              help="Put allocations whose frames match REGEX in CATEGORY first (repeatable, in order).")  # fmt: skip
@click.option("--rules", "rules_path", type=click.Path(dir_okay=False), default=None,
              help="A rules file (see `memlens rules`) whose rules are used as overrides.")  # fmt: skip
@points_option(400)
@device_option
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, event: int | None, overrides: tuple[str, ...], rules_path: str | None,
            points: int, device: int | None, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """Memory by category (inferred from stacks and lifetimes; rules in docs/analyses.md)."""
    from memlens.analysis.categories import by_compile_context, categories
    from memlens.analysis.text import groups_lines, table_lines, when_text
    from memlens.errors import MemlensError
    from memlens.units import format_bytes as fb

    pairs: list[tuple[str, str]] = []
    if rules_path:
        from memlens.analysis.rules import load_rules

        pairs += [(r.name, r.pattern) for r in load_rules(rules_path)]
    for o in overrides:
        if "=" not in o:
            raise MemlensError(f"--override wants CATEGORY=REGEX, got {o!r}")
        k, v = o.split("=", 1)
        pairs.append((k.strip(), v))
    dev = open_snapshot(snapshot, no_cache).device(device)
    result = categories(dev, event=event, overrides=pairs, points=points,
                        hide_patterns=hide_patterns(hide))  # fmt: skip
    result["compile_contexts"] = by_compile_context(dev, event=result["event"])
    if as_json:
        emit_json(result)
        return
    lines = [
        f"device {dev.device}: {fb(result['active_bytes'])} active {when_text(result['event'])}"
    ]
    lines += groups_lines("category", result["categories"])
    cc = result["compile_contexts"]
    lines.append("")
    if cc["has_context"]:
        lines.append("by compile context:")
        lines += table_lines(["context", "at event", "allocated in trace"],
                             [[x["context"], fb(x["bytes"]), fb(x["allocated_bytes"])] for x in cc["contexts"]])  # fmt: skip
    else:
        lines.append(
            "by compile context: not recorded (record with compile_context=True, PyTorch 2.8+)"
        )
    click.echo("\n".join(lines))
