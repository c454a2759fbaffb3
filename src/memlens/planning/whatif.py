"""`memlens plan --what-if`: the sweep again under each knob, and the ranked table of
knobs. A knob is an allocator setting (`KEY:VALUE`, added to PYTORCH_CUDA_ALLOC_CONF for
the simulated run) or a code knob (`KEY=VALUE`: simulation.knobs patches the unedited
script's run, e.g. `checkpoint=Block`, `autocast=bf16`). One what-if may combine several,
joined by commas (`autocast=bf16,checkpoint=Block,expandable_segments`): they run together,
and the table puts each one's saving alone beside the combination's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memlens.errors import MemlensError
from memlens.planning.request import PointRequest
from memlens.planning.results import (
    PlanKnobPart,
    PlanKnobRow,
    PlanKnobTable,
    PlanPoint,
    PlanWhatIf,
)
from memlens.planning.runner import Runner, point
from memlens.planning.sites import site_changes
from memlens.planning.sweep import PointSpec
from memlens.planning.worker import PointFigures

# Shorthands for --what-if: a bare key means switching it on.
WHAT_IF_SHORTHANDS = {"expandable_segments": "expandable_segments:True"}
# Call sites per knob in the table.
TABLE_SITES = 5

Ran = list[tuple[PlanPoint, PointFigures]]
# Each knob, and each knob of a combination, at the table point: setting -> its run there.
Alone = dict[str, tuple[PlanPoint, PointFigures]]


def is_code(knob: str) -> bool:
    from memlens.simulation.knobs.code import is_code_knob

    return is_code_knob(knob)


def what_if_conf(base: str, knob: str) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF of an allocator what-if run: `base` with `knob`'s keys
    (given later, they win) after checking the allocator model knows them."""
    from memlens.analysis.allocator_model import AllocatorSettings
    from memlens.analysis.allocator_replay import what_if

    setting = WHAT_IF_SHORTHANDS.get(knob.strip(), knob.strip())
    if ":" not in setting:
        from memlens.simulation.knobs.code import KEYS

        raise MemlensError(
            f"--what-if {knob!r}: expected KEY:VALUE, expandable_segments, or a code knob "
            f"({', '.join(f'{key}=' for key in KEYS)})"
        )
    what_if(AllocatorSettings(), setting)
    return f"{base},{setting}" if base else setting


