"""`memlens plan SCRIPT [ARGS]`: will it fit, and how far can it go, by simulation."""

from __future__ import annotations

import os

import click

from memlens.cli.options import (
    emit_json,
    json_option,
    status,
    value_option,
    whole_number_option,
    write_page,
)
from memlens.errors import MemlensError
from memlens.units import format_bytes
from memlens.views.text.plan import fits_text, values_text


def render(result: dict) -> list[str]:  # type: ignore[type-arg]
    """The text report: assumptions, one row per point, the fit, predictions, the
    bisection, what-ifs."""
    lines = []
    if result["usable_bytes"] is None:
        lines.append(
            f"memory: unlimited ({result['gpu']}); --gpu NAME or --device-memory "
            "SIZE to say what fits"
        )
    else:
        lines.append(
            f"memory: {result['gpu']}, {format_bytes(result['capacity_bytes'])} minus "
            f"{format_bytes(result['reserve_bytes'])} assumed for the CUDA context and "
            f"library handles (--reserve) = {format_bytes(result['usable_bytes'])} usable "
            "by PyTorch"
        )
    for p in result["points"]:
        line = (
            f"  {values_text(p['values'])}: peak active {format_bytes(p['peak_active_bytes'])}, "
            f"peak reserved {format_bytes(p['peak_reserved_bytes'])}, {fits_text(p)}"
        )
        if p["error"] is not None:
            line += f" ({p['error']})"
        lines.append(line + _tags(p))
    if result["largest_fitting"]:
        lines.append(f"largest fitting: {values_text(result['largest_fitting'])}")
    lines += _fit_lines(result, "")
    for g in result["groups"]:
        lines.append(f"{values_text(g['values'])}:")
        if g["largest_fitting"]:
            lines.append(f"  largest fitting: {values_text(g['largest_fitting'])}")
        lines += _fit_lines(g, "  ")
    for pred in result["predictions"]:
        lines.append(
            f"predicted at {values_text(pred['values'])}: peak reserved "
            f"{format_bytes(pred['peak_reserved_bytes'])}, peak active "
            f"{format_bytes(pred['peak_active_bytes'])}"
            + (" (extrapolated: outside the swept range)" if pred["extrapolated"] else "")
        )
    found = result["find_max"]
    if found is not None:
        best = found["largest_fitting"]
        answer = f"{found['arg']}={best}" if best is not None else f"none (not even {found['lo']})"
        lines.append(
            f"find-max {found['arg']} in [{found['lo']}, {found['hi']}]"
            + (f" step {found['step']}" if found["step"] != 1 else "")
            + f": {answer}, {found['simulations']} simulations"
        )
        lines += _find_max_lines(found, result["usable_bytes"])
    for w in result["what_ifs"]:
        lines.append(f"what-if {w['setting']}:")
        for p, da, dr in zip(w["points"], w["active_change_bytes"], w["reserved_change_bytes"]):
            lines.append(
                f"  {values_text(p['values'])}: peak reserved {format_bytes(dr)} "
                f"(now {format_bytes(p['peak_reserved_bytes'])}), peak active "
                f"{format_bytes(da)}, {fits_text(p)}"
            )
    if result["knob_table"] is not None:
        lines += render_table(result["knob_table"])
    lines.append(f"{result['simulations']} simulations run ({result['executor']})")
    return lines


def _tags(p: dict) -> str:  # type: ignore[type-arg]
    """A row's provenance: interpolated (fitted sizes replayed) or simulated, cached."""
    tags = [p["source"]] if p.get("source") == "interpolated" else []
    return "".join(f" [{t}]" for t in tags + (["cached"] if p["cached"] else []))


def _find_max_lines(found: dict, usable: int) -> list[str]:  # type: ignore[type-arg]
    """The margin at the answer, the shortfall at the next value, what failed below the
    answer, and whether simulation confirmed the interpolation."""
    lines = []
    best, arg = found["largest_fitting"], found["arg"]
    if found["margin_bytes"] is not None:
        lines.append(
            f"  margin at {arg}={best}: {format_bytes(found['margin_bytes'])} left of {format_bytes(usable)}"
        )
    if found["shortfall_bytes"] is not None:
        nxt = found["lo"] if best is None else min(best + found["step"], found["hi"])
        lines.append(
            f"  shortfall at {arg}={nxt}: {format_bytes(found['shortfall_bytes'])} more than usable"
        )
    if found["failing"]:
        shown = ", ".join(str(v) for v in found["failing"][:20])
        lines.append(
            f"  memory is not monotone in {arg}: below {best}, these values do not fit: {shown}"
            + (" ..." if len(found["failing"]) > 20 else "")
        )
    if found["interpolated"]:
        lines.append(
            "  the answer and the next value were simulated to confirm the interpolation: "
            + (
                "they agree to the byte"
                if found["confirmed"]
                else "they DIFFER (the simulated rows above hold)"
            )
        )
    if found["interpolated"]:  # every value looked at, simulated or interpolated
        for p in found["probes"]:
            lines.append(
                f"  {values_text(p['values'])}: peak reserved "
                f"{format_bytes(p['peak_reserved_bytes'])}, {fits_text(p)}"
                f"{_tags(p) or ' [simulated]'}"
            )
    return lines


