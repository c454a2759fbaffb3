"""The import contract: the packages follow the pipeline, and no module grows into a grab-bag.

    capture/simulation -> snapshot (read, assemble, replay, store) -> analysis -> views -> cli

Every import of a memlens module is read from the source by AST: top-level ones and the
lazy ones inside functions (they run too, only later), plus importlib.import_module with a
literal name. Imports under `if TYPE_CHECKING:` are left out: they never run.

Rules:
1. Layers: cli (and the top-level glue `recording`, `__main__`) > views > analysis >
   snapshot > {units, errors, the `memlens` facade}. A module imports only its own layer or
   lower ones.
2. The side packages capture, simulation, inspector and fleet may use snapshot and analysis
   but never views, cli or the top-level glue; the pipeline below cli (views, analysis,
   snapshot, units, errors) never imports them (e.g. the synthetic generator is not on the
   read path). One side package imports another only as the table "Side packages that
   import each other" of docs/architecture.md says, with its reason.
3. No import cycle between packages (directories), nor between modules, lazy imports included.
   A package and a subpackage that import each other (not an __init__ re-exporting its
   submodules: a real two-way tie) are one unit only where TWO_WAY_TIES says why.
4. Inside snapshot/, the step folders import in pipeline order (SNAPSHOT_STEPS): a step
   imports only the steps after it.
5. No module (.py, .c, .h or .js) over MAX_LINES lines, except ALLOWED_LONG, each with its reason.
6. No import cycle between the JavaScript modules (static/js, the templates' scripts).

One extension point is named by string, not imported: Snapshot._repr_html_ (IPython looks
it up on the class) reaches the views layer's memlens.views.notebook through
snapshot.model.NOTEBOOK_VIEW, as the facade reaches its lazy names.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "memlens"
MAX_LINES = 500

# top-level component -> layer; higher may import lower, never the reverse
LAYERS = {
    "errors": 0,
    "units": 1,
    "keywords": 1,  # keyword options onto a settings dataclass (simulate, inspect, callbacks)
    "memlens": 1,  # the facade's __init__: imports only errors; its lazy names are strings
    "snapshot": 2,
    "analysis": 3,
    "views": 4,
    "cli": 5,
    "recording": 5,  # memlens.record: joins capture and the HTML report, above both
    "notebook": 5,  # Jupyter: joins the viewer's server, memlens.record and the simulator
    "integrations": 5,  # trainer callbacks: drive capture, write the report via recording
    "agents": 5,  # memlens mcp / skill / capabilities: handed the commands by cli, never imports it
    "__main__": 6,
}
SIDE = {"capture", "simulation", "planning", "inspector", "fleet", "execution"}
SIDE_MUST_NOT_IMPORT = {"views", "cli", "recording", "__main__"}
PIPELINE_BELOW_CLI = {"views", "analysis", "snapshot", "units", "errors", "memlens"}

ALLOWED_LONG = {
    "analysis/allocator_model.py": "one model of CUDACachingAllocator.cpp (constants, round_size, "
    "pools, CachingAllocator); the review found it coherent: splitting would cut one algorithm",
    "analysis/results.py": "declarations only: one TypedDict per JSON object of "
    "docs/json-schema.md, no logic",
    "snapshot/csrc/replay.c": "the compiled replay: one pass over the events (pairing, rows, "
    "both curves) and its module glue; its buffer type and flag bits are shared headers",
}
CODE_SUFFIXES = (".py", ".c", ".h", ".js")

# Parent and child packages that import each other, each with why the two are one unit.
TWO_WAY_TIES = {
    ("memlens.views.report", "memlens.views.report.sections"): "the report's page builder "
    "runs the sections; a section draws with the page's widgets (page.py, context.py, "
    "bands.py): the sections are the report's plug-ins, built on its toolkit",
    ("memlens.inspector", "memlens.inspector.render"): "the background worker renders the "
    "run as it goes (worker.py -> render); render reads the run back through store.py",
    ("memlens.simulation", "memlens.simulation.distributed"): "the session installs the fake "
    "process group (distributed/process_group.py) like any other patch, and the launcher "
    "(distributed/launch.py, --nproc-per-node) runs each rank's simulation through "
    "simulation.api: the launcher lives beside the distributed simulation it starts",
    **dict.fromkeys(
        (
            ("memlens.snapshot", f"memlens.snapshot.{step}")
            for step in ("read", "assemble", "store")
        ),
        "snapshot/ holds the model (model.py and its types, limits.py, native.py) that every "
        "step reads or fills, and `load` (loader.py), the entry point that runs the steps in "
        "order: the steps are the model's parts, as SNAPSHOT_STEPS orders them",
    ),
}

# snapshot/'s steps in pipeline order: a step imports only the steps after it (the compiled
# reader's glue hands its columns to the builder, the builder runs the replay, the store keeps
# what they made), never one before it; loader.py, in snapshot/ itself, runs them all. The
# build step's folder is assemble/: a folder named build/ is build output to .gitignore and ruff.
SNAPSHOT_STEPS = ("read", "assemble", "replay", "store")


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported memlens module, dotted
    line: int
    lazy: bool

    def __str__(self) -> str:
        kind = "lazy import" if self.lazy else "import"
        path = _modules()[self.source][0].relative_to(SRC.parent)
        return f"{path}:{self.line}: {kind} of {self.target}"


@functools.cache
def _modules() -> dict[str, tuple[Path, bool]]:
    """dotted name -> (file, is a package __init__)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(module: str, type_checking: bool = False) -> list[Import]:
    """The memlens imports of `module`; with `type_checking`, those under `if
    TYPE_CHECKING:` too (they never run, but a loop through them is still a loop a reader
    and mypy must untangle)."""
    path, is_pkg = _modules()[module]
    found: list[Import] = []

    def add(target: str | None, node: ast.AST, lazy: bool) -> None:
        if target and (target == "memlens" or target.startswith("memlens.")):
            found.append(Import(module, target, node.lineno, lazy))  # type: ignore[attr-defined]

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:  # `else:` of TYPE_CHECKING runs
                    visit_one(other, lazy)
                for other in child.body if type_checking else ():
                    visit_one(other, True)
                continue
            visit_one(child, lazy)

    def visit_one(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, lazy)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            for alias in node.names:
                sub = f"{parent}.{alias.name}"  # `from pkg import submodule`
                add(sub if sub in _modules() else parent, node, lazy)
        else:
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                add(node.args[0].value, node, True)
            inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(node, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return found


def _all_imports(type_checking: bool = False) -> list[Import]:
    return [imp for module in _modules() for imp in _imports_of(module, type_checking)]


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "memlens"


def _package(module: str) -> str:
    """The directory a module lives in (a package __init__ is its own package)."""
    return module if _modules()[module][1] else module.rsplit(".", 1)[0]


def _resolve(target: str) -> str | None:
    """The memlens module a target names (an attribute import names its module)."""
    while target and target not in _modules():
        target = target.rpartition(".")[0]
    return target or None


def test_every_component_is_classified():
    components = {_component(m) for m in _modules()}
    unknown = components - set(LAYERS) - SIDE
    assert not unknown, (
        f"new top-level package(s) {sorted(unknown)}: give each a layer in LAYERS or add it "
        "to SIDE in tests/test_architecture.py"
    )


def test_the_walker_sees_lazy_imports_and_skips_type_checking():
    # a lazy import inside a function is seen; so is one in the builder of the cache
    lazy = [i for i in _all_imports() if i.lazy]
    assert lazy, "no lazy import found: the walker would miss half the contract"
    # simulation.tracker imports simulation.host only under TYPE_CHECKING
    tracker = [i.target for i in _imports_of("memlens.simulation.patches.tracker")]
    assert "memlens.simulation.host" not in tracker
    typed = [i.target for i in _imports_of("memlens.simulation.patches.tracker", True)]
    assert "memlens.simulation.host" in typed


def test_layers():
    broken = []
    for imp in _all_imports():
        src, dst = _component(imp.source), _component(imp.target)
        if src == dst:
            continue
        if src in LAYERS and dst in LAYERS and LAYERS[dst] > LAYERS[src]:
            broken.append(f"{imp}: {src} (layer {LAYERS[src]}) must not import {dst} "
                          f"(layer {LAYERS[dst]}); the pipeline is "
                          "cli > views > analysis > snapshot > units/errors")  # fmt: skip
        if src in SIDE and dst in SIDE_MUST_NOT_IMPORT:
            broken.append(f"{imp}: {src} is a side package and must not import {dst} "
                          "(pass a callback from the layer above instead)")  # fmt: skip
        if src in PIPELINE_BELOW_CLI and dst in SIDE:
            broken.append(f"{imp}: {src} must not import the side package {dst} "
                          "(only cli and the top-level glue join them)")  # fmt: skip
    assert not broken, "import layers broken:\n" + "\n".join(sorted(broken))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _assert_no_cycles(edges: Iterator[tuple[str, str, object]], between: str) -> None:
    """Fail naming every import on every cycle of the graph of `edges` (from, to, why)."""
    graph: dict[str, set[str]] = {}
    why: dict[tuple[str, str], object] = {}
    for a, b, imp in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
        why.setdefault((a, b), imp)
    cycles = _cycles(graph)
    lines = []
    for comp in cycles:
        members = set(comp)
        edges_on = [str(why[(a, b)]) for a in comp for b in sorted(graph[a]) if b in members]
        lines.append(f"cycle {' <-> '.join(comp)}:\n    " + "\n    ".join(edges_on))
    assert not cycles, f"import cycles between {between}:\n" + "\n".join(lines)


def test_no_cycle_between_packages():
    def edges() -> Iterator[tuple[str, str, Import]]:
        for imp in _all_imports():
            target = _resolve(imp.target)
            if target is None:
                continue
            a, b = _package(imp.source), _package(target)
            # a package and its own parent (an __init__ re-exporting a submodule) is one unit
            if not (a == b or a.startswith(b + ".") or b.startswith(a + ".")):
                yield a, b, imp

    _assert_no_cycles(edges(), "packages")


def test_no_cycle_between_modules():
    """Inside a package too: the review's cycle snapshot.assemble.builder -> replay -> model ⇢ builder
    (kept alive by a lazy import) would be invisible to the package check once replay moved
    into snapshot/. A package __init__ and the modules under it are not counted (re-export).
    Imports under `if TYPE_CHECKING:` count here: the simulation's patch modules once typed
    their argument as `Simulation`, which imports them all (a type-time loop of seven
    modules); they name the `SimulationHost` protocol, a leaf, instead."""

    def edges() -> Iterator[tuple[str, str, Import]]:
        for imp in _all_imports(type_checking=True):
            target = _resolve(imp.target)
            if target is None or target == imp.source:
                continue
            a, b = imp.source, target
            if not (
                (_modules()[b][1] and a.startswith(b + "."))
                or (_modules()[a][1] and b.startswith(a + "."))
            ):
                yield a, b, imp

    _assert_no_cycles(edges(), "modules")


def _parent_child_edges() -> set[tuple[str, str]]:
    """(a, b) for each package a importing b where one is a subpackage of the other, not
    counting an __init__ that re-exports its own submodules."""
    out = set()
    for imp in _all_imports():
        target = _resolve(imp.target)
        if target is None:
            continue
        a, b = _package(imp.source), _package(target)
        if a == b or "memlens" in (a, b):  # the top: the facade, errors and units (rule 1)
            continue
        if _modules()[imp.source][1] and b.startswith(a + "."):
            continue
        if b.startswith(a + ".") or a.startswith(b + "."):
            out.add((a, b))
    return out


def test_parent_and_child_packages_tied_both_ways_are_named():
    edges = _parent_child_edges()
    ties = {(a, b) for a, b in edges if b.startswith(a + ".") and (b, a) in edges}
    new = sorted(ties - set(TWO_WAY_TIES))
    assert not new, (
        f"{new}: a package and its subpackage import each other. Make one depend on the "
        "other only, or add the pair to TWO_WAY_TIES with why they are one unit"
    )
    stale = sorted(set(TWO_WAY_TIES) - ties)
    assert not stale, f"{stale} no longer import each other: remove them from TWO_WAY_TIES"


def _snapshot_step_edges() -> dict[tuple[str, str], list[str]]:
    """(importing step, imported step) -> the imports, between snapshot/'s step folders."""

    def step(module: str) -> str | None:
        parts = module.split(".")
        in_step = len(parts) > 2 and parts[1] == "snapshot" and parts[2] in SNAPSHOT_STEPS
        return parts[2] if in_step else None

    out: dict[tuple[str, str], list[str]] = {}
    for imp in _all_imports():
        target = _resolve(imp.target)
        a, b = step(imp.source), step(target) if target else None
        if a and b and a != b:
            out.setdefault((a, b), []).append(str(imp))
    return out


def test_snapshot_steps_import_in_pipeline_order():
    edges = _snapshot_step_edges()
    # the walker sees the steps' imports: the compiled reader builds through the builder
    assert ("read", "assemble") in edges and ("assemble", "replay") in edges
    order = SNAPSHOT_STEPS.index
    backwards = {pair: imps for pair, imps in edges.items() if order(pair[0]) > order(pair[1])}
    assert not backwards, (
        f"snapshot/ steps importing an earlier step (order {' -> '.join(SNAPSHOT_STEPS)}): "
        f"{backwards}. Move the shared code into snapshot/ itself or into the earlier step's "
        "callee"
    )


def _side_table() -> set[tuple[str, str]]:
    """docs/architecture.md, "Side packages that import each other": (from, imported)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### Side packages that import each other", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(\w+)/` \| `(\w+)/` \|", section, re.M))


def test_side_packages_import_each_other_only_as_documented():
    found: dict[tuple[str, str], list[str]] = {}
    for imp in _all_imports():
        a, b = _component(imp.source), _component(imp.target)
        if a != b and a in SIDE and b in SIDE:
            found.setdefault((a, b), []).append(str(imp))
    table = _side_table()
    undocumented = {pair: why for pair, why in found.items() if pair not in table}
    assert not undocumented, (
        "side package imports not in docs/architecture.md's table (add a row with the "
        f"reason, or move the code): {undocumented}"
    )
    assert table <= set(found), f"rows of the table no longer true: {sorted(table - set(found))}"


JS_IMPORT = re.compile(
    r"""^\s*(?:import|export)\b[^;"']*?\bfrom\s*["'](\.{1,2}/[^"']+)["']""", re.M
)
JS_BARE_IMPORT = re.compile(r"""^\s*import\s*["'](\.{1,2}/[^"']+)["']""", re.M)


