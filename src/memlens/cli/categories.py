"""`memlens categories SNAP`: parameter, gradient, optimizer state, activation,
temporary, autograd internals, other — at the peak and over time; by compile context."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import event_option, points_option
from memlens.snapshot.model import DeviceTrace


def _overrides(
    overrides: tuple[str, ...], rules_path: str | None, **options: Any
) -> dict[str, Any]:
    """--rules then --override, as (category, regex) pairs, checked before the load."""
    from memlens.errors import MemlensError

    pairs: list[tuple[str, str]] = []
    if rules_path:
        from memlens.analysis.rules import load_rules

        pairs += [(r.name, r.pattern) for r in load_rules(rules_path)]
    for o in overrides:
        if "=" not in o:
            raise MemlensError(f"--override wants CATEGORY=REGEX, got {o!r}")
        k, v = o.split("=", 1)
        pairs.append((k.strip(), v))
    return {**options, "overrides": pairs}


@analysis_command(
    "categories",
    event_option,
    click.option("--override", "overrides", multiple=True, metavar="CATEGORY=REGEX",
                 help="Put allocations whose frames match REGEX in CATEGORY first (repeatable, in order)."),
    click.option("--rules", "rules_path", type=click.Path(dir_okay=False), default=None,
                 help="A rules file (see `memlens rules`) whose rules are used as overrides."),
    points_option(400),
    prepare=_overrides,
)  # fmt: skip
def command(dev: DeviceTrace, event: int | None, overrides: list[tuple[str, str]], points: int,
            hide: list[str] | None) -> Answer:  # fmt: skip
    """Memory by category (inferred from stacks and lifetimes; rules in docs/analyses.md)."""
    from memlens.analysis.categories import by_compile_context, categories
    from memlens.views.text.categories import render_categories

    result = categories(dev, event=event, overrides=overrides, points=points, hide_patterns=hide)
    contexts = by_compile_context(dev, event=result["event"])
    return Answer({**result, "compile_contexts": contexts}, render_categories, dev.device)
