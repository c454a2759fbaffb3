"""The documents the MCP server offers as resources: the JSON schema of every answer, the
concepts (baseline, active vs reserved, ...) and the skill.

A wheel carries copies of the two docs under memlens/agents/docs/ (setup.py copies them at
build time, so docs/ stays their one source); a source checkout reads docs/ itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memlens.errors import MemlensError

HERE = Path(__file__).resolve().parent
SKILL = HERE / "skill" / "SKILL.md"


@dataclass(frozen=True)
class Resource:
    uri: str
    name: str
    description: str
    path: Path

    def text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise MemlensError(f"{self.uri}: cannot read {self.path}: {exc.strerror}") from None


def doc_path(name: str) -> Path:
    packaged = HERE / "docs" / name
    return packaged if packaged.is_file() else HERE.parents[2] / "docs" / name


RESOURCES = [
    Resource(
        "memlens://docs/json-schema.md",
        "json-schema",
        "The JSON of every memlens answer, field by field.",
        doc_path("json-schema.md"),
    ),
    Resource(
        "memlens://docs/concepts.md",
        "concepts",
        "How memlens reads a snapshot: baseline, active vs reserved, peaks, stacks.",
        doc_path("concepts.md"),
    ),
    Resource(
        "memlens://skill/SKILL.md",
        "skill",
        "When and how to use memlens to debug GPU memory (the bundled skill).",
        SKILL,
    ),
]
