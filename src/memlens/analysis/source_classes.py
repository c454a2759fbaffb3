"""The nn.Module class a frame runs in, read from the program's source: the class whose method
(named as the frame is) encloses the frame's line. A snapshot names functions, never classes,
so `memlens advise` reads the source to say which class to checkpoint.

The frame's own path is read when it exists here. A recording made elsewhere names paths of
another machine (/home/alice/proj/pkg/model.py): the file is then looked for under the given
source roots by the path's trailing parts, the longest match first (pkg/model.py before
model.py), so a checkout of the same code anywhere answers. A file whose line does not fall in
a function of the frame's name is taken for other code (another version) and answers nothing:
a wrong class is worse than none.
"""

from __future__ import annotations

import ast
import functools
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# how many trailing parts of a recorded path are tried (pkg/sub/model.py ... model.py)
MAX_TRAILING_PARTS = 4
# files read when looking under a root: a source tree, not a disk
MAX_FILES_SCANNED = 50_000
# a source file larger than this is not parsed (a snapshot names any path it likes)
MAX_SOURCE_BYTES = 4 << 20


@dataclass(frozen=True)
class SourceClass:
    name: str  # the class, e.g. "TransformerBlock"
    path: str  # the file it was read from (here)
    line: int  # the class statement's line


def _is_source(path: str) -> bool:
    """A regular .py file of a sane size: never a device, a FIFO or /proc (a path named by a
    snapshot is untrusted: reading /dev/zero or a FIFO would hang)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return path.endswith(".py") and stat.S_ISREG(st.st_mode) and st.st_size <= MAX_SOURCE_BYTES


@functools.lru_cache(maxsize=256)
def _tree(path: str) -> ast.Module | None:
    if not _is_source(path):
        return None
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        return ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=64)
def _files_under(root: str) -> dict[str, list[str]]:
    """basename -> paths of the .py files under `root` (bounded walk, no hidden folders)."""
    out: dict[str, list[str]] = {}
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for f in files:
            if f.endswith(".py"):
                out.setdefault(f, []).append(os.path.join(folder, f))
                seen += 1
                if seen >= MAX_FILES_SCANNED:
                    return out
    return out


def locate(filename: str, roots: Sequence[str]) -> list[str]:
    """Readable files that may be `filename`: itself, then files under `roots` ending with its
    longest trailing parts (several when equally long: each is tried)."""
    if not filename.endswith(".py") or "\0" in filename:
        return []
    if _is_source(filename):
        return [filename]
    parts = Path(filename).parts
    for n in range(min(MAX_TRAILING_PARTS, len(parts)), 0, -1):
        tail = os.path.join(*parts[-n:])
        found = [
            p
            for root in roots
            if os.path.isdir(root)
            for p in _files_under(os.path.abspath(root)).get(parts[-1], [])
            if p.endswith(os.sep + tail) or p == tail
        ]
        if found:
            return sorted(set(found))
    return []


def _enclosing(tree: ast.Module, line: int, name: str) -> SourceClass | None:
    """The class whose method `name` encloses `line` (the innermost such method)."""
    best: tuple[int, ast.ClassDef] | None = None

    def walk(node: ast.AST, cls: ast.ClassDef | None) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = child.end_lineno or child.lineno
                if child.lineno <= line <= end:
                    innermost = best is None or child.lineno >= best[0]
                    if cls is not None and child.name == name and innermost:
                        best = (child.lineno, cls)
                    walk(child, None)  # a nested function is not the class's method
            else:
                walk(child, cls)

    walk(tree, None)
    if best is None:
        return None
    return SourceClass(best[1].name, "", best[1].lineno)


def class_of_frame(
    filename: str, line: int, name: str, roots: Sequence[str] = ()
) -> SourceClass | None:
    """The class whose method `name` encloses `filename:line`, or None (no source here, or
    the line is not in such a method). Several candidate files must agree."""
    answers = set()
    for path in locate(filename, roots):
        tree = _tree(path)
        found = None if tree is None else _enclosing(tree, line, name)
        if found is not None:
            answers.add(SourceClass(found.name, path, found.line))
    names = {a.name for a in answers}
    return min(answers, key=lambda a: a.path) if len(names) == 1 else None


def _in_loop(tree: ast.Module, line: int) -> bool:
    """Whether `line` runs in a loop of its function (for/while, a comprehension): a module
    called there is called once per iteration, a repeated block."""
    loops = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.GeneratorExp, ast.SetComp)
    for node in ast.walk(tree):
        if isinstance(node, loops):
            body = node.body if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else [node]
            start = (
                body[0].lineno
                if isinstance(node, (ast.For, ast.AsyncFor, ast.While))
                else node.lineno
            )
            end = max((getattr(b, "end_lineno", None) or b.lineno) for b in body)
            if start <= line <= end:
                return True
    return False


def line_in_loop(filename: str, line: int, roots: Sequence[str] = ()) -> bool:
    paths = locate(filename, roots)
    trees = [t for t in (_tree(p) for p in paths) if t is not None]
    return bool(trees) and all(_in_loop(t, line) for t in trees)


Frame = tuple[str, int, str]  # (filename, line, function name), innermost first in a stack


def repeated_block(
    frames: Sequence[Frame], roots: Sequence[str] = (), skip: str = os.sep + "torch" + os.sep
) -> str | None:
    """The module class to checkpoint for an allocation made under `frames` (innermost first):
    the outermost class whose forward is called in a loop (a model's `for layer in
    self.layers`), else the class just inside the outermost one (the model), else the only
    one. Frames under `skip` (torch's own modules) name no class, but their loops count
    (nn.Sequential calls its children in one)."""
    chain: list[tuple[int, str]] = []  # (frame index, class), innermost first
    for k, (filename, line, name) in enumerate(frames):
        if name != "forward" or skip in filename:
            continue
        found = class_of_frame(filename, line, name, roots)
        if found is not None:
            chain.append((k, found.name))
    if not chain:
        return None
    outermost_first = chain[::-1]
    for (outer_k, _), (inner_k, inner) in zip(outermost_first, outermost_first[1:]):
        # the frames from the outer forward's call line down to the inner forward's caller
        if any(
            line_in_loop(frames[k][0], frames[k][1], roots) for k in range(inner_k + 1, outer_k + 1)
        ):
            return inner
    return outermost_first[1][1] if len(outermost_first) > 1 else outermost_first[0][1]
