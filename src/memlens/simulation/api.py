"""`memlens.simulate(...)`: run CUDA code without a GPU and get its memory snapshot."""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.keywords import show_fields
from memlens.simulation.config import SimulateConfig
from memlens.simulation.script import ScriptFailed, ScriptTarget, script_traceback

if TYPE_CHECKING:
    from memlens.simulation.patches.written import OwnSnapshot
    from memlens.simulation.progress import SimProgress
    from memlens.simulation.session import Simulation


def simulate(
    output: str | Path | None = None, *, config: SimulateConfig | None = None, **options: Any
) -> Simulation:
    """A context manager that runs its block with simulated CUDA memory.

        with memlens.simulate("out.pickle", gpu="a100") as sim:
            model = Model().cuda(); model(x).sum().backward()
        sim.snapshot  # the dict written to out.pickle

    Tensors created on `cuda` are fake (no memory, no values); every storage goes through
    a model of PyTorch's CUDA caching allocator. The keywords are the fields of
    `SimulateConfig` (`gpu`, `device_memory`, `cublas_workspace`, `alloc_conf` and the
    allocator options, `stacks`, `max_entries`, `nvtx_annotations`, `early_stacks`,
    `routing`), where
    their defaults and meaning are; `config=` passes a whole one, which the keywords then
    override. Inside the block, `torch.cuda.memory._record_memory_history` /
    `_dump_snapshot` work as on a GPU. `sim.notes` lists the approximate paths the run took.
    """
    from memlens.simulation.session import Simulation  # imports torch

    return Simulation(output, SimulateConfig.of(config, options))


# help() and inspect.signature() show the config's fields as simulate()'s keywords
show_fields(simulate, SimulateConfig, keep=2)


@dataclass
class ScriptRun:
    """What `run_script` did: the session, the snapshot written and where, an OOM.

    `whole` is the whole run (every trace entry, the state at exit): its peak is the
    run's. `snapshot` is what was written to `output`: the script's own last snapshot
    when it wrote one (`own_dump`; `own` lists them all with their windows), else `whole`.
    """

    sim: Simulation
    snapshot: dict[str, Any]
    output: Path
    own_dump: bool
    whole: dict[str, Any]
    own: list[OwnSnapshot] = field(default_factory=list)
    oom: str | None = None
    notes: list[str] = field(default_factory=list)


def _prepare(script: str, module: bool) -> tuple[Callable[[], Any], str, str, str]:
    """(run it, argv[0], sys.path[0], display name), as `python [-m] SCRIPT` would set
    them: a script runs under its absolute path (its frames' filename in a real run);
    `-m` puts the current directory first on sys.path and argv[0] is the module's file."""
    if module:
        import importlib.util

        cwd = os.getcwd()
        sys.path.insert(0, cwd)
        try:
            spec = importlib.util.find_spec(script)
        except (ImportError, ValueError) as exc:
            raise MemlensError(f"no module named {script!r}: {exc}") from None
        finally:
            sys.path.remove(cwd)
        if spec is None:
            raise MemlensError(f"no module named {script!r}")
        return (
            lambda: runpy.run_module(script, run_name="__main__", alter_sys=True),
            spec.origin or script,
            cwd,
            f"-m {script}",
        )
    path = Path(script)
    if not path.is_file():
        raise MemlensError(f"no such script: {script}")
    absolute = os.path.abspath(path)
    return (lambda: _run_main(absolute)), str(script), os.path.dirname(absolute), str(script)


def _run_main(path: str) -> dict[str, Any]:
    """Run the file at `path` as `python path` does: its code named by the absolute path
    (what a real run's frames show), `__file__` that path, sys.argv left as set (argv[0]
    as typed), a fresh `__main__` module in sys.modules. Through runpy's `_run_code`, the
    frame FrameCollector cuts stacks at, as with `-m`."""
    import io
    import types

    from memlens.simulation.patches.device_index import script_code

    with io.open_code(path) as f:
        code = script_code(f.read(), path)
    main = types.ModuleType("__main__")
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        # _run_code(code, globals, init_globals, mod_name, mod_spec, pkg_name, script_name)
        runpy._run_code(code, main.__dict__, None, "__main__", None, None, path)  # type: ignore[attr-defined]
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
    return main.__dict__


def run_script(
    script: str | Path,
    args: list[str],
    output: str | Path,
    *,
    module: bool = False,
    whole_run: bool = False,
    config: SimulateConfig | None = None,
    **options: Any,
) -> ScriptRun:
    """`run_target` for a script given by its parts, the simulation's settings as
    SimulateConfig's keywords (over `config`): the Python API's spelling."""
    target = ScriptTarget(str(script), tuple(args), module, whole_run)
    return run_target(target, output, SimulateConfig.of(config, options))


def run_target(
    target: ScriptTarget,
    output: str | Path,
    config: SimulateConfig | None = None,
    progress: Callable[[SimProgress], None] | None = None,
) -> ScriptRun:
    """Run `target` as __main__ under simulate(config=config) and write its snapshot to
    `output`.

    The snapshot is the script's own last snapshot when it wrote one (the same window and
    the same state as that file), else (or with `target.whole_run`) the whole run at exit.
    A script that fails (any exception but a simulated OOM, or a non-zero exit) raises
    ScriptFailed with its own traceback; the whole run up to the failure is written when
    it holds trace entries (ScriptFailed.written). An OOM writes as a success does.
    `progress` hears the run so far every few seconds (simulation/progress.py).
    """
    import torch

    from memlens.simulation.patches import device_index
    from memlens.simulation.patches.frames import module_main_frames

    run, argv0, path0, name = _prepare(target.script, target.module)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [argv0, *target.args]
    sys.path.insert(0, path0)
    sim = simulate(None, config=config)
    sim.on_progress = progress
    sim.keep_whole_run = True
    sim.frames.cut_at_runpy = True
    sim.frames.tail = module_main_frames() if target.module else []
    oom = None
    script_globals: Any = None
    try:
        with sim:
            try:
                # The state at exit is the script's when it returns: its globals are held
                # until the simulation has taken it (dropping them first freed what they
                # held by reference count, AdamW's moments, and kept what sits in
                # reference cycles, FSDP2's sharded parameters).
                script_globals = run()
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    raise ScriptFailed(name, f"it exited with code {exit_.code}", "") from None
    except torch.OutOfMemoryError as exc:
        oom = str(exc)
    except ScriptFailed as exited:
        raise exited.wrote(_write_partial(sim, output)) from None
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}{device_index.hint(exc)}"
        raised = ScriptFailed(name, reason, script_traceback(exc))
        raise raised.wrote(_write_partial(sim, output)) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        del script_globals
    whole = sim.whole_run
    assert whole is not None  # __exit__ built it (keep_whole_run)
    own = list(sim.own.written)
    snapshot = whole if target.whole_run or not own else own[-1].snapshot
    path = sim.write(output, snapshot)
    return ScriptRun(sim, snapshot, path, snapshot is not whole, whole, own, oom, list(sim.notes))


def _write_partial(sim: Simulation, output: str | Path) -> Path | None:
    """The whole run up to a failure, when it holds anything."""
    if sim.whole_run is None or not sim.whole_run["device_traces"][0]:
        return None
    return sim.write(output, sim.whole_run)
