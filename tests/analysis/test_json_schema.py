"""docs/json-schema.md against the result types (memlens.analysis.results): every field
the doc names exists in the TypedDict and every TypedDict field is in the doc, at every
level of nesting, for every command that takes --json. The doc is for people, so it is
read with a small parser of its notation:

    Name = expr                one definition per line starting at column 0 (continuation
                               lines are indented); a block's expr without a name is the
                               command's output
    {"a": T, "b", "c": T}      an object; a key without a type is a plain value (an int
                               by the doc's conventions), or a list of them before a
                               list of plain values (`{"event", "bytes": [int]}`)
    {name: T}                  a mapping (keys not listed)
    [T]  [T, comment]          a list
    Name + {...}               the fields of Name plus these
    Name (no "x", "y")         Name without those fields
    {...}                      the same as the previous field's value
    (text)                     a comment; `int`, `str|null`, `"a"|"b"`, ...: plain values
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from memlens.agents.results import Capabilities
from memlens.analysis import registry
from memlens.analysis import results as R
from memlens.fleet.results import FleetResult
from memlens.planning.results import PlanResult
from memlens.simulation.estimate_sweep import EstimateResult

DOC = Path(__file__).resolve().parents[2] / "docs" / "json-schema.md"

# The commands whose --json the doc describes: every registered analysis (its result type
# is the block's unnamed output, unless named here), and the commands that are not
# analyses. command -> {definition name in its section ("" = the unnamed output): type}
NAMED: dict[str, dict[str, Any]] = {
    "peak": {"peak": R.PeakResult, "LiveSet": R.LiveSet},
    "at": {"LiveSet": R.LiveSet, "at --addr": R.AllocationLiveSet},
    "fragmentation": {"State": R.AllocatorState, "": R.FragmentationResult},
}
NOT_ANALYSES: dict[str, dict[str, Any]] = {
    "fleet": {"": FleetResult},
    "sql": {"": R.QueryResult},
    "export": {"": R.ExportResult},
    "capabilities": {"": Capabilities},
    "plan": {"": PlanResult},
    "estimate": {"": EstimateResult},
}


def schema_commands(analyses: list[registry.Analysis[Any]]) -> dict[str, dict[str, Any]]:
    return {**{a.name: NAMED.get(a.name, {"": a.result_type}) for a in analyses}, **NOT_ANALYSES}


def missing_schemas(text: str, commands: dict[str, dict[str, Any]]) -> list[str]:
    """The commands without a `memlens NAME` section in the doc."""
    names = {n for head in sections(text) for n in re.findall(r"`memlens ([\w-]+)`", head)}
    return sorted(set(commands) - names)


COMMANDS = schema_commands(registry.all())
SHARED = {
    "Site": R.Site,
    "NetSite": R.NetSite,
    "Allocation": R.Allocation,
    "Point": R.Point,
    "TreeNode": R.TreeNode,
}

# --- the doc's notation --------------------------------------------------------------------


@dataclass
class Node:
    kind: str  # "obj", "map", "list", "ref", "scalar", "same"
    fields: dict[str, Node] = field(default_factory=dict)  # obj
    bases: list[str] = field(default_factory=list)  # obj: "Name + {...}"
    item: Node | None = None  # list / map value
    name: str = ""  # ref
    minus: set[str] = field(default_factory=set)  # ref / obj: (no "x")


SCALAR = Node("scalar")
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\.\.\.|[{}\[\](),:|+]|[^\s{}\[\](),:|+"]+')


def tokens(text: str) -> list[str]:
    """The tokens of an expression, comments dropped; `(no "x", "y")` becomes one
    token ("-", "x", "y") joined by NUL."""
    out: list[str] = []
    toks = TOKEN.findall(text)
    i = 0
    while i < len(toks):
        if toks[i] != "(":
            out.append(toks[i])
            i += 1
            continue
        depth, j = 1, i + 1
        while depth:
            depth += {"(": 1, ")": -1}.get(toks[j], 0)
            j += 1
        inner = toks[i + 1 : j - 1]
        if inner and inner[0] == "no":
            out.append("\0".join(["-", *(t[1:-1] for t in inner if t.startswith('"'))]))
        i = j
    return out


class Parser:
    def __init__(self, toks: list[str], names: set[str]) -> None:
        self.toks, self.i = toks, 0
        self.names = names  # defined names: a capitalised word among them is a reference

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        self.i += 1
        return self.toks[self.i - 1]

    def value(self) -> Node:
        """Terms joined by + or |, up to a , or a closing bracket at this level."""
        result: Node | None = None
        op = "|"
        while (t := self.peek()) is not None and t not in ",}]":
            if t in "+|":
                op = self.take()
                continue
            if t.startswith("-\0"):
                self.take()
                if result is not None:
                    result.minus |= set(t.split("\0")[1:])
                continue
            term = self.term()
            if op == "+" and result is not None:
                base = result.name if result.kind == "ref" else ""
                term.bases = [*result.bases, *([base] if base else []), *term.bases]
                if result.kind == "obj":
                    term.fields = {**result.fields, **term.fields}
                result = term
            elif result is None or (result.kind == "scalar" and term.kind != "scalar"):
                result = term
        return result or SCALAR

    def term(self) -> Node:
        t = self.take()
        if t == "{":
            return self.obj()
        if t == "[":
            item = self.value()
            depth = 1  # skip ", comment" up to the matching ]
            while depth:
                depth += {"[": 1, "]": -1}.get(self.take(), 0)
            return Node("list", item=item)
        if t in self.names:
            return Node("ref", name=t)
        return Node("scalar")

    def obj(self) -> Node:
        if self.peek() == "...":
            self.take()
            self.take()  # }
            return Node("same")
        node = Node("obj")
        pending: list[str] = []
        previous: Node = SCALAR
        while (t := self.take()) != "}":
            if t == ",":
                continue
            if not t.startswith('"'):  # {name: T}: a mapping
                while self.take() != ":":
                    pass
                node = Node("map", item=self.value())
                continue
            pending.append(t[1:-1])
            if self.peek() == ":":
                self.take()
                v = self.value()
                v = previous if v.kind == "same" else v
                plain_list = v.kind == "list" and v.item is not None and v.item.kind == "scalar"
                for k in pending[:-1]:
                    node.fields[k] = v if plain_list else SCALAR
                node.fields[pending[-1]] = v
                pending, previous = [], v
        for k in pending:
            node.fields[k] = SCALAR
        return node


def statements(block: str) -> list[tuple[str, str]]:
    """(name or "", expression text) per statement of a code block."""
    out: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line.strip() and not line[0].isspace():
            m = re.match(r"([A-Za-z][\w -]*?) = (.*)", line)
            out.append((m.group(1), m.group(2)) if m else ("", line))
        elif line.strip():
            name, text = out[-1]
            out[-1] = (name, text + "\n" + line)
    return out


def sections(text: str) -> dict[str, str]:
    """Heading ("" before the first) -> its text."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


