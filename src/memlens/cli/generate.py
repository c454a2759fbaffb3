"""`memlens generate OUT`: write a synthetic snapshot in PyTorch's format (for trying memlens);
with --ranks, OUT is a directory of rank files with planted skews (for `memlens fleet`)."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.options import status


@click.command("generate")
@click.argument("output", type=click.Path())
@click.option(
    "--events",
    type=int,
    default=10_000,
    show_default=True,
    help="Trace entries per device (at least; ends at a step boundary).",
)
@click.option("--devices", type=int, default=1, show_default=True)
@click.option("--layers", type=int, default=6, show_default=True)
@click.option(
    "--truncate",
    type=int,
    default=0,
    help="Drop this many oldest events, as a full ring buffer does.",
)
@click.option(
    "--expandable", is_flag=True, help="Expandable segments (segment_map instead of segment_alloc)."
)
@click.option("--oom", is_flag=True, help="End the trace with an out-of-memory entry.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["pickle", "json"]),
    default="pickle",
    show_default=True,
    help="The file's format: PyTorch's pickle, or the same as JSON.",
)
# --json everywhere else means "print the result as JSON"; here it was --format json
@click.option("--json", "json_alias", is_flag=True, hidden=True)
@click.option("--ranks", type=int, default=None,
              help="Write this many rank files into the directory OUTPUT (a fleet: one "
              "training loop, per-rank noise; see --skew).")  # fmt: skip
@click.option("--skew", multiple=True, metavar="KIND:RANK",
              help="With --ranks: skew that rank (repeatable): leak, activations or "
              "pipeline, e.g. --skew leak:3.")  # fmt: skip
def command(
    output: str,
    file_format: str,
    json_alias: bool,
    ranks: int | None,
    skew: tuple[str, ...],
    **synthetic: Any,
) -> None:
    """Generate a realistic training-loop snapshot: parameters, activations, gradients,
    AdamW state, side-stream frees and ProfilerStep/forward/backward annotations."""
    import json

    from memlens.errors import MemlensError
    from memlens.simulation.synthetic import generate_snapshot, generate_trace_dict

    if json_alias:
        status("memlens: warning: generate --json is deprecated; use --format json", err=True)
    as_json = json_alias or file_format == "json"
    # events, devices, layers, truncate, expandable, oom and seed: the generator's own options
    s = synthetic
    if s["events"] < 0 or s["devices"] < 1 or s["layers"] < 1 or s["truncate"] < 0:
        raise MemlensError("--events and --truncate must be >= 0, --devices and --layers >= 1")
    if ranks is not None or skew:
        refused = s["devices"] != 1 or s["truncate"] > 0 or s["expandable"] or s["oom"] or as_json
        _fleet(output, ranks, skew, s["events"], s["layers"], s["seed"], refused=refused)
        return
    try:
        if as_json:
            snap = generate_trace_dict(**s)
            with open(output, "w") as fh:
                json.dump(snap, fh)
        else:
            snap = generate_snapshot(output, **s)
    except OSError as exc:
        raise MemlensError(f"cannot write {output}: {exc.strerror}") from None
    n = sum(len(t) for t in snap["device_traces"])
    status(
        f"wrote {output}: {s['devices']} device(s), {n:,} trace entries, {len(snap['segments'])} segments"
    )


def _fleet(
    output: str,
    ranks: int | None,
    skew: tuple[str, ...],
    events: int,
    layers: int,
    seed: int,
    refused: bool,
) -> None:
    from memlens.errors import MemlensError
    from memlens.simulation.synthetic_fleet import write_fleet

    if ranks is None or ranks < 1:
        raise MemlensError("--skew needs --ranks N (N >= 1)")
    if refused:
        raise MemlensError(
            "--ranks writes one-device pickles: no --devices, --truncate, "
            "--expandable, --oom or --format json"
        )
    try:
        write_fleet(output, ranks, skew, events=events, layers=layers, seed=seed)
    except OSError as exc:
        raise MemlensError(f"cannot write {output}: {exc.strerror}") from None
    planted = ", ".join(skew) if skew else "none"
    status(f"wrote {ranks:,} rank files into {output} (skews: {planted})")
