"""The page's ES modules joined into one script, made when the app is made (issue 37).

Why: a browser opens at most six connections to one HTTP/1.1 server, so the page's 17
modules (and its stylesheet and /api/meta) came in three or four waves, each waiting for
the server's event loop (busy starting while the page loads); one script is one request. The modules stay as they
are (static/js/, checked by tsc and node's tests, served as before for the unbundled
static/index.html); this only rewrites the two statements they use between each other:

    import { a, b as c } from "./x.js";   ->  const { a, b: c } = __m3;
    export function f() / export const / export class / export async function

Each module becomes a function scope returning what the others import from it, in an
order where every module comes after those it imports (a cycle is refused, as
tests/test_architecture.py refuses it). The bindings the page imports are functions, classes and consts,
so a copy is the binding (anything else exported is refused here, as is any other form of
import or export: BundleError, met by the tests when the app is made).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from memlens.errors import MemlensError

# an import of named bindings from a relative module (prettier may break it over lines)
IMPORT = re.compile(r'^import \{([^}]*)\} from "(\.{1,2}/[^"]+\.js)";[ \t]*$', re.M)
IMPORT_NAME = re.compile(r"^([A-Za-z_$][\w$]*)(?:\s+as\s+([A-Za-z_$][\w$]*))?$")
# a declaration's `export ` keyword, dropped (its name is returned from the module's scope)
EXPORT = re.compile(r"^export (?=(?:async function|function|class|const) )", re.M)
ANY_IMPORT_EXPORT = re.compile(r"^(?:import|export)\b", re.M)


class BundleError(MemlensError):
    """A module uses an import or export form the bundle does not rewrite."""


def bundle(modules: dict[str, str], entry: str) -> str:
    """One ES module script running `entry` ("js/main.js", a key of `modules`: paths below
    static/ to sources) and every module it imports, each once."""
    order: list[str] = []
    parsed: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {}
    visiting: set[str] = set()

    def visit(path: str) -> None:
        if path in visiting:  # (parsed already, its imports not yet placed)
            raise BundleError(f"page modules: an import cycle through {path}")
        if path in parsed:
            return
        if path not in modules:
            raise BundleError(f"page modules: {path} is imported but not there")
        visiting.add(path)
        parsed[path] = imports = _imports(path, modules[path])
        for dep, _ in imports:
            visit(dep)
        visiting.discard(path)
        order.append(path)

    visit(entry)
    wanted: dict[str, set[str]] = {p: set() for p in order}
    for path in order:
        for dep, names in parsed[path]:
            wanted[dep].update(name for name, _ in names)
    var = {p: f"__m{i}" for i, p in enumerate(order)}
    parts = [
        "// memlens view: the page's modules (static/js/) in one script, made by the",
        "// server when it starts (memlens/views/web/bundle.py)",
    ]
    for path in order:
        parts.append(_scope(path, modules[path], var, parsed[path], sorted(wanted[path])))
    return "\n".join(parts) + "\n"


def _imports(path: str, source: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(imported module's path, [(name, local name)])] of one module, checked."""
    out = []
    for m in IMPORT.finditer(source):
        names = []
        for item in m.group(1).split(","):
            item = item.strip()
            if not item:  # a trailing comma
                continue
            found = IMPORT_NAME.match(item)
            if not found:
                raise BundleError(f"page modules: {path}: cannot read the import of {item!r}")
            names.append((found.group(1), found.group(2) or found.group(1)))
        dep = str(PurePosixPath(path).parent / m.group(2))
        out.append((_normal(dep), names))
    rest = EXPORT.sub("", IMPORT.sub("", source))
    other = ANY_IMPORT_EXPORT.search(rest)
    if other:
        line = rest[other.start() :].split("\n", 1)[0]
        raise BundleError(f"page modules: {path}: {line!r} is not a form the bundle rewrites")
    return out


def _normal(path: str) -> str:
    """js/pane/../api.js -> js/api.js"""
    parts: list[str] = []
    for part in PurePosixPath(path).parts:
        if part == "..":
            if not parts:
                raise BundleError(f"page modules: {path} is outside static/")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _scope(
    path: str,
    source: str,
    var: dict[str, str],
    imports: list[tuple[str, list[tuple[str, str]]]],
    exports: list[str],
) -> str:
    """A module as `const __mN = (() => { ... return { exports }; })();`."""
    deps = iter(imports)

    def rewrite(m: re.Match[str]) -> str:
        dep, names = next(deps)
        bound = ", ".join(name if name == local else f"{name}: {local}" for name, local in names)
        return f"const {{ {bound} }} = {var[dep]};"

    body = EXPORT.sub("", IMPORT.sub(rewrite, source)).rstrip("\n")
    return (
        f"// ---- {path}\nconst {var[path]} = (() => {{\n{body}\n"
        f"return {{ {', '.join(exports)} }};\n}})();"
    )