def definitions(section_text: str, known: set[str]) -> dict[str, Node]:
    blocks = re.findall(r"^```\n(.*?)^```", section_text, flags=re.M | re.S)
    stmts = [s for b in blocks for s in statements(b)]
    names = known | {name for name, _ in stmts if name}
    return {name: Parser(tokens(expr), names).value() for name, expr in stmts}


def section_of(command: str, text: str) -> str:
    hits = [body for head, body in sections(text).items() if f"`memlens {command}`" in head]
    assert len(hits) == 1, f"`memlens {command}`: {len(hits)} sections in {DOC.name}"
    return hits[0]


# --- comparing ------------------------------------------------------------------------------


def shape(tp: Any) -> tuple[str, Any]:
    """A type as the doc sees it: ("td", cls), ("list", item), ("map", value), ("scalar",)."""
    if is_typeddict(tp):
        return "td", tp
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return shape(args[0]) if len(args) == 1 else ("scalar", None)
    if origin is list:
        return "list", get_args(tp)[0]
    if origin is dict:
        return "map", get_args(tp)[1]
    return "scalar", None


class Checker:
    def __init__(self, defs: dict[str, Node]) -> None:
        self.defs = defs
        self.errors: list[str] = []
        self.seen: set[Any] = set()
        self.objects = 0  # objects compared (a parser that reads nothing would pass)

    def fields(self, node: Node) -> dict[str, Node] | None:
        """An object's fields with its bases and exclusions applied; None if not one."""
        if node.kind == "ref":
            base = self.fields(self.defs[node.name])
            return None if base is None else {k: v for k, v in base.items() if k not in node.minus}
        if node.kind != "obj":
            return None
        out: dict[str, Node] = {}
        for b in node.bases:
            out.update(self.fields(self.defs[b]) or {})
        out.update(node.fields)
        return {k: v for k, v in out.items() if k not in node.minus}

    def check(self, node: Node, tp: Any, path: str) -> None:
        kind, arg = shape(tp)
        if node.kind == "ref":
            key = (node.name, frozenset(node.minus), tp)
            if key in self.seen:  # recursive (TreeNode.children)
                return
            self.seen.add(key)
        if kind == "td":
            doc = self.fields(node)
            if doc is None:
                self.errors.append(
                    f"{path}: an object in the types ({arg.__name__}), not in the doc"
                )
                return
            self.objects += 1
            hints = get_type_hints(arg)
            for k in sorted(doc.keys() - hints.keys()):
                self.errors.append(f"{path}.{k}: in the doc, not in {arg.__name__}")
            for k in sorted(hints.keys() - doc.keys()):
                self.errors.append(f"{path}.{k}: in {arg.__name__}, not in the doc")
            for k in sorted(doc.keys() & hints.keys()):
                self.check(doc[k], hints[k], f"{path}.{k}")
        elif kind in ("list", "map"):
            if node.kind != kind:
                self.errors.append(f"{path}: a {kind} in the types, {node.kind} in the doc")
            else:
                self.check(node.item or SCALAR, arg, f"{path}[]")
        elif node.kind != "scalar":
            self.errors.append(f"{path}: a plain value in the types, {node.kind} in the doc")