def _fit_lines(result: dict, indent: str) -> list[str]:  # type: ignore[type-arg]
    """The fits of peak reserved and peak active (of the whole sweep or of one group)."""
    lines = []
    for key, what in (("fit", "peak reserved"), ("fit_active", "peak active")):
        fit = result[key]
        if fit is None:
            continue
        terms = [format_bytes(fit["constant_bytes"])]
        for arg, lin, quad in zip(fit["args"], fit["linear_bytes"], fit["quadratic_bytes"]):
            terms.append(f"{format_bytes(lin)} x {arg}")
            terms.append(f"{format_bytes(quad)} x {arg}^2")
        lines.append(
            f"{indent}fit of {what} over {fit['points']} points: "
            + " + ".join(terms)
            + f" (largest residual {format_bytes(fit['max_residual_bytes'])})"
        )
        if fit["largest_fitting"] is not None:
            lines.append(
                f"{indent}  the fit's largest fitting {fit['args'][0]}: {fit['largest_fitting']:g}"
            )
    return lines


def _saving(saved: int, pct: float | None) -> str:
    return f"{format_bytes(saved)}" + ("" if pct is None else f" ({pct:.1f}%)")


def render_table(table: dict) -> list[str]:  # type: ignore[type-arg]
    """The knobs ranked by the peak reserved they save at one point, each with what it
    covered and the call sites that moved."""
    lines = [
        f"knobs at {values_text(table['values'])}, ranked by peak reserved saved (baseline "
        f"{format_bytes(table['baseline_peak_reserved_bytes'])} reserved, "
        f"{format_bytes(table['baseline_peak_active_bytes'])} active):"
    ]
    for n, r in enumerate(table["rows"], 1):
        if r["error"] is not None:
            lines.append(f"  {n}. {r['setting']}: failed ({r['error']})")
        else:
            lines.append(
                f"  {n}. {r['setting']}: saves {_saving(r['reserved_saving_bytes'], r['reserved_saving_pct'])}"
                f" reserved, {_saving(r['active_saving_bytes'], r['active_saving_pct'])} active"
                f" (now {format_bytes(r['peak_reserved_bytes'])} reserved, "
                f"{format_bytes(r['peak_active_bytes'])} active), {fits_text(r)}"
            )
        for part in r["parts"]:
            lines.append(
                f"     alone: {part['setting']}: "
                + (
                    f"failed ({part['error']})"
                    if part["error"] is not None
                    else f"saves {format_bytes(part['reserved_saving_bytes'])} reserved, "
                    f"{format_bytes(part['active_saving_bytes'])} active"
                )
            )
        lines += [f"     {a}" for a in r["applied"]]
        for c in r["sites"]:
            lines.append(
                f"     {format_bytes(c['change'])} at the peak: {c['site']} "
                f"({format_bytes(c['a_bytes'])} -> {format_bytes(c['b_bytes'])})"
            )
    return lines


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@value_option(
    "--gpu",
    metavar="NAME",
    help="Card to plan for (as memlens simulate --gpu): its memory and cuBLAS workspace.",
)
@value_option(
    "--device-memory", metavar="SIZE", help="The card's memory instead of --gpu's (e.g. 24GiB)."
)
@value_option(
    "--reserve",
    metavar="SIZE",
    help="Memory PyTorch cannot use: CUDA context, cuBLAS/cuDNN handles "
    "(default 512MiB, an assumption; measure total minus "
    "torch.cuda.mem_get_info()'s free in a fresh process on the card).",
)
@value_option(
    "--routing",
    metavar="uniform|capacity:F|worst|histogram:FILE",
    help="A mixture of experts' routing at every point, as memlens simulate --routing.",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="'ARG=V1,V2,...'",
    help="A script argument and its values (repeatable: the cartesian product).",
)
@click.option(
    "--sweep-env",
    "sweep_envs",
    multiple=True,
    metavar="'NAME=V1,V2,...'",
    help="An environment variable of the script and its values (repeatable; part of the "
    "cartesian product with --sweep).",
)
@value_option(
    "--sweep-hook",
    metavar="FILE.py:FUNCTION",
    help="For a script configured otherwise: FUNCTION(values, args) gets each point's "
    "--sweep values and the script's arguments, and returns {'args': [...], 'env': {...}}.",
)
@click.option(
    "--predict",
    multiple=True,
    metavar="'ARG=V[,ARG=V]'",
    help="Peak reserved the fitted model predicts at a point (repeatable).",
)
@value_option(
    "--find-max",
    "find_arg",
    metavar="ARG",
    help="Bisect for the largest integer value of ARG that fits.",
)
@click.option("--lo", type=int, default=1, show_default=True, help="--find-max's lower end.")
@click.option("--hi", type=int, default=1024, show_default=True, help="--find-max's upper end.")
@click.option(
    "--interpolate",
    is_flag=True,
    help="One integer --sweep (or --find-max) from a few simulations: allocation sizes "
    "fitted between simulated values and replayed through the allocator model; each row "
    "says simulated or interpolated, find-max's answer is confirmed by simulation.",
)
@whole_number_option(
    "--step",
    help="With --interpolate --find-max: the values tried are --lo, --lo + STEP, ..., --hi "
    "(default: 1, 2 or 5 x 10^k, about 64 values).",
)
@click.option(
    "--what-if",
    "knobs",
    multiple=True,
    metavar="SETTING",
    help="Simulate again with this knob (repeatable; ranked in a table): a "
    "PYTORCH_CUDA_ALLOC_CONF setting (expandable_segments, max_split_size_mb:N, "
    "roundup_power2_divisions:N) or a change to how the script runs: checkpoint=CLASS_REGEX, "
    "autocast=bf16|fp16, sdpa=math|flash|efficient|cudnn, foreach=true|false, "
    "fused=true|false, zero_grad=none|zeros. Several joined by commas run together "
    "(autocast=bf16,checkpoint=Block), each also alone for the table.",
)
@whole_number_option("--jobs", "-j", help="Simulations at once (default: the CPU count).")
@value_option(
    "--scheduler",
    metavar="tcp://HOST:PORT|dask-local",
    help="Run the points on a Dask cluster, as memlens fleet: the address of an existing "
    "scheduler, or dask-local (a LocalCluster here). Workers need memlens and torch, and "
    "to see the script at the same absolute path.",
)
@whole_number_option("--workers", help="Workers of a dask-local cluster (default: --jobs).")
@click.option("--no-cache", is_flag=True, help="Simulate every point again.")
@json_option
@click.option(
    "--html",
    "html_out",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML page: the points, the fitted curve against "
    "the usable memory, the largest fitting value, the knob table.",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(
    gpu: str | None,
    device_memory: str | None,
    reserve: str | None,
    routing: str | None,
    sweeps: tuple[str, ...],
    sweep_envs: tuple[str, ...],
    sweep_hook: str | None,
    predict: tuple[str, ...],
    find_arg: str | None,
    lo: int,
    hi: int,
    interpolate: bool,
    step: int | None,
    knobs: tuple[str, ...],
    jobs: int | None,
    scheduler: str | None,
    workers: int | None,
    no_cache: bool,
    as_json: bool,
    html_out: str | None,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Simulate SCRIPT at each point of the sweeps (each in its own process, cached by
    the script's content, arguments and options): peak active and reserved, whether it
    fits the card, the largest value that fits, a quadratic fit per argument, and the
    bisection for the largest fitting value. Settings not given come from
    $PYTORCH_CUDA_ALLOC_CONF."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemlensError("memlens plan needs PyTorch: pip install torch") from None
    from memlens.planning.hook import Hook
    from memlens.planning.plan import Setup, plan
    from memlens.planning.sweep import Sweep

    if not os.path.isfile(script):
        raise MemlensError(f"no such script: {script}")
    from memlens.simulation.gpu_inference import resolve_gpu

    gpu, alloc_conf = resolve_gpu(gpu, lambda line: status(f"memlens: plan: {line}", err=True))
    swept = [Sweep.parse(s) for s in sweeps] + [Sweep.parse(s, env=True) for s in sweep_envs]
    result = plan(
        script,
        list(args),
        sweeps=swept,
        setup=Setup.of(gpu, device_memory, reserve, routing),
        jobs=jobs or os.cpu_count() or 1,
        use_cache=not no_cache,
        progress=lambda line: status(f"memlens: plan: {line}", err=True),
        predict=predict,
        find=None if find_arg is None else (find_arg, lo, hi),
        knobs=knobs,
        hook=None if sweep_hook is None else Hook.load(sweep_hook),
        scheduler=scheduler,
        workers=workers,
        interpolate=interpolate,
        step=step,
        alloc_conf=alloc_conf,
    )
    if html_out is not None:
        from memlens.views.report.plan import plan_report

        write_page(html_out, plan_report(result))
        status(f"memlens: plan: wrote {html_out}", err=True)
    if as_json:
        emit_json(result)
    else:
        for line in render(dict(result)):
            status(line)
