"""The registry of analyses: one declaration per question, from which the CLI commands and
their --json, the report's sections, the schema test and the docs' list are all built.

Public API (the CLI, the report, `memlens capabilities` and the MCP server use only this):

    from memlens.analysis import registry

    registry.all() -> list[Analysis]          every analysis, in declaration order
    registry.names() -> list[str]             their names (= the CLI commands)
    registry.get(name) -> Analysis            MemlensError for an unknown name
    registry.run(name, *inputs, **options)   get(name).run(...) (memlens.analyze)
    registry.register(analysis) -> Analysis   add one (a plugin, a test's toy analysis)
    registry.unregister(name) -> None         remove one (tests)

    Analysis (frozen dataclass, defined in analysis/spec.py; its docstring has every field):
        .name, .help, .doc, .opens, .options: tuple[Option, ...], .hide, .annotations
        .result_type: type[R]                 its result TypedDict (analysis.results)
        .function_obj -> Callable[..., R]     the analysis function (imported when asked)
        .renderer -> Callable[[R, Mapping[str, Any]], Text]   its text (views.text)
        .report_section -> Section | None     its report section (views.report), if any
        .all_options() -> list[Option]        the keywords of run: its own, then the shared
        .host_options() -> list[Option]       what the CLI and MCP tools offer (--hide,
                                              --hide-only, --annotations, --no-cache, ...)
        .defaults() -> dict[str, Any]         option name -> default (shared ones included)
        .check(options) -> dict[str, Any]     defaults filled, checked before any load
        .request(host_values) -> dict         check() of a host's values (--hide ... resolved)
        .open(refs, load, values) -> inputs   paths opened with the host's load(path)
        .run(*inputs, **options) -> R         the dict `memlens NAME --json` prints
        .run_paths(paths, *, cache=True, **options) -> R    the same, opening the files
        .call(inputs, values) -> R            run with opened inputs and checked values
        .exit_code(result) -> int             1 when the result is a failure (check)

    Option (frozen dataclass): .name (keyword of run, JSON-able name), .type (int, float,
    str or bool), .default, .help, .choices, .multiple, .kind ("value", "argument": a
    positional CLI argument, "snapshot": a path opened as a second Snapshot), and how the
    CLI spells it: .flag ("--top"), .short ("-e"), .secondary ("--no-blocks"), .metavar,
    .show_default. `Option.describe()` is its JSON-able description. The options every
    host shares are declared once, here too: DEVICE, DEVICE_B, HIDE, HIDE_ONLY,
    ANNOTATIONS, NO_CACHE, JSON (and HIDE_PATTERNS, the keyword of run they make).

Inputs of `run` by `opens`: "device": a DeviceTrace or a Snapshot (its --device trace);
"snapshot": a Snapshot; "pair": two DeviceTraces or Snapshots (A, B); "many": a list of
(name, Snapshot). A path in their place is read with memlens.load. Option values are JSON values as typed on the command line (sizes as
"12GiB" or bytes); JSON results convert with memlens.analysis.jsonable.json_default.

The declarations are light (names of modules, never the modules): listing every analysis
imports no numpy, and `memlens summary` imports only what summary runs. The renderer and
report section are named by string, like snapshot.model.NOTEBOOK_VIEW: the analysis layer
names, never imports, the views that show it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from memlens.analysis.spec import (
    ANNOTATIONS,
    DEVICE,
    DEVICE_B,
    HIDE,
    HIDE_ONLY,
    HIDE_PATTERNS,
    JSON,
    NO_CACHE,
    Analysis,
    Opens,
    Option,
    Text,
    host_options,
)
from memlens.errors import MemlensError

__all__ = [
    "ANNOTATIONS",
    "DEVICE",
    "DEVICE_B",
    "HIDE",
    "HIDE_ONLY",
    "HIDE_PATTERNS",
    "JSON",
    "NO_CACHE",
    "Analysis",
    "Opens",
    "Option",
    "Text",
    "all",
    "get",
    "host_options",
    "names",
    "register",
    "run",
    "unregister",
]

R = TypeVar("R")

_REGISTRY: dict[str, Analysis[Any]] = {}


def _loaded() -> dict[str, Analysis[Any]]:
    if not _REGISTRY:
        from memlens.analysis import declarations

        for analysis in declarations.BUILTIN:
            _REGISTRY[analysis.name] = analysis
    return _REGISTRY


def all() -> list[Analysis[Any]]:  # noqa: A001 - the registry's API: registry.all()
    return list(_loaded().values())


def names() -> list[str]:
    return list(_loaded())


def get(name: str) -> Analysis[Any]:
    found = _loaded().get(name)
    if found is None:
        raise MemlensError(f"no analysis {name!r} (one of {', '.join(_loaded())})")
    return found


def run(name: str, *inputs: Any, **options: Any) -> Any:
    """`get(name).run(*inputs, **options)`: the result `memlens NAME --json` prints, from
    opened inputs or snapshot paths (memlens.analyze)."""
    return get(name).run(*inputs, **options)


def register(analysis: Analysis[R]) -> Analysis[R]:
    registry = _loaded()
    if analysis.name in registry:
        raise MemlensError(f"an analysis named {analysis.name!r} is already registered")
    registry[analysis.name] = analysis
    return analysis


def unregister(name: str) -> None:
    _loaded().pop(name, None)


# `memlens.analyze`, the facade's name for `run` (importable by that name so that type
# checkers see the facade's lazy name as an explicit re-export)
analyze = run