def split_knobs(spec: str) -> list[str]:
    """The knobs of one what-if: split at the commas outside brackets (an allocator
    setting's `[256:1,512:2]`, a checkpoint regex's `{1,2}`), shorthands expanded."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(spec + ","):
        depth += (c in "([{") - (c in ")]}")
        if c == "," and depth <= 0:
            parts.append(spec[start:i].strip())
            start = i + 1
    if not all(parts):
        raise MemlensError(f"--what-if {spec!r}: an empty knob between commas")
    return [_normal(p) for p in parts]


def _normal(part: str) -> str:
    """A knob as reported and keyed: a code knob as parsed (`autocast=BF16` is
    `autocast=bf16`), an allocator setting with its shorthand expanded."""
    if is_code(part):
        from memlens.simulation.knobs.code import CodeKnob

        return CodeKnob.parse(part).spec
    return WHAT_IF_SHORTHANDS.get(part, part)


def _key(part: str) -> str:
    return part.partition("=" if is_code(part) else ":")[0].strip()


def check_knob(knob: str) -> None:
    """Fail on a knob the simulation does not know, or one given twice in a combination,
    before any simulation."""
    from memlens.simulation.knobs.code import CodeKnob

    parts = split_knobs(knob)
    for part in parts:
        if is_code(part):
            CodeKnob.parse(part)
        else:
            what_if_conf("", part)
    keys = [_key(p) for p in parts]
    if len(set(keys)) != len(keys):
        raise MemlensError(f"--what-if {knob!r}: each knob may be given once in a combination")


def knob_request(base: PointRequest, knob: str) -> tuple[PointRequest, str, str]:
    """(`base` with the knob or knobs: code knobs patched in, allocator settings added to
    its PYTORCH_CUDA_ALLOC_CONF; the setting as reported; its kind: allocator, code, or
    mixed)."""
    parts = split_knobs(knob)
    code = [p for p in parts if is_code(p)]
    conf = base.config.allocator_conf()
    for part in parts:
        if part not in code:
            conf = what_if_conf(conf, part)
    config = replace(base.config, alloc_conf=conf)
    out = replace(base, config=config, knobs=tuple(code) if code else base.knobs)
    kind = "mixed" if 0 < len(code) < len(parts) else "code" if code else "allocator"
    return out, ",".join(parts), kind


def what_ifs(
    usable: int | None,
    runner: Runner,
    base_request: PointRequest,
    grid_points: Sequence[PointSpec],
    baseline: Ran,
    knobs: Sequence[str],
) -> tuple[list[tuple[PlanWhatIf, Ran]], Alone]:
    """Each knob: the sweep again with it, and the change at the peak of every point; and
    each knob at the table point (`Alone`), with, for a combination, each of its knobs
    alone there (simulated unless it is a what-if of its own). All runs go to the pool at
    once (one knob at one point would use one process)."""
    runs = [knob_request(base_request, knob) for knob in knobs]
    given = {setting for _, setting, _ in runs}
    parts = [part for _, setting, _ in runs for part in split_knobs(setting)]
    extra = [knob_request(base_request, part) for part in dict.fromkeys(parts) if part not in given]
    at = grid_points[table_point(baseline)]
    results = runner.run(
        [p.request(request) for request, _, _ in runs for p in grid_points]
        + [at.request(request) for request, _, _ in extra],
        [
            f"what-if {setting}: {p.label}".rstrip(": ")
            for _, setting, _ in runs
            for p in grid_points
        ]
        + [f"what-if {setting} alone: {at.label}".rstrip(": ") for _, setting, _ in extra],
    )
    alone: Alone = {
        setting: (point(at, f, c, usable), f)
        for (_, setting, _), (f, c) in zip(
            extra, results[len(runs) * len(grid_points) :], strict=True
        )
    }
    out: list[tuple[PlanWhatIf, Ran]] = []
    for k, (_, setting, kind) in enumerate(runs):
        mine = results[k * len(grid_points) : (k + 1) * len(grid_points)]
        ran = [(point(p, f, c, usable), f) for p, (f, c) in zip(grid_points, mine, strict=True)]
        out.append((what_if_entry(setting, kind, ran, baseline), ran))
        alone[setting] = ran[table_point(baseline)]
    return out, alone


def what_if_entry(setting: str, kind: str, ran: Ran, baseline: Ran) -> PlanWhatIf:
    """One knob's sweep as reported: its points and their change against the baseline's."""
    points = [p for p, _ in ran]
    base = [p for p, _ in baseline]
    return {
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


def _pct(saving: int, base: int) -> float | None:
    return None if base == 0 else 100.0 * saving / base


def table_point(baseline: Ran) -> int:
    """The point the table compares at: the largest baseline peak reserved that ran
    (the one closest to not fitting), else the first."""
    ok = [i for i, (p, _) in enumerate(baseline) if p["error"] is None]
    return max(ok, key=lambda i: (baseline[i][0]["peak_reserved_bytes"], i)) if ok else 0


def _part(setting: str, base: PlanPoint, p: PlanPoint) -> PlanKnobPart:
    failed = p["error"] is not None or base["error"] is not None
    return {
        "setting": setting,
        "reserved_saving_bytes": 0
        if failed
        else base["peak_reserved_bytes"] - p["peak_reserved_bytes"],
        "active_saving_bytes": 0 if failed else base["peak_active_bytes"] - p["peak_active_bytes"],
        "error": p["error"],
    }


def knob_table(
    baseline: Ran, done: Sequence[tuple[PlanWhatIf, Ran]], alone: Alone
) -> PlanKnobTable:
    """Every knob at the table point: its peaks, the saving against the baseline, the
    call sites whose bytes at the peak changed most (the diff of the two runs' sites),
    and for a combination each of its knobs' saving alone; largest reserved saving first,
    failed runs last."""
    i = table_point(baseline)
    bp, bf = baseline[i]
    rows: list[PlanKnobRow] = []
    for entry, ran in done:
        p, f = ran[i]
        saved = _part(entry["setting"], bp, p)
        failed = saved["error"] is not None or bp["error"] is not None
        parts = split_knobs(entry["setting"])
        rows.append(
            {
                "setting": entry["setting"],
                "kind": entry["kind"],
                "peak_active_bytes": p["peak_active_bytes"],
                "peak_reserved_bytes": p["peak_reserved_bytes"],
                "reserved_saving_bytes": saved["reserved_saving_bytes"],
                "reserved_saving_pct": None
                if failed
                else _pct(saved["reserved_saving_bytes"], bp["peak_reserved_bytes"]),
                "active_saving_bytes": saved["active_saving_bytes"],
                "active_saving_pct": None
                if failed
                else _pct(saved["active_saving_bytes"], bp["peak_active_bytes"]),
                "parts": [_part(k, bp, alone[k][0]) for k in parts] if len(parts) > 1 else [],
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