def _js_imports(path: Path) -> list[Path]:
    text = path.read_text(encoding="utf-8")
    names = JS_IMPORT.findall(text) + JS_BARE_IMPORT.findall(text)
    return [(path.parent / name).resolve() for name in names]


def test_the_js_walker_sees_imports():
    main = SRC / "views" / "web" / "static" / "js" / "main.js"
    seen = {p.relative_to(main.parent).as_posix() for p in _js_imports(main)}
    assert {"api.js", "pane/pane.js", "cursor.js"} <= seen


def test_no_cycle_between_js_modules():
    def edges() -> Iterator[tuple[str, str, object]]:
        for path in sorted(SRC.rglob("*.js")):
            for target in _js_imports(path):
                assert target.exists(), f"{path}: imports {target}, which does not exist"
                a, b = (p.relative_to(SRC).as_posix() for p in (path, target))
                yield a, b, f"{a} imports {b}"

    _assert_no_cycles(edges(), "JavaScript modules")


def test_modules_stay_small():
    too_long = []
    for path in sorted(p for p in SRC.rglob("*") if p.suffix in CODE_SUFFIXES):
        rel = path.relative_to(SRC).as_posix()
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and rel not in ALLOWED_LONG:
            too_long.append(f"src/memlens/{rel}: {n} lines (> {MAX_LINES}): split it by job, "
                            "or add it to ALLOWED_LONG with the reason it is one algorithm")  # fmt: skip
    assert not too_long, "\n".join(too_long)


