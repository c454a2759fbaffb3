"""The MCP server's tools: one per analysis, plus opening, listing and closing snapshots
and SQL.

The analysis tools enumerate the analysis registry (memlens.analysis.registry: one
`Registered` per analysis, handed in by `memlens.cli.mcp` with its click command) and the
few commands that are not registered analyses (fleet: `memlens.cli.command.DECLARED`). A
tool's input schema is the command's own options (click types, defaults and help), and a
call runs what the command runs with --json (`Analysis.call`, or the command's body), so a
tool answers exactly what `memlens <command> --json` prints for the same options. Options
that would write files or reach the network (`--out`, `--report`, `--scheduler`) and
`--annotations` are not offered, nor those that run a script (RUNS_CODE) unless the server
was started with --allow-run; paths the options name must be readable under the server's
roots.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import click

from memlens.agents.params import convert, schema_property
from memlens.agents.session import Session
from memlens.analysis.jsonable import json_default
from memlens.analysis.sites import hide_patterns
from memlens.errors import MemlensError

if TYPE_CHECKING:
    from memlens.analysis.registry import Analysis

# options of the commands that tools do not offer: --json is implied, the cache is the
# server's choice, --limit is a deprecated spelling, and the rest add other files or write
# files or reach a network address
HIDDEN = frozenset(
    {"as_json", "no_cache", "limit_alias", "annotation_files", "scheduler", "out", "report"}
)
# options the command's wrapper handles itself (cli.command.analysis_command), not its body
SHARED = frozenset(
    {
        "as_json",
        "no_cache",
        "device",
        "device_b",
        "hide",
        "hide_only",
        "annotation_files",
        "limit_alias",
    }
)

# options that run code: advise's `script` is simulated (the script is imported and run),
# and `gpu` only names the card of that simulation. Offered only by `memlens mcp
# --allow-run`; the script and the working folder must then be under the server's roots.
RUNS_CODE = frozenset({"script", "gpu"})

SNAPSHOT_ARG = "An id from open_snapshot (s1) or the path of a snapshot file (opened and kept)."


class Shared(TypedDict):
    """What an analysis command's wrapper holds besides the command's own options (see
    cli.command.analysis_command); `hide` as typed (--hide values)."""

    hide: tuple[str, ...]
    hide_only: tuple[str, ...]
    device: int | None
    device_b: int | None
    no_cache: bool
    as_json: bool
    paths: Any


class HasResult(Protocol):
    @property
    def result(self) -> Any: ...


class Declaration(Protocol):
    """An analysis command: a registered analysis (`Registered`) or a command declared by
    cli.command.analysis_command (`Declared`)."""

    @property
    def name(self) -> str: ...
    @property
    def command(self) -> click.Command: ...
    @property
    def opens(self) -> str: ...
    @property
    def snapshot_options(self) -> tuple[str, ...]: ...
    def prepared(self, own: dict[str, Any]) -> dict[str, Any]: ...
    def answer(self, inputs: list[Any], own: dict[str, Any], shared: Shared) -> HasResult: ...


@dataclass(frozen=True)
class _Result:
    result: Any


class Registered:
    """A registered analysis as a tool's declaration: `command` (its click command, built
    from the registry) gives the options' schema and checks; a call is `Analysis.call`, as
    the command's own callback makes it."""

    def __init__(self, analysis: Analysis[Any], command: click.Command) -> None:
        self.analysis = analysis
        self.command = command
        self.name = analysis.name
        self.opens: str = analysis.opens
        self.snapshot_options = tuple(o.name for o in analysis.options if o.kind == "snapshot")

    def prepared(self, own: dict[str, Any]) -> dict[str, Any]:
        return own  # Analysis.check runs in answer(), with the shared values

    def answer(self, inputs: list[Any], own: dict[str, Any], shared: Shared) -> HasResult:
        values = {**own, "device": shared["device"]}
        if self.opens == "pair":
            values["device_b"] = shared["device_b"]
        if self.analysis.hide:  # --hide adds to the defaults, --hide-only replaces them
            values["hide_patterns"] = hide_patterns(shared["hide"], shared["hide_only"])
        return _Result(self.analysis.call(inputs, self.analysis.check(values)))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[Session, dict[str, Any]], Any]  # the answer: JSON-able, not yet bounded
    # only reads the files a call names: false for a tool that may run a script
    # (--allow-run) or write files (sql with --allow-files), announced as such to the host
    read_only: bool = True


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _check_names(tool: str, args: dict[str, Any], schema: dict[str, Any]) -> None:
    unknown = sorted(set(args) - set(schema["properties"]))
    if unknown:
        takes = ", ".join(schema["properties"])
        raise MemlensError(f"{tool}: unknown argument(s) {', '.join(unknown)}; it takes {takes}")


