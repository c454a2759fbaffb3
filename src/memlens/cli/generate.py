"""`memlens generate OUT`: write a synthetic snapshot in PyTorch's format (for trying memlens)."""

from __future__ import annotations

from typing import Any

import click


@click.command("generate")
@click.argument("output", type=click.Path(dir_okay=False))
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
@click.option("--json", "as_json", is_flag=True, help="Write JSON instead of a pickle.")
def command(
    output: str,
    events: int,
    devices: int,
    layers: int,
    truncate: int,
    expandable: bool,
    oom: bool,
    seed: int,
    as_json: bool,
) -> None:
    """Generate a realistic training-loop snapshot: parameters, activations, gradients,
    AdamW state, side-stream frees and ProfilerStep/forward/backward annotations."""
    import json

    from memlens.errors import MemlensError
    from memlens.simulation.synthetic import generate_snapshot, generate_trace_dict

    if events < 0 or devices < 1 or layers < 1 or truncate < 0:
        raise MemlensError("--events and --truncate must be >= 0, --devices and --layers >= 1")
    options: dict[str, Any] = dict(
        events=events,
        devices=devices,
        layers=layers,
        truncate=truncate,
        expandable=expandable,
        oom=oom,
        seed=seed,
    )
    try:
        if as_json:
            snap = generate_trace_dict(**options)
            with open(output, "w") as fh:
                json.dump(snap, fh)
        else:
            snap = generate_snapshot(output, **options)
    except OSError as exc:
        raise MemlensError(f"cannot write {output}: {exc.strerror}") from None
    n = sum(len(t) for t in snap["device_traces"])
    click.echo(
        f"wrote {output}: {devices} device(s), {n:,} trace entries, {len(snap['segments'])} segments"
    )
