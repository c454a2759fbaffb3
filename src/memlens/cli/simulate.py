"""`memlens simulate script.py [args...]`: run CUDA code without a GPU, write its snapshot."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memlens.cli.options import script_command, script_name, status, whole_number_option
from memlens.errors import MemlensError
from memlens.simulation.gpus import cublas_workspace_from_config
from memlens.units import format_bytes, parse_bytes

if TYPE_CHECKING:
    from memlens.simulation.api import ScriptRun
    from memlens.simulation.config import SimulateConfig
    from memlens.simulation.progress import SimProgress


def _default_output(script: str) -> Path:
    return Path(f"memlens-sim-{script_name(script)}.{os.getpid()}.pickle")


def _figures(snapshot: dict[str, Any]) -> str:
    try:
        import memlens

        dev = memlens.load(snapshot, warn=False).device(0)
    except Exception as exc:  # the file is written; only the summary is missing
        return f"(no summary: {exc})"
    return (
        f"predicted peak active {format_bytes(dev.peak_active_bytes)}, peak reserved "
        f"{format_bytes(dev.peak_reserved_bytes)}, {dev.n_events:,} "
        f"event{'' if dev.n_events == 1 else 's'}"
    )


def progress_text(p: SimProgress) -> str:
    steps = f"{p.steps:,} optimizer step{'' if p.steps == 1 else 's'}, " if p.steps else ""
    return (
        f"{p.elapsed:,.0f} s: {steps}{p.events:,} event{'' if p.events == 1 else 's'}, "
        f"peak active {format_bytes(p.peak_active)}, peak reserved "
        f"{format_bytes(p.peak_reserved)} so far"
    )


class LiveLine:
    """The run so far on stderr: one line rewritten in place on a terminal, a plain line
    per report otherwise (a log keeps them all)."""

    def __init__(self) -> None:
        self.tty = bool(sys.stderr.isatty())
        self.shown = False

    def __call__(self, p: SimProgress) -> None:
        line = f"memlens: simulating: {progress_text(p)}"
        if self.tty:
            click.echo(f"\r\x1b[K{line}", err=True, nl=False)
            self.shown = True
        else:
            status(line, err=True)

    def clear(self) -> None:
        if self.shown:
            click.echo("\r\x1b[K", err=True, nl=False)
            self.shown = False


def compare_lines(simulated: dict[str, Any] | str, recording: str) -> list[str]:
    """The simulated snapshot's peaks against a recording's: bytes, and the difference in
    bytes and percent of the recording's."""
    import memlens

    sim = memlens.load(simulated, warn=False).device(0)
    rec = memlens.load(recording, warn=False).device(0)
    lines = [f"against {recording}:"]
    for what, a, b in (
        ("peak active", sim.peak_active_bytes, rec.peak_active_bytes),
        ("peak reserved", sim.peak_reserved_bytes, rec.peak_reserved_bytes),
    ):
        diff = a - b
        pct = "" if b == 0 else f" ({100 * diff / b:+.3f}%)"
        lines.append(
            f"  {what}: simulated {a:,} bytes, recorded {b:,} bytes: "
            + ("equal" if diff == 0 else f"{diff:+,} bytes{pct}")
        )
    return lines


def _assumptions(config: SimulateConfig) -> str:
    card = config.card()
    if config.cublas_workspace is not None:
        size, origin = parse_bytes(config.cublas_workspace), ""
    elif os.environ.get("CUBLAS_WORKSPACE_CONFIG") is not None:
        config_var = os.environ["CUBLAS_WORKSPACE_CONFIG"]
        size = cublas_workspace_from_config(config_var, card.cublas_workspace)
        origin = f" (CUBLAS_WORKSPACE_CONFIG={config_var})"
    else:
        size, origin = card.cublas_workspace, ""
    device_memory = config.device_memory_bytes()
    memory = "unlimited" if device_memory is None else format_bytes(device_memory)
    routing = (
        "" if config.routing is None else f", routing {config.routing_assumption().describe()}"
    )
    return (
        f"memlens: simulating {card.name} (sm {card.capability[0]}.{card.capability[1]}): "
        f"cuBLAS workspace {size:,} bytes ({format_bytes(size, 3)}) per thread{origin}, "
        f"device memory {memory}{routing}" + ("" if config.gpu else "; --gpu NAME for another card")
    )