def check_doc(text: str, command: str) -> tuple[list[str], int]:
    shared = definitions(sections(text)[""], set())
    defs = {**shared, **definitions(section_of(command, text), set(shared))}
    checker = Checker(defs)
    for name, tp in COMMANDS[command].items():
        assert name in defs, f"`memlens {command}`: no {name or 'unnamed'} schema in the doc"
        checker.check(defs[name], tp, name or command)
    return checker.errors, checker.objects


# --- tests ----------------------------------------------------------------------------------


def test_every_json_command_has_a_documented_schema_and_a_type():
    import click

    from memlens.cli.main import cli

    text = DOC.read_text()
    ctx = click.Context(cli)
    # (generate --json writes the snapshot as JSON: PyTorch's format, not a result schema)
    commands = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    with_json = [name for name, command in commands.items() if name != "generate"
                 and command is not None and any(p.name == "as_json" for p in command.params)]  # fmt: skip
    assert {"peak", "at", "check", "sql", "diff"} <= set(with_json)
    assert set(with_json) == set(COMMANDS)
    assert missing_schemas(text, COMMANDS) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_doc_and_the_types_name_the_same_fields(command):
    errors, objects = check_doc(DOC.read_text(), command)
    assert errors == []
    assert objects >= len(COMMANDS[command])


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_objects(name):
    defs = definitions(sections(DOC.read_text())[""], set())
    checker = Checker(defs)
    checker.check(Node("ref", name=name), SHARED[name], name)
    assert checker.errors == []
    assert checker.objects >= 1


@pytest.mark.parametrize(
    ("command", "old", "new", "error"),
    [
        # a field left out of the doc, one the types lack, and one deep inside
        ("peak", '"device": int, "live_count": int,', '"device": int,',
         "LiveSet.live_count: in LiveSet, not in the doc"),
        ("sql", '"truncated": bool (', '"extra": int, "truncated": bool (',
         "sql.extra: in the doc, not in QueryResult"),
        ("leaks", '"left_alive_count": int', '"left_alive": int',
         "leaks.groups[].occurrences[].left_alive: in the doc, not in Occurrence"),
        ("fragmentation", '"at_peak": State (no "segments", "inconsistencies")',
         '"at_peak": State (no "segments")',
         "fragmentation.at_peak.inconsistencies: in the doc, not in StateSummary"),
        ("diff", '"b": {...}', '"b": int', "diff.b: an object in the types (DiffSide), not in"),
    ],
)  # fmt: skip
def test_drift_is_caught(command, old, new, error):
    text = DOC.read_text()
    assert text.count(old) == 1
    errors, _ = check_doc(text.replace(old, new, 1), command)
    assert any(e.startswith(error) for e in errors), errors


def test_typeddicts_resolve():
    # every annotation in results.py evaluates (get_type_hints would fail on a typo)
    for obj in vars(R).values():
        if is_typeddict(obj):
            assert get_type_hints(obj), obj
    assert typing.get_type_hints(R.TreeNode)["children"] == list[R.TreeNode]
