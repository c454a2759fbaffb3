"""`memlens plan --what-if`: the sweep again under each knob, and the ranked table of
knobs. A knob is an allocator setting (`KEY:VALUE`, added to PYTORCH_CUDA_ALLOC_CONF for
the simulated run) or a code knob (`KEY=VALUE`: simulation.knobs patches the unedited
script's run, e.g. `checkpoint=Block`, `autocast=bf16`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memlens.errors import MemlensError
from memlens.planning.points import PointFigures, Runner, Sweep, grid, point
from memlens.planning.results import PlanKnobRow, PlanKnobTable, PlanPoint, PlanWhatIf
from memlens.planning.sites import site_changes

# Shorthands for --what-if: a bare key means switching it on.
WHAT_IF_SHORTHANDS = {"expandable_segments": "expandable_segments:True"}
# Call sites per knob in the table.
TABLE_SITES = 5

Ran = list[tuple[PlanPoint, PointFigures]]


def is_code(knob: str) -> bool:
    from memlens.simulation.knobs import is_code_knob

    return is_code_knob(knob)


def what_if_conf(base: str, knob: str) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF of an allocator what-if run: `base` with `knob`'s keys
    (given later, they win) after checking the allocator model knows them."""
    from memlens.simulation.allocator import AllocatorSettings
    from memlens.simulation.replay import what_if

    setting = WHAT_IF_SHORTHANDS.get(knob.strip(), knob.strip())
    if ":" not in setting:
        raise MemlensError(
            f"--what-if {knob!r}: expected KEY:VALUE, expandable_segments, or a code knob "
            "(checkpoint=, autocast=, sdpa=, foreach=, fused=, zero_grad=, fsdp2=, ddp=)"
        )
    what_if(AllocatorSettings(), setting)
    return f"{base},{setting}" if base else setting


def check_knob(knob: str) -> None:
    """Fail on a knob the simulation does not know, before any simulation."""
    if is_code(knob):
        from memlens.simulation.knobs import CodeKnob

        CodeKnob.parse(knob)
    else:
        what_if_conf("", knob)


def knob_options(options: dict[str, Any], knob: str) -> tuple[dict[str, Any], str, str]:
    """(the run's options with the knob, the setting as reported, its kind)."""
    base = options["alloc_conf"]
    if is_code(knob):
        return {**options, "knobs": [knob.strip()]}, knob.strip(), "code"
    conf = what_if_conf(base, knob)
    return {**options, "alloc_conf": conf}, (conf[len(base) + 1 :] if base else conf), "allocator"


def what_ifs(
    usable: int | None,
    runner: Runner,
    args: Sequence[str],
    sweeps: Sequence[Sweep],
    baseline: Ran,
    knobs: Sequence[str],
) -> list[tuple[PlanWhatIf, Ran]]:
    """Each knob: the sweep again with it, and the change at the peak of every point. All
    knobs' points go to the pool at once (one knob at one point would use one process)."""
    grid_points = grid(args, sweeps)
    labels = [" ".join(f"{k}={v}" for k, v in values.items()) for values, _ in grid_points]
    runs = [knob_options(runner.options, knob) for knob in knobs]
    results = runner.run(
        [argv for _ in runs for _, argv in grid_points],
        [f"what-if {setting}: {label}".rstrip(": ") for _, setting, _ in runs for label in labels],
        [options for options, _, _ in runs for _ in grid_points],
    )
    base = [p for p, _ in baseline]
    out: list[tuple[PlanWhatIf, Ran]] = []
    for k, (_, setting, kind) in enumerate(runs):
        mine = results[k * len(grid_points) : (k + 1) * len(grid_points)]
        ran = [
            (point(v, a, f, c, usable), f) for (v, a), (f, c) in zip(grid_points, mine, strict=True)
        ]
        points = [p for p, _ in ran]
        entry: PlanWhatIf = {
            "setting": setting,
            "kind": kind,
            "points": points,
            "active_change_bytes": [
                p["peak_active_bytes"] - b["peak_active_bytes"]
                for p, b in zip(points, base, strict=True)
            ],
            "reserved_change_bytes": [
                p["peak_reserved_bytes"] - b["peak_reserved_bytes"]
                for p, b in zip(points, base, strict=True)
            ],
            "applied": [f["applied"] for _, f in ran],
        }
        out.append((entry, ran))
    return out


def _pct(saving: int, base: int) -> float | None:
    return None if base == 0 else 100.0 * saving / base


def table_point(baseline: Ran) -> int:
    """The point the table compares at: the largest baseline peak reserved that ran
    (the one closest to not fitting), else the first."""
    ok = [i for i, (p, _) in enumerate(baseline) if p["error"] is None]
    return max(ok, key=lambda i: (baseline[i][0]["peak_reserved_bytes"], i)) if ok else 0


def knob_table(baseline: Ran, done: Sequence[tuple[PlanWhatIf, Ran]]) -> PlanKnobTable:
    """Every knob at the table point: its peaks, the saving against the baseline, and the
    call sites whose bytes at the peak changed most (the diff of the two runs' sites);
    largest reserved saving first, failed runs last."""
    i = table_point(baseline)
    bp, bf = baseline[i]
    rows: list[PlanKnobRow] = []
    for entry, ran in done:
        p, f = ran[i]
        failed = p["error"] is not None or bp["error"] is not None
        saved_r = bp["peak_reserved_bytes"] - p["peak_reserved_bytes"]
        saved_a = bp["peak_active_bytes"] - p["peak_active_bytes"]
        rows.append(
            {
                "setting": entry["setting"],
                "kind": entry["kind"],
                "peak_active_bytes": p["peak_active_bytes"],
                "peak_reserved_bytes": p["peak_reserved_bytes"],
                "reserved_saving_bytes": 0 if failed else saved_r,
                "reserved_saving_pct": None if failed else _pct(saved_r, bp["peak_reserved_bytes"]),
                "active_saving_bytes": 0 if failed else saved_a,
                "active_saving_pct": None if failed else _pct(saved_a, bp["peak_active_bytes"]),
                "oom": p["oom"],
                "fits": p["fits"],
                "error": p["error"],
                "applied": f["applied"],
                "sites": [] if failed else site_changes(bf["sites"], f["sites"], TABLE_SITES),
            }
        )
    rows.sort(
        key=lambda r: (
            r["error"] is not None,
            -r["reserved_saving_bytes"],
            -r["active_saving_bytes"],
        )
    )
    return {
        "point": i,
        "values": bp["values"],
        "baseline_peak_active_bytes": bp["peak_active_bytes"],
        "baseline_peak_reserved_bytes": bp["peak_reserved_bytes"],
        "rows": rows,
    }
