"""The JSON of `memlens capabilities --json`, one TypedDict per object of its section in
docs/json-schema.md (tests/analysis/test_json_schema.py checks the two field by field)."""

from __future__ import annotations

from typing import Literal, TypedDict

JsonType = Literal["integer", "number", "boolean", "string"]


class _Choices(TypedDict, total=False):
    choices: list[str]  # only for a fixed set of values


class ParamInfo(_Choices):
    name: str
    kind: Literal["option", "argument"]
    flags: list[str]
    metavar: str
    type: JsonType
    multiple: bool
    required: bool
    default: object
    help: str | None


class _Subcommands(TypedDict, total=False):
    commands: list[CommandInfo]  # only for a group (`memlens skill`)


class CommandInfo(_Subcommands):
    name: str
    summary: str
    json: bool
    params: list[ParamInfo]


class Capabilities(TypedDict):
    memlens: str
    schemas: dict[str, int]
    global_options: list[ParamInfo]
    commands: list[CommandInfo]
    mcp_tools: list[str]
    skill_hosts: list[str]
    features: dict[str, bool]
