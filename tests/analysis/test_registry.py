"""The registry of analyses (memlens.analysis.registry): one declaration per analysis, and
from it the CLI command, its --json, the report section, the schema test's list and the
docs' list. A toy analysis registered here shows up in all of them; every built-in
analysis gives the same dict through the Python API as through `memlens NAME --json`."""

from __future__ import annotations

import importlib.machinery
import inspect
import json
import re
import sys
import types
from pathlib import Path
from typing import Any, TypedDict, get_type_hints

import pytest
from click.testing import CliRunner
from test_json_schema import missing_schemas, schema_commands

import memlens
from memlens.analysis import declarations, registry
from memlens.analysis.jsonable import json_default
from memlens.analysis.registry import Analysis, Option
from memlens.cli.main import cli
from memlens.errors import MemlensError

DOCS = Path(__file__).resolve().parents[2] / "docs"


class ToyResult(TypedDict):
    device: int
    events: int
    first: list[int]


def toy(dev: Any, *, top: int = 2, hide_patterns: Any = None) -> ToyResult:
    """The sizes of the first `top` events, and the trace's length."""
    return {"device": dev.device, "events": dev.n_events, "first": dev.size[:top].tolist()}


def render_toy(result: ToyResult, options: Any) -> str:
    return f"device {result['device']}: {result['events']} events, first {result['first']}"


def toy_section(ctx: Any) -> str:
    return f"<p>toy: {toy(ctx.dev)['events']} events</p>"


@pytest.fixture
def toy_registered(monkeypatch):
    """A module `toy_analysis` holding the toy's function, renderer and section (as an
    analysis module, a views.text module and a report section module would), and its
    declaration in the registry."""
    from memlens.views.report.context import Section

    module = types.ModuleType("toy_analysis")
    module.__spec__ = importlib.machinery.ModuleSpec("toy_analysis", None)
    vars(module).update(toy=toy, render_toy=render_toy, SECTION=Section("toy", "Toy", toy_section))
    monkeypatch.setitem(sys.modules, "toy_analysis", module)
    analysis = registry.register(
        Analysis(
            "toy",
            "the sizes of the first events",
            "toy_analysis:toy",
            ToyResult,
            "toy_analysis:render_toy",
            options=(Option("top", int, 2, "How many."),),
            section="toy_analysis:SECTION",
        )  # fmt: skip
    )
    yield analysis
    registry.unregister("toy")


def test_a_toy_analysis_is_a_command_with_json_a_report_section_and_needs_docs(
    toy_registered, hand_file
):
    ctx = cli.make_context("memlens", ["--help"], resilient_parsing=True)
    assert "toy" in cli.list_commands(ctx)
    # the hand snapshot: 10 events, the first a 2 MiB segment, then an allocation of 100 B
    text = CliRunner().invoke(cli, ["toy", str(hand_file)])
    assert text.exit_code == 0, text.output
    assert text.output == "device 0: 10 events, first [2097152, 100]\n"
    out = CliRunner().invoke(cli, ["toy", str(hand_file), "--top", "1", "--json"]).output
    assert json.loads(out) == {"device": 0, "events": 10, "first": [2097152]}
    assert toy_registered.run(memlens.load(str(hand_file)), top=1) == json.loads(out)
    # --limit: the hidden deprecated spelling of --top
    old = CliRunner().invoke(cli, ["toy", str(hand_file), "--limit", "1", "--json"])
    assert json.loads(old.stdout) == {"device": 0, "events": 10, "first": [2097152]}
    assert "--limit" not in CliRunner().invoke(cli, ["toy", "--help"]).output
    # the report has its section, before the allocator settings
    from memlens.views.report import build_report
    from memlens.views.report.build import sections

    assert [s.id for s in sections()][-3:] == ["allocator", "toy", "settings"]
    html, problems = build_report(memlens.load(str(hand_file)))
    assert problems == []
    assert '<section id="toy"><h2>Toy</h2><p>toy: 10 events</p></section>' in html
    # the schema test and the docs' list now ask for it
    commands = schema_commands(registry.all())
    assert commands["toy"] == {"": ToyResult}
    assert missing_schemas((DOCS / "json-schema.md").read_text(), commands) == ["toy"]
    assert docs_list_problems() == ["toy: not in docs/analyses.md's list"]


def docs_list_problems() -> list[str]:
    """docs/analyses.md's table against the registry: each analysis once, with its
    declaration's one-line question (sql is the one command listed there that is not a
    registered analysis)."""
    text = (DOCS / "analyses.md").read_text()
    rows = re.findall(r"^\| `memlens ([\w-]+)` \|.*\| ([^|]+) \|$", text, flags=re.M)
    listed = [n for n, _ in rows]
    problems = [f"{n}: listed twice" for n in sorted({n for n in listed if listed.count(n) > 1})]
    problems += [
        f"{n}: not in docs/analyses.md's list" for n in registry.names() if n not in listed
    ]
    problems += [
        f"{n}: listed, not registered" for n in listed if n not in registry.names() + ["sql"]
    ]
    problems += [
        f"{n}: its question is {registry.get(n).help!r}, not {q!r}"
        for n, q in rows
        if n in registry.names() and q != registry.get(n).help
    ]
    return problems


def test_the_docs_list_is_the_registry():
    assert docs_list_problems() == []
    assert registry.names() == [a.name for a in declarations.BUILTIN]


