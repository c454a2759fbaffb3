"""The bundled skill (skill/SKILL.md) and where each agent host reads one.

| host | user scope | project scope |
|---|---|---|
| claude (Claude Code) | ~/.claude/skills/memlens/SKILL.md | .claude/skills/memlens/SKILL.md |
| codex (Codex CLI) | ~/.agents/skills/memlens/SKILL.md | .agents/skills/memlens/SKILL.md |
| cursor | (none: user rules live in Cursor's settings) | .cursor/rules/memlens.mdc |
| agents (the shared location) | ~/.agents/skills/memlens/SKILL.md | .agents/skills/memlens/SKILL.md |

Codex reads the shared Agent Skills locations (~/.agents/skills, and .agents/skills from
the working folder up to the repository's root), so `codex` and `agents` write the same
file. Cursor reads rules, not skills: the same text with the rule's front matter (its
description, applied when relevant rather than always). docs/agents.md gives the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memlens.agents.resources import SKILL
from memlens.agents.safe_write import write_below
from memlens.errors import MemlensError

HOSTS = ("claude", "codex", "cursor", "agents")
SCOPES = ("user", "project")

_DIRS = {"claude": ".claude/skills", "codex": ".agents/skills", "agents": ".agents/skills"}


@dataclass(frozen=True)
class Place:
    host: str
    scope: str
    path: Path
    base: Path  # the home or project folder: nothing below it is written through a link

    def state(self) -> str:
        """ "installed" (this version's text), "outdated" (another text), or "absent"."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return "absent"
        return "installed" if text == skill_text(self.host) else "outdated"


def default_scope(host: str) -> str:
    return "project" if host == "cursor" else "user"


def place(host: str, scope: str, *, home: Path | None = None, project: Path | None = None) -> Place:
    """Where `host` reads the skill at `scope` (user: under `home`, project: under `project`,
    by default the home folder and the current folder)."""
    if host not in HOSTS:
        raise MemlensError(f"unknown host {host!r}: one of {', '.join(HOSTS)}")
    if scope not in SCOPES:
        raise MemlensError(f"unknown scope {scope!r}: user or project")
    base = (home or Path.home()) if scope == "user" else (project or Path.cwd())
    if host == "cursor":
        if scope == "user":
            raise MemlensError(
                "cursor reads rules per project (.cursor/rules); its user rules live in "
                "Cursor's settings, not in a file: use --scope project"
            )
        return Place(host, scope, base / ".cursor" / "rules" / "memlens.mdc", base)
    return Place(host, scope, base / _DIRS[host] / "memlens" / "SKILL.md", base)


def places(*, home: Path | None = None, project: Path | None = None) -> list[Place]:
    """Every location a skill can be installed at (for `memlens skill list`)."""
    return [
        place(h, s, home=home, project=project)
        for h in HOSTS
        for s in SCOPES
        if not (h == "cursor" and s == "user")
    ]


def bundled() -> str:
    try:
        return SKILL.read_text(encoding="utf-8")
    except OSError as exc:  # a broken install: the package data is missing
        raise MemlensError(f"the bundled skill is missing ({SKILL}): reinstall memlens") from exc


def skill_text(host: str) -> str:
    """The skill as `host` reads it: SKILL.md, or for cursor a rule (.mdc) with the same
    body and the rule's own front matter."""
    text = bundled()
    if host != "cursor":
        return text
    _, front, body = text.split("---\n", 2)
    description = next(
        line.split(":", 1)[1].strip()
        for line in front.splitlines()
        if line.startswith("description:")
    )
    return f"---\ndescription: {description}\nglobs:\nalwaysApply: false\n---\n{body}"


def install(target: Place) -> str:
    """Write the skill at `target`; answers what was done: installed, updated, unchanged."""
    before = target.state()
    if before == "installed":
        return "unchanged"
    try:
        write_below(target.base, target.path, skill_text(target.host))
    except OSError as exc:
        raise MemlensError(f"cannot write {target.path}: {exc.strerror or exc}") from None
    return "updated" if before == "outdated" else "installed"
