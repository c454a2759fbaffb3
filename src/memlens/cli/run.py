"""`memlens run script.py [args...]`: run a script under CUDA memory recording, like `memray run`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from memlens.capture.backend import DEFAULT_MAX_ENTRIES, STACKS, RecordSettings
from memlens.capture.runner import RunOptions, RunResult, run_script
from memlens.cli.options import script_command, status, whole_number_option
from memlens.recording import write_report_beside


def _default_output(script: str) -> Path:
    # Like memray: the pid keeps one run from overwriting the last one.
    return Path(f"memlens-{Path(script).stem}.{os.getpid()}.pickle")


def summary_text(path: Path) -> str:
    """`memlens summary`'s text of the snapshot just written, or why it could not be read."""
    try:
        import memlens

        snap = memlens.load(path)
    except Exception as exc:
        return f"(no summary: the snapshot could not be read here: {exc})"
    from memlens.analysis.summary import summarize
    from memlens.views.text.summary import render_summary

    return render_summary(summarize(snap)).rstrip("\n")


def _print_result(result: RunResult) -> None:
    err = sys.stderr
    main = result.main_snapshot
    if main is None:
        status("memlens: no snapshot written (no out-of-memory error happened)", err=True)
        return
    status(f"memlens: snapshot written to {main}", err=True)
    status(summary_text(main), err=True)
    others = [p for p in result.snapshots if p != main]
    if others:
        status("memlens: other snapshots: " + ", ".join(str(p) for p in others), err=True)
    if result.report is not None:
        status(f"memlens: HTML report: {result.report}", err=True)
    status(f"memlens: view it with: memlens view {main}", err=True)
    err.flush()


@script_command("Snapshot file to write (default: memlens-<script>.<pid>.pickle).")
@whole_number_option(
    "--max-entries",
    default=DEFAULT_MAX_ENTRIES,
    help="Alloc/free events kept (the most recent).",
)
@click.option(
    "--stacks",
    type=click.Choice(STACKS),
    default="python",
    show_default=True,
    help="'all' adds C++ frames; dumps can then take minutes.",
)
@click.option(
    "--on-oom",
    is_flag=True,
    help="Write a snapshot only if CUDA runs out of memory (at that moment), not at exit.",
)
@whole_number_option(
    "--every-n-steps",
    help="Also dump every N memlens.step() calls, to <output>.stepNNNNNN.pickle.",
)
@click.option("--no-report", is_flag=True, help="Do not write the HTML report beside it.")
def command(
    output: Path | None,
    max_entries: int,
    stacks: str,
    on_oom: bool,
    every_n_steps: int | None,
    no_report: bool,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT (with ARGS) as __main__ while recording CUDA memory history.

    The snapshot is written when the script ends, at the first CUDA out-of-memory error
    (<output>.oom.pickle) and on SIGUSR1 (<output>.sigusr1-K.pickle); then its path, a
    summary and the command to view it are printed on stderr. The script's exit code is
    memlens's exit code. Needs a GPU: use `memlens simulate` to predict it without one.
    """
    options = RunOptions(
        output=output if output is not None else _default_output(script),
        settings=RecordSettings(max_entries=max_entries, stacks=stacks, context="all"),
        on_oom_only=on_oom,
        every_n_steps=every_n_steps,
        on_snapshot_written=None if no_report else write_report_beside,
    )
    result = run_script(script, list(args), options)
    _print_result(result)
    sys.exit(result.exit_code)
