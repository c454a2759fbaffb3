"""`memlens plan --interpolate --what-if`: each knob's sweep from a few simulations of its
own. A knob changes the allocation sequence (a code knob) or the allocator's settings, so
it gets its own fit (planning/interpolate.py); its rows say simulated or interpolated.
The knob table compares at one point (whatif.table_point): there the baseline, every knob
and every part of a combination are simulated, with their call sites and what each code
knob covered, which an interpolated row does not have."""

from __future__ import annotations

from collections.abc import Sequence

from memlens.planning.hook import Hook
from memlens.planning.interpolated_plan import interpolated_points
from memlens.planning.request import PointRequest
from memlens.planning.results import PlanWhatIf
from memlens.planning.runner import Runner, point
from memlens.planning.sweep import PointSpec, Sweep
from memlens.planning.whatif import (
    Alone,
    Ran,
    knob_request,
    split_knobs,
    table_point,
    what_if_entry,
)


def interpolated_what_ifs(
    knobs: Sequence[str],
    usable: int | None,
    runner: Runner,
    base: PointRequest,
    args: Sequence[str],
    sweeps: Sequence[Sweep],
    hook: Hook | None,
    specs: Sequence[PointSpec],
    baseline: Ran,
) -> tuple[Ran, list[tuple[PlanWhatIf, Ran]], Alone]:
    """(the baseline with its table point simulated, each knob's interpolated sweep with
    its change against the baseline, each knob and part at the table point)."""
    i = table_point(baseline)
    at = specs[i]
    runs = [knob_request(base, knob) for knob in knobs]
    given = {setting for _, setting, _ in runs}
    parts = [part for _, setting, _ in runs for part in split_knobs(setting)]
    extra = [knob_request(base, part) for part in dict.fromkeys(parts) if part not in given]
    requests = [base, *(r for r, _, _ in runs), *(r for r, _, _ in extra)]
    labels = [
        f"table point: {at.label}".rstrip(": "),
        *(f"what-if {setting}: {at.label}".rstrip(": ") for _, setting, _ in runs),
        *(f"what-if {setting} alone: {at.label}".rstrip(": ") for _, setting, _ in extra),
    ]
    simulated = [
        (point(at, f, c, usable), f)
        for f, c in runner.run([at.request(r) for r in requests], labels)
    ]
    baseline = [*baseline[:i], simulated[0], *baseline[i + 1 :]]
    alone: Alone = {
        setting: simulated[1 + len(runs) + k] for k, (_, setting, _) in enumerate(extra)
    }
    out: list[tuple[PlanWhatIf, Ran]] = []
    for k, (request, setting, kind) in enumerate(runs):
        ran, _ = interpolated_points(runner, request, args, sweeps, usable, hook)
        ran[i] = simulated[1 + k]
        out.append((what_if_entry(setting, kind, ran, baseline), ran))
        alone[setting] = ran[i]
    return baseline, out, alone
