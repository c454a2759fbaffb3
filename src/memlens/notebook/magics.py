"""`%%memlens record [options]` and `%%memlens simulate [options]`: run the cell while
recording CUDA memory (a GPU), or on fake CUDA tensors (no GPU), then show the snapshot.

Errors memlens knows (no GPU, an unwritable path, a bad option) are the command line's
one line, `memlens: error: ...`, and fail the cell without a traceback. An exception of
the cell itself is shown by IPython as usual, the snapshot is still written and shown
(it is what explains an out-of-memory error), then the cell fails with one line saying so.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.display import display

from memlens.errors import MemlensError

USAGE = "%%memlens record [options]  |  %%memlens simulate [options]  (--help for each)"


class MagicError(MemlensError):
    """A MemlensError shown the way the CLI shows it: one line, no traceback (IPython
    prints what `_render_traceback_` returns instead of the traceback)."""

    def _render_traceback_(self) -> list[str]:
        return [f"memlens: error: {self}"]


class CellFailed(Exception):
    """The cell itself raised (IPython has shown that error): the magic's cell fails too,
    after the snapshot, so "Run All" stops there as it would without the magic."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never sys.exit inside a kernel
        raise MagicError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _HelpShown


class _HelpShown(Exception):
    pass


def _parser(name: str, default_output: str) -> _Parser:
    p = _Parser(prog=f"%%memlens {name}", add_help=True)
    p.add_argument("-o", "--output", help=f"snapshot file (default: {default_output})")
    p.add_argument("--max-entries", type=int, default=None, help="trace entries kept")
    p.add_argument("--no-show", action="store_true", help="do not display the snapshot")
    return p


RECORD = _parser("record", "memlens-cell-N.pickle, N = the execution count")
RECORD.add_argument("--stacks", choices=["python", "all"], default="python",
                    help="'all' adds C++ frames (dumps can then take minutes)")  # fmt: skip
RECORD.add_argument("--no-report", action="store_true", help="no HTML report beside it")
SIMULATE = _parser("simulate", "memlens-sim-cell-N.pickle")
SIMULATE.add_argument("--device-memory", metavar="SIZE", help="e.g. 24GiB; beyond: OOM")
SIMULATE.add_argument("--expandable-segments", action="store_true", default=None,
                      help="model expandable_segments:True")  # fmt: skip
SIMULATE.add_argument("--max-split-size-mb", type=int, default=None, help="model max_split_size_mb")
SIMULATE.add_argument("--cublas-workspace", metavar="SIZE", default="32MiB",
                      help="cuBLAS workspace (default 32MiB; 0 to omit)")  # fmt: skip


def cell_number(shell: Any) -> int:
    """The N of the running cell's In [N]: the ExecutionResult IPython made for the cell
    holds it. `shell.execution_count` is N during the cell in older IPythons and N + 1 in
    those that count up before the code runs (ipython/ipython#15088, December 2025)."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    if isinstance(count, int):
        return count
    return int(getattr(shell, "execution_count", 0) or 0)


_Method = TypeVar("_Method", bound=Callable[..., None])


def _cell_magic(method: _Method) -> _Method:
    """IPython's @cell_magic, typed the same whichever IPython mypy reads: before 9 it is
    unannotated (an untyped decorator), from 9 it returns a union with its factory form."""
    mark = cast("Callable[[_Method], _Method]", cell_magic)
    return mark(method)


@magics_class
class MemlensMagics(Magics):
    _count = 0  # the running magic cell's In [N]

    @_cell_magic
    def memlens(self, line: str, cell: str) -> None:
        """%%memlens record|simulate [options]: the cell under memlens (see --help)."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise MagicError(f"%%memlens: {exc}") from None
        if not words or words[0] not in ("record", "simulate"):
            raise MagicError(f"usage: {USAGE}")
        parser = RECORD if words[0] == "record" else SIMULATE
        try:
            args = parser.parse_args(words[1:])
        except _HelpShown:  # -h/--help: argparse has printed it
            return
        count = self._count = cell_number(self.shell)
        try:
            if words[0] == "record":
                path = Path(args.output or f"memlens-cell-{count}.pickle")
                error = self._record(path, args, cell)
            else:
                path = Path(args.output or f"memlens-sim-cell-{count}.pickle")
                error = self._simulate(path, args, cell)
            if not args.no_show:
                from memlens.snapshot.loader import load

                display(load(path))
        except MagicError:
            raise
        except MemlensError as exc:
            raise MagicError(str(exc)) from None
        if error is not None:
            raise CellFailed(
                f"memlens: the cell raised {type(error).__name__} (above); its snapshot is {path}"
            )

    def _run(self, cell: str) -> BaseException | None:
        """Run the cell as IPython does (it shows the cell's own error); that error. The
        body's code gets a file of its own from the kernel's compiler, numbered with the
        count IPython holds then (N + 1 in some versions): it is this cell's, In [N], and
        call sites name it so (analysis.cells reads the map)."""
        assert self.shell is not None
        cells = getattr(getattr(self.shell, "compile", None), "_filename_map", None)
        before = set(cells) if isinstance(cells, dict) else set()
        result = self.shell.run_cell(cell, store_history=False)
        if isinstance(cells, dict):
            cells.update((name, self._count) for name in set(cells) - before)
        error: BaseException | None = result.error_before_exec or result.error_in_exec
        return error

    def _record(self, path: Path, args: argparse.Namespace, cell: str) -> BaseException | None:
        from memlens.capture.backend import DEFAULT_MAX_ENTRIES
        from memlens.recording import record

        recording = record(
            path,
            max_entries=DEFAULT_MAX_ENTRIES if args.max_entries is None else args.max_entries,
            stacks=args.stacks,
            report=not args.no_report,
        )
        with recording:
            error = self._run(cell)
        print(f"memlens: snapshot written to {path}")
        return error

    def _simulate(self, path: Path, args: argparse.Namespace, cell: str) -> BaseException | None:
        try:
            import torch  # noqa: F401
        except ImportError:
            raise MagicError("%%memlens simulate needs PyTorch: pip install torch") from None
        from memlens.simulation.api import simulate
        from memlens.simulation.config import SimulateConfig

        # the options are named as SimulateConfig's fields
        sim = simulate(path, config=SimulateConfig.pick(vars(args)))
        with sim:
            error = self._run(cell)
        print(f"memlens: simulated snapshot written to {path}")
        ran_out = type(error).__name__ == "OutOfMemoryError"
        if args.device_memory is not None and (error is None or ran_out):
            from memlens.notebook.verdict import fits_verdict

            print(fits_verdict(path, args.device_memory, ran_out=ran_out))
        return error