@pytest.mark.parametrize("rel", sorted(ALLOWED_LONG))
def test_allow_list_is_not_stale(rel):
    path = SRC / rel
    assert path.exists(), f"ALLOWED_LONG names {rel}, which no longer exists"
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n > MAX_LINES, f"{rel} is {n} lines now: remove it from ALLOWED_LONG"


# The analysis registry names functions by "module:function" strings (so listing it imports
# nothing): these are imports too, made when a command runs. The declarations may name only
# these packages: the analysis layer itself, the views that render a result (text) or draw its
# report section, and the side functions listed here, each with why.
REGISTRY_MAY_NAME = ("memlens.analysis.", "memlens.views.text.", "memlens.views.report.sections.")
REGISTRY_SIDE_FUNCTIONS = {
    "memlens.planning.advise": "advise --script verifies each finding by simulating the script "
    "(torch); without a script it runs only the torch-free analysis.advise_replays",
}


def _registry_references() -> list[tuple[str, str, str]]:
    """(analysis, field, module) for every string a builtin declaration names."""
    from memlens.analysis.declarations import BUILTIN

    out = []
    for analysis in BUILTIN:
        for field in ("function", "render", "check_fn", "section"):
            ref = getattr(analysis, field)
            if ref:
                out.append((analysis.name, field, ref.partition(":")[0]))
    return out


def test_registry_string_references_follow_the_layers():
    refs = _registry_references()
    assert any(f == "function" for _, f, _ in refs)
    bad = [
        f"{name}.{field} names {module}"
        for name, field, module in refs
        if not module.startswith(REGISTRY_MAY_NAME) and module not in REGISTRY_SIDE_FUNCTIONS
    ]
    assert not bad, (
        "a declaration in analysis/declarations.py names a module the analysis layer may not "
        f"reach (never cli): {bad}. Move the function into analysis/, or add it to "
        "REGISTRY_SIDE_FUNCTIONS with the reason"
    )
    for module in REGISTRY_SIDE_FUNCTIONS:
        assert module in {m for _, _, m in refs}, f"{module} is no longer named: drop it"