def _inputs_schema(opens: str) -> tuple[dict[str, Any], list[str]]:
    if opens == "many":
        ranks = {"type": "string", "description": SNAPSHOT_ARG}
        snaps = {"type": "array", "items": ranks, "description": "One snapshot per rank."}
        return {"snapshots": snaps}, ["snapshots"]
    if opens == "paths":
        files = "Files, directories or globs: one snapshot per rank."
        return {"paths": {"type": "array", "items": {"type": "string"}, "description": files}}, [
            "paths"
        ]
    if opens == "pair":
        return {
            "snapshot": {"type": "string", "description": "A, the base. " + SNAPSHOT_ARG},
            "snapshot_b": {"type": "string", "description": "B, the new one. " + SNAPSHOT_ARG},
        }, ["snapshot", "snapshot_b"]
    return {"snapshot": {"type": "string", "description": SNAPSHOT_ARG}}, ["snapshot"]


def _refuse_run(tool: str, args: dict[str, Any], params: list[click.Parameter]) -> None:
    """Without --allow-run an option that runs code is refused by name, not ignored."""
    asked = sorted(str(p.name) for p in params if p.name in RUNS_CODE and p.name in args)
    if asked:
        raise MemlensError(
            f"{tool}: {', '.join(asked)} runs a script, which this server does not allow "
            "(the person who starts it can: memlens mcp --allow-run)"
        )


def analysis_tool(decl: Declaration, *, allow_run: bool = False) -> Tool:
    """The tool of one analysis command: its options, its body, its --json; the options
    that run code only with `allow_run`."""
    cmd = decl.command
    params = [p for p in cmd.params if p.name and p.name != "paths"]
    hidden = HIDDEN if allow_run else HIDDEN | RUNS_CODE
    offered = [str(p.name) for p in params if p.name not in hidden]
    runs_code = allow_run and any(p.name in RUNS_CODE for p in params)
    properties, required = _inputs_schema(decl.opens)
    properties.update({str(p.name): schema_property(cmd, p) for p in params if p.name in offered})
    required += [str(p.name) for p in params if p.required and p.name in offered]
    schema = _schema(properties, required)
    help_text = " ".join((cmd.help or "").split())
    description = (
        f"{help_text} Answers the JSON of `memlens {decl.name} --json` (docs/json-schema.md)."
    )

    def run(session: Session, args: dict[str, Any]) -> Any:
        if not allow_run:
            _refuse_run(decl.name, args, params)
        _check_names(decl.name, args, schema)
        values = {
            str(p.name): convert(cmd, p, args.get(str(p.name)) if p.name in offered else None)
            for p in params
        }
        for p in params:  # files the options name: readable only under the server's roots
            if isinstance(p.type, click.Path) and isinstance(values[str(p.name)], str):
                if p.name in decl.snapshot_options:
                    values[str(p.name)] = session.open(values[str(p.name)]).snapshot
                else:  # the resolved path is what is read: no link swapped in after the check
                    values[str(p.name)] = str(session.allowed(values[str(p.name)]))
        if runs_code and isinstance(values.get("script"), str):
            values["script"] = session.allowed_script(values["script"])
        own = decl.prepared({k: v for k, v in values.items() if k not in SHARED})
        inputs, paths = session.inputs(
            decl.opens, args, values.get("device"), values.get("device_b")
        )
        shared: Shared = {
            "hide": values.get("hide", ()),
            "hide_only": values.get("hide_only", ()),
            "device": values.get("device"),
            "device_b": values.get("device_b"),
            "no_cache": not session.cache,
            "as_json": True,
            "paths": paths,
        }
        answer = decl.answer(inputs, own, shared)
        return answer.result

    return Tool(decl.name, description, schema, run, read_only=not runs_code)


