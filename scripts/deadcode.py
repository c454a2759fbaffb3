"""Dead code in src/memlens (scripts/check.sh): functions, methods, classes, properties,
imports and module-level constants nothing uses, found with vulture.

Run over src only, so code that only the tests call counts as dead too. Not reported:
fields (TypedDict keys, dataclass fields: their readers are JSON consumers), names that
frameworks call (IGNORE_NAMES), names the analysis registry names in "module:function"
strings (analysis/declarations.py), and the reasoned exceptions of WHITELIST.

    python3 scripts/deadcode.py        # exit 1 and one line per dead name
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "memlens"
WHITELIST = ROOT / "scripts" / "deadcode_whitelist.py"
KINDS = {"function", "method", "class", "property", "import"}
# called by a framework or by Python, never by name in our code
IGNORE_NAMES = [
    "do_*",  # textual actions (BINDINGS name them as strings)
    "on_*",  # textual events; trainer callbacks' hooks
    "compose",
    "render_line",
    "_repr_html_",  # Jupyter
    "_render_traceback_",  # IPython
    "__getattr__",  # module-level lazy attributes (PEP 562)
    "__dir__",
    "__call__",  # Python's protocols
    "__instancecheck__",
    "find_class",  # pickle.Unpickler
    "persistent_load",
    "readable",  # io.RawIOBase
    "list_commands",  # click.Group
    "get_command",
]
# registered by their decorator: click's commands and groups
IGNORE_DECORATORS = ["@*.command", "@*.group", "@click.command", "@click.group"]
# "memlens.analysis.peak:peak_output": a registry declaration naming its function
REGISTERED = re.compile(r"""["'][\w.]*:(\w+)["']""")


def registered_names() -> set[str]:
    return {m for p in SRC.rglob("*.py") for m in REGISTERED.findall(p.read_text())}


def module_constant(path: Path, line: int, name: str) -> bool:
    """`NAME = ...` at the top level (not a parameter, not a field)."""
    return re.match(rf"{name}\s*[:=]", path.read_text().splitlines()[line - 1]) is not None


def dead() -> list[str]:
    v = Vulture(ignore_names=IGNORE_NAMES, ignore_decorators=IGNORE_DECORATORS)
    v.scavenge([str(SRC), str(WHITELIST)])
    registered = registered_names()
    out = []
    for item in v.get_unused_code(min_confidence=60):
        path = Path(item.filename)
        if item.name in registered:
            continue
        line = item.first_lineno
        if item.typ in KINDS or (item.typ == "variable" and module_constant(path, line, item.name)):
            out.append(f"{path.relative_to(ROOT)}:{line}: unused {item.typ} {item.name!r}")
    return out


def main() -> int:
    found = dead()
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} dead names: delete them, or say in {WHITELIST.name} who uses them")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
