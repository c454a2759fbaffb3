"""`memlens stages SNAP`: memory per annotated stage (record_function, optimizer steps,
ProfilerStep#N) and repeated stages compared step by step."""

from __future__ import annotations

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import DeviceTrace


@analysis_command(
    "stages",
    click.option("--name", default=None, help="Only stages whose name contains this text."),
    top_option(3, "Call sites that grew, per stage (0: skip, faster)."),
    click.option("--max-depth", type=int, default=None,
                 help="Only stages nested at most this deep (0: top level)."),
    annotations=True,
)  # fmt: skip
def command(dev: DeviceTrace, name: str | None, top: int, max_depth: int | None,
            hide: list[str] | None, as_json: bool) -> Answer:  # fmt: skip
    """Per stage: memory at start and end, peak inside, bytes allocated and freed, and the
    call sites that grew; repeated stages compared step by step."""
    from memlens.analysis.stages import compare_steps, sites_that_grew, stage_table
    from memlens.views.text.stages import TEXT_STAGES, render_stages

    # the text shows TEXT_STAGES stages: only those need their sites (the JSON has them all)
    table = stage_table(dev, name=name, top=top if as_json else 0, hide_patterns=hide)
    if max_depth is not None:
        table["stages"] = [s for s in table["stages"] if s["depth"] <= max_depth]
    steps = compare_steps(dev, table=table)
    if not as_json and top > 0:
        for s in table["stages"][:TEXT_STAGES]:
            s["grew"] = sites_that_grew(dev, s, top=top, hide_patterns=hide)
    return Answer({**table, "repeated": steps["groups"]}, render_stages, dev.device)