def _open_tool() -> Tool:
    path = {"type": "string", "description": "The snapshot file to read (pickle, .gz or JSON)."}
    schema = _schema({"path": path}, ["path"])

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names("open_snapshot", args, schema)
        return session.open(str(args.get("path") or "")).describe()

    doc = (
        "Read a memory snapshot (torch.cuda.memory._dump_snapshot) and keep it open: answers "
        "its id (pass it as `snapshot` to the other tools), its devices and any warnings."
    )
    return Tool("open_snapshot", doc, schema, run)


def _list_tool() -> Tool:
    schema = _schema({}, [])

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names("list_snapshots", args, schema)
        return {"snapshots": [e.describe() for e in session.listed()]}

    return Tool("list_snapshots", "The snapshots this server holds open.", schema, run)


def _close_tool() -> Tool:
    schema = _schema({"snapshot": {"type": "string", "description": SNAPSHOT_ARG}}, ["snapshot"])

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names("close_snapshot", args, schema)
        return {"closed": session.close(str(args.get("snapshot") or ""))}

    return Tool("close_snapshot", "Close an open snapshot (frees its memory).", schema, run)


def _sql_tool(allow_files: bool) -> Tool:
    properties = {
        "snapshot": {"type": "string", "description": SNAPSHOT_ARG},
        "query": {"type": "string", "description": "DuckDB SQL over the tables (docs/sql.md)."},
        "top": {"type": "integer", "default": 100, "description": "At most this many rows."},
    }
    schema = _schema(properties, ["snapshot", "query"])
    files = "may" if allow_files else "may not"

    def run(session: Session, args: dict[str, Any]) -> Any:
        from memlens.analysis.sql import query

        _check_names("sql", args, schema)
        top = args.get("top", 100)
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise MemlensError("top: a count of rows")
        sql = args.get("query")
        if not isinstance(sql, str) or not sql.strip():
            raise MemlensError(
                'give a query, e.g. "select action, count(*) from events group by 1"'
            )
        snap = session.open(str(args.get("snapshot") or "")).snapshot
        return query(snap, sql, top=top, allow_files=allow_files)

    doc = (
        "Run a SQL query (DuckDB) over the snapshot's tables: events, allocations, frames, "
        "stacks, stack_frames, segments, blocks, annotations, strings (needs memlens[sql]). "
        f"Queries {files} read or write files (the server's --allow-files). Same JSON as "
        "`memlens sql --json`."
    )
    return Tool("sql", doc, schema, run, read_only=not allow_files)


def build_tools(
    declarations: list[Declaration], *, allow_files: bool = False, allow_run: bool = False
) -> list[Tool]:
    """Every tool the server offers, in the order an agent would use them."""
    return [
        _open_tool(),
        *(analysis_tool(d, allow_run=allow_run) for d in declarations),
        _sql_tool(allow_files),
        _list_tool(),
        _close_tool(),
    ]


def to_json(result: Any) -> Any:
    """A result as plain JSON values (numpy scalars too; DuckDB's other values as text)."""

    def default(o: Any) -> Any:
        try:
            return json_default(o)
        except TypeError:
            return str(o)

    return json.loads(json.dumps(result, default=default))