def _report(run: ScriptRun) -> None:
    """The whole run's peak first (the headline), then every snapshot the script wrote
    itself with the window it holds, then what -o holds."""
    status(f"memlens: whole run: {_figures(run.whole)}", err=True)
    if run.sim.workspace_config is not None:
        status(
            f"memlens: cuBLAS workspace {format_bytes(run.sim.cublas_workspace)} per thread, "
            f"from CUBLAS_WORKSPACE_CONFIG={run.sim.workspace_config} as the script left it",
            err=True,
        )
    if run.own:
        many = len(run.own) > 1
        status(
            f"memlens: the script wrote {len(run.own)} snapshot{'s' if many else ''} itself:",
            err=True,
        )
        for own in run.own:
            status(f"memlens:   {own.path} ({own.how}): {own.window()}", err=True)
    if run.own_dump:
        last = run.own[-1]
        status(
            f"memlens: simulated snapshot written to {run.output}: the script's last "
            f"snapshot ({last.path}), the same window and state: {_figures(run.snapshot)}",
            err=True,
        )
    else:
        status(
            f"memlens: simulated snapshot written to {run.output}: the whole run, the state "
            "at exit",
            err=True,
        )
    status(f"memlens: view it with: memlens view {run.output}", err=True)


@script_command(
    "Snapshot file to write (default: memlens-sim-<script>.<pid>.pickle); with "
    "--nproc-per-node the directory of one file per rank (default memlens-sim-<script>.<pid>).",
    dir_okay=True,
)
@click.option(
    "--device-memory",
    metavar="SIZE",
    default=None,
    help="GPU memory to simulate, e.g. 80GiB; beyond it the script gets "
    "torch.OutOfMemoryError and the trace an `oom` entry. Default: unlimited.",
)
@whole_number_option("--max-entries", help="Keep only the newest N trace entries (default: all).")
@click.option(
    "--stacks",
    type=click.Choice(["python", "all", "none"]),
    default="python",
    show_default=True,
    help="Python frames on each entry ('all' = 'python' here: there are no C++ frames to record).",
)
@click.option(
    "--expandable-segments/--no-expandable-segments",
    default=None,
    help="Model PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
)
@whole_number_option("--max-split-size-mb", help="Model max_split_size_mb.")
@whole_number_option(
    "--roundup-power2-divisions", help="Model roundup_power2_divisions (one value for every size)."
)
@click.option(
    "--gpu",
    metavar="NAME",
    default=None,
    help="Card or generation to simulate: h100/hopper (default), h200, a100/ampere, a100-40gb, "
    "a10, l4/ada, rtx4090, v100/volta, t4/turing. Sets the cuBLAS workspace, the device "
    "memory (unless --device-memory) and what torch.cuda answers. like:SNAPSHOT: the card "
    "a GPU recording implies (its cuBLAS workspace, its OOM's capacity, its allocator "
    "settings), said as inferred.",
)
@click.option(
    "--cublas-workspace",
    default=None,
    metavar="SIZE",
    help="cuBLAS workspace per thread (default from --gpu: 32MiB from Hopper on, "
    "8519680 bytes before; 0 to omit).",
)
@click.option(
    "--nvtx-annotations/--no-nvtx-annotations",
    default=True,
    show_default=True,
    help="Write torch.cuda.nvtx ranges as annotations, like record_function.",
)
@click.option(
    "-m",
    "module",
    is_flag=True,
    help="SCRIPT is a module name, run as `python -m SCRIPT` runs it.",
)
@click.option(
    "--whole-run",
    is_flag=True,
    help="Write the whole run to --output even when the script wrote snapshots itself "
    "(by default --output is then the script's last one).",
)
@click.option(
    "--early-stacks",
    is_flag=True,
    help="Keep the stacks of blocks allocated before the script switched history on "
    "(the GPU recorder has none for them).",
)
@click.option(
    "--routing",
    default=None,
    metavar="uniform|capacity:F|worst|histogram:FILE",
    help="What a mixture of experts' router chooses, which expert parallelism's token "
    "counts follow: uniform (default), capacity:F (each expert up to F x the uniform "
    "share, filled in expert order), worst (every token to experts 0..K-1) or "
    "histogram:FILE (per-expert weights, JSON list or CSV).",
)
@whole_number_option(
    "--nproc-per-node",
    help="Launch SCRIPT as torchrun would on this many GPUs per node: each rank runs in its "
    "own process with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT... set, on a fake "
    "process group; -o is then a directory of rank<R>.pickle files.",
)
@whole_number_option(
    "--nnodes", help="Nodes of the simulated job (with --nproc-per-node; default 1)."
)
@click.option(
    "--ranks",
    default=None,
    metavar="LIST",
    help="Ranks to simulate: all, or numbers and ranges, e.g. 0,3,8-11 (default: rank 0 and "
    "the last; the others are assumed equal to rank 0 when those two run the same allocations).",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="tcp://HOST:PORT|dask-local",
    help="Run the ranks on a Dask cluster, as memlens fleet does (default: a local process pool).",
)
@whole_number_option(
    "--workers", help="Processes of the local pool (default: the cores, at most one per rank)."
)
@click.option(
    "--compare",
    metavar="SNAPSHOT",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A GPU recording of the same run: print the simulated peaks against its own, "
    "with the difference (the simulated figures are those of what -o holds).",
)
def command(
    output: Path | None,
    module: bool,
    whole_run: bool,
    script: str,
    args: tuple[str, ...],
    nproc_per_node: int | None,
    nnodes: int | None,
    ranks: str | None,
    scheduler: str | None,
    workers: int | None,
    compare: str | None,
    **options: Any,
) -> None:
    """Run SCRIPT (a module with -m) as __main__ with fake CUDA tensors and a model of
    PyTorch's caching allocator, then write the snapshot a GPU run would have recorded:
    the script's own last snapshot when it writes one (same window, same state), else
    the whole run. The first figure printed is always the whole run's peak. Settings not
    given come from $PYTORCH_CUDA_ALLOC_CONF. With --nproc-per-node, every rank of a
    torchrun-style job is simulated on a fake process group, one snapshot per rank."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemlensError("memlens simulate needs PyTorch: pip install torch") from None
    from memlens.simulation.api import run_target
    from memlens.simulation.config import SimulateConfig
    from memlens.simulation.gpu_inference import resolve_gpu
    from memlens.simulation.script import ScriptFailed, ScriptTarget

    options["gpu"], conf = resolve_gpu(
        options["gpu"], lambda line: status(f"memlens: {line}", err=True)
    )
    if conf is not None:
        options["alloc_conf"] = conf
    # every other option is named as a SimulateConfig field
    config = SimulateConfig.of(None, options)
    status(_assumptions(config), err=True)
    target = ScriptTarget(script, args, module, whole_run)
    if nproc_per_node is not None or nnodes is not None or ranks is not None:
        from memlens.cli.simulate_ranks import launch

        code = launch(
            target,
            output,
            nproc_per_node=nproc_per_node or 1,
            nnodes=nnodes or 1,
            ranks=ranks,
            scheduler=scheduler,
            workers=workers,
            config=config,
        )
        click.get_current_context().exit(code)
    if output is not None and output.is_dir():
        raise MemlensError(f"-o {output} is a directory: give a file (or --nproc-per-node)")
    output = output or _default_output(script)
    live = LiveLine()
    try:
        run = run_target(target, output, config, progress=live)
    except ScriptFailed as failed:
        live.clear()  # before the traceback
        if failed.traceback:
            status(failed.traceback.rstrip("\n"), err=True)
        status(f"memlens: {failed}", err=True)
        click.get_current_context().exit(1)
    finally:
        live.clear()
    for note in run.notes:
        status(f"memlens: note: {note}", err=True)
    _report(run)
    if compare is not None:
        for line in compare_lines(run.snapshot, compare):
            status(f"memlens: {line}", err=True)
    if run.oom is not None:
        status(f"memlens: the script ran out of memory: {run.oom}", err=True)
        click.get_current_context().exit(1)