def test_declarations_agree_with_their_functions_and_renderers():
    """What mypy cannot see through the declarations' strings: each function returns its
    declared result type, each renderer takes it, and the function is the command: it
    takes every declared option by its name and with its default (one place for each),
    and nothing else without a default."""
    for a in registry.all():
        returned = get_type_hints(a.function_obj)["return"]
        rendered = next(iter(get_type_hints(a.renderer).values()))
        assert a.result_type in (returned, *getattr(returned, "__args__", ())), a.name
        assert returned == rendered, a.name
        params = inspect.signature(a.function_obj).parameters
        inputs = list(params)[: 2 if a.opens == "pair" else 1]
        # every option but device (and device_b), which pick the trace(s) for it
        for o in a.all_options():
            if o.name in ("device", "device_b") and o.name not in params:
                continue
            assert o.name in params, (a.name, o.name)
            default = params[o.name].default
            assert default is inspect.Parameter.empty or default == o.default, (a.name, o.name)
        declared = {o.name for o in a.all_options()}
        for name in set(params) - declared - set(inputs):
            assert params[name].default is not inspect.Parameter.empty, (a.name, name)


def cli_arguments(o: Option, value: Any) -> list[str]:
    """A declared option's value as the command line spells it."""
    if o.kind == "argument":
        return [str(value)]
    if o.type is bool:
        return [o.cli_flag if value else str(o.secondary)]
    return [w for v in (value if o.multiple else [value]) for w in (o.cli_flag, str(v))]


def example(a: Analysis[Any], hand: str, tmp: Path) -> tuple[list[str], dict[str, Any], list[str]]:
    """(CLI arguments, run options, inputs as paths) of the declaration's `example`; a
    path option's example is the file's text, written to a file here."""
    options = dict(a.example)
    declared = {o.name: o for o in a.options}
    for name, value in options.items():
        if declared[name].path:
            (tmp / name).write_text(value)
            options[name] = str(tmp / name)
    args = [w for name, value in options.items() for w in cli_arguments(declared[name], value)]
    return args, options, [hand, hand] if a.opens in ("pair", "many") else [hand]


def test_the_python_api_gives_what_the_command_prints(hand_file, tmp_path):
    for a in declarations.BUILTIN:
        args, options, paths = example(a, str(hand_file), tmp_path)
        out = CliRunner().invoke(cli, [a.name, *paths, *args, "--json"])
        api = a.run_paths(paths if len(paths) > 1 else paths[0], **options)
        assert out.exit_code == a.exit_code(api), (a.name, out.output)
        assert json.loads(json.dumps(api, default=json_default)) == json.loads(out.stdout), a.name
        # the facade, with paths or with opened snapshots, answers the same
        snaps = [memlens.load(p) for p in paths]
        inputs = [snaps] if a.opens == "many" else snaps
        assert memlens.analyze(a.name, *inputs, **options) == api, a.name


def test_core_functions_are_the_registered_ones(hand_file):
    """No adapter between the Python call and the command: same defaults, same answer."""
    from memlens.analysis import anomalies, diff, leaks

    dev = memlens.load(str(hand_file)).device()
    assert leaks.leaks(dev) == registry.get("leaks").run(dev)
    assert anomalies.anomalies(dev) == registry.get("anomalies").run(dev)
    assert diff.diff(dev, dev) == registry.get("diff").run(dev, dev)


def test_options_are_checked_by_name_and_limit_is_top(hand_file):
    leaks = registry.get("leaks")
    with pytest.raises(MemlensError, match="leaks has no option 'nope'"):
        leaks.run_paths(str(hand_file), nope=1)
    with pytest.warns(DeprecationWarning, match="limit= is deprecated, use top="):
        assert leaks.check({"limit": 3})["top"] == 3
    with pytest.raises(MemlensError, match="give exactly one of --event, --time-us or --addr"):
        registry.get("at").run_paths(str(hand_file))
    with pytest.raises(MemlensError, match="no analysis 'nope'"):
        registry.get("nope")
    with pytest.raises(MemlensError, match="already registered"):
        registry.register(leaks)


def test_options_describe_themselves():
    """What `memlens capabilities --json` lists: each option's name, type, default, help."""
    described = [o.describe() for o in registry.get("fragmentation").all_options()]
    assert [(d["name"], d["type"], d["default"]) for d in described] == [
        ("event", "int", None), ("blocks", "bool", True), ("points", "int", 200),
        ("device", "int", None),
    ]  # fmt: skip
    assert described[1]["help"].startswith("With --event: list every segment and block")
    rules = {o.name: o.describe() for o in registry.get("rules").all_options()}
    assert rules["rules_file"]["type"] == "path" and rules["rules_file"]["required"]
    assert rules["hide_patterns"]["multiple"]
    json.dumps(rules)  # JSON-able


def test_listing_the_registry_imports_no_analysis():
    import subprocess

    code = (
        "import sys; from memlens.analysis import registry; "
        "names = [a.name for a in registry.all()]; [o.describe() for a in registry.all() "
        "for o in a.all_options()]; "
        "heavy = {'numpy', 'click', 'memlens.snapshot.model'} & set(sys.modules); "
        "assert not heavy, heavy; print(len(names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{len(declarations.BUILTIN)}\n"
