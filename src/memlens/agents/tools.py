"""The MCP server's tools: one per analysis, plus opening, listing and closing snapshots
and SQL.

The analysis tools enumerate the analysis registry (memlens.analysis.registry): a tool's
input schema is the analysis's `host_options()` (the same declared `Option`s the CLI
spells as click options), and a call takes the registry's one request path, `request`,
`open` (with the session's loader: ids or paths) and `call`, so a tool answers exactly
what `memlens <command> --json` prints for the same options. The few commands that are
not registered analyses (fleet: `memlens.cli.command.DECLARED`, handed in by
`memlens.cli.mcp`) are read from their click command and run by their body. The cache is
the server's choice (`memlens mcp --no-cache`) and `--annotations` would add other files,
so neither is offered; nor are options that write files or reach a network address (a
declared command's `not_for_agents`), nor those that run a script (RUNS_CODE) unless the
server was started with --allow-run; paths the options name must be readable under the
server's roots (resolved: the file read is the one checked).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import click

from memlens.agents.params import convert, convert_option, option_property, schema_property
from memlens.agents.session import Session
from memlens.analysis.jsonable import json_default
from memlens.analysis.registry import ANNOTATIONS, NO_CACHE
from memlens.analysis.spec import refs_of
from memlens.errors import MemlensError

if TYPE_CHECKING:
    from memlens.analysis.registry import Analysis
    from memlens.snapshot.model import Snapshot

# the shared options the server decides, not the agent (see the module docstring)
SERVER_OWN = (NO_CACHE.name, ANNOTATIONS.name)

# options that run code: advise's `script` is simulated (the script is imported and run),
# and `gpu` only names the card of that simulation. Offered only by `memlens mcp
# --allow-run`; the script and the working folder must then be under the server's roots.
RUNS_CODE = frozenset({"script", "gpu"})

SNAPSHOT_ARG = "An id from open_snapshot (s1) or the path of a snapshot file (opened and kept)."


class HasResult(Protocol):
    @property
    def result(self) -> Any: ...


class Declaration(Protocol):
    """A command declared by cli.command.analysis_command (`Declared`), not a registered
    analysis: its click command gives the options' schema and checks."""

    @property
    def name(self) -> str: ...
    @property
    def command(self) -> click.Command: ...
    @property
    def opens(self) -> str: ...
    @property
    def not_for_agents(self) -> tuple[str, ...]: ...
    def run(self, given: dict[str, Any], load: Callable[[str], Snapshot]) -> HasResult: ...


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


def _description(name: str, help_text: str) -> str:
    return f"{' '.join(help_text.split())} Answers the JSON of `memlens {name} --json` (docs/json-schema.md)."


def _refuse_run(tool: str, args: dict[str, Any], names: Iterable[str]) -> None:
    """Without --allow-run an option that runs code is refused by name, not ignored."""
    asked = sorted(n for n in names if n in RUNS_CODE and n in args)
    if asked:
        raise MemlensError(
            f"{tool}: {', '.join(asked)} runs a script, which this server does not allow "
            "(the person who starts it can: memlens mcp --allow-run)"
        )


def analysis_tool(analysis: Analysis[Any], *, allow_run: bool = False) -> Tool:
    """The tool of a registered analysis: its declared options, its --json; the options
    that run code only with `allow_run`."""
    hidden = set(SERVER_OWN) | (set() if allow_run else set(RUNS_CODE))
    declared = analysis.host_options()
    offered = [o for o in declared if o.name not in hidden]
    runs_code = allow_run and any(o.name in RUNS_CODE for o in declared)
    properties, required = _inputs_schema(analysis.opens)
    properties.update({o.name: option_property(o) for o in offered})
    required += [o.name for o in offered if o.kind == "argument"]
    schema = _schema(properties, required)

    def run(session: Session, args: dict[str, Any]) -> Any:
        if not allow_run:
            _refuse_run(analysis.name, args, (o.name for o in declared))
        _check_names(analysis.name, args, schema)
        given = {o.name: convert_option(o, args.get(o.name)) for o in offered}
        for o in offered:  # files the options name: readable only under the server's roots
            if o.path and isinstance(given[o.name], str):
                # the resolved path is what is read: no link swapped in after the check
                given[o.name] = str(session.allowed(given[o.name]))
        if runs_code and isinstance(given.get("script"), str):
            given["script"] = session.allowed_script(given["script"])
        values = analysis.request(given)
        refs = refs_of(analysis.opens, session.paths(analysis.opens, args))
        return analysis.call(analysis.open(refs, session.load, values), values)

    description = _description(analysis.name, analysis.doc or analysis.help)
    return Tool(analysis.name, description, schema, run, read_only=not runs_code)


def declared_tool(decl: Declaration) -> Tool:
    """The tool of a command that is not a registered analysis: its click options (less
    the server's own and `not_for_agents`), its body, its --json."""
    cmd = decl.command
    params = [p for p in cmd.params if p.name not in (None, "paths", "as_json")]
    hidden = {*SERVER_OWN, *decl.not_for_agents}
    offered = [p for p in params if p.name not in hidden]
    properties, required = _inputs_schema(decl.opens)
    properties.update({str(p.name): schema_property(cmd, p) for p in offered})
    required += [str(p.name) for p in offered if p.required]
    schema = _schema(properties, required)

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names(decl.name, args, schema)
        values = {
            str(p.name): convert(cmd, p, args.get(str(p.name)) if p in offered else None)
            for p in params
        }
        for p in params:  # files the options name: readable only under the server's roots
            if isinstance(p.type, click.Path) and isinstance(values[str(p.name)], str):
                values[str(p.name)] = str(session.allowed(values[str(p.name)]))
        values.update(
            paths=session.paths(decl.opens, args), as_json=True, no_cache=not session.cache
        )
        return decl.run(values, session.load).result

    return Tool(decl.name, _description(decl.name, cmd.help or ""), schema, run)


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
    analyses: list[Analysis[Any]],
    declared: list[Declaration],
    *,
    allow_files: bool = False,
    allow_run: bool = False,
    predicting: Sequence[Tool] = (),
) -> list[Tool]:
    """Every tool the server offers, in the order an agent would use them (`predicting`:
    estimate, simulate, plan of agents/predict_tools.py, after the analyses)."""
    return [
        _open_tool(),
        *(analysis_tool(a, allow_run=allow_run) for a in analyses),
        *(declared_tool(d) for d in declared),
        *predicting,
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
