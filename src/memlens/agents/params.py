"""Options as JSON: the JSON Schema of an MCP tool's input and the conversion of a tool's
arguments by the same click types the command line uses (so `top="x"` fails as `--top x`
does), for a registered analysis's declared `Option`s (memlens.analysis.registry) and
for the click parameters of the other commands; and what `memlens capabilities --json`
lists for each option of a command."""

from __future__ import annotations

from typing import Any

import click

from memlens.agents.results import JsonType, ParamInfo
from memlens.analysis.registry import Option
from memlens.errors import MemlensError

# click type -> JSON Schema type; anything else (paths, text) is a string
_JSON_TYPES: dict[type[click.ParamType[Any]], JsonType] = {
    click.types.IntParamType: "integer",
    click.types.FloatParamType: "number",
    click.types.BoolParamType: "boolean",
}


def json_type(param: click.Parameter) -> JsonType:
    if isinstance(param, click.Option) and param.is_flag:
        return "boolean"
    for kind, name in _JSON_TYPES.items():
        if isinstance(param.type, kind):
            return name
    return "string"


def is_many(param: click.Parameter) -> bool:
    return param.multiple or param.nargs == -1


# click 8.3+ marks "no default" with a sentinel instead of None
_UNSET = getattr(click.core, "UNSET", None)


def default_of(command: click.Command, param: click.Parameter) -> Any:
    """The value the command gets when the option is not given: None, a flag False, a
    repeatable option an empty list."""
    value = param.get_default(click.Context(command), call=True)
    if value is _UNSET:
        value = None
    if is_many(param):
        return list(value or ())
    if value is None and isinstance(param, click.Option) and param.is_flag:
        return False
    return value


def describe(command: click.Command, param: click.Parameter) -> ParamInfo:
    """One parameter as `memlens capabilities --json` lists it."""
    option = isinstance(param, click.Option)
    info: ParamInfo = {
        "name": str(param.name),
        "kind": "option" if option else "argument",
        "flags": [*param.opts, *param.secondary_opts] if option else [],
        "metavar": param.make_metavar(click.Context(command)),
        "type": json_type(param),
        "multiple": is_many(param),
        "required": param.required,
        "default": None if param.required else default_of(command, param),
        "help": getattr(param, "help", None),
    }
    if isinstance(param.type, click.Choice):
        info["choices"] = [str(c) for c in param.type.choices]
    return info


def schema_property(command: click.Command, param: click.Parameter) -> dict[str, Any]:
    """The JSON Schema of one option as a tool argument."""
    item: dict[str, Any] = {"type": json_type(param)}
    if isinstance(param.type, click.Choice):
        item["enum"] = [str(c) for c in param.type.choices]
    prop = {"type": "array", "items": item} if is_many(param) else dict(item)
    help_text = getattr(param, "help", None)
    if help_text:
        prop["description"] = " ".join(help_text.split())
    default = default_of(command, param)
    if default is not None and default != []:
        prop["default"] = default
    return prop


def convert(command: click.Command, param: click.Parameter, value: Any) -> Any:
    """A tool argument (None: not given) as the command line would hand it to the command:
    converted and checked by the option's click type, else its default."""
    if value is None:
        default = default_of(command, param)
        return tuple(default) if is_many(param) else default
    if is_many(param):
        if not isinstance(value, list):
            value = [value]
        return tuple(_one(command, param, v) for v in value)
    if isinstance(value, list):
        raise MemlensError(f"{param.name}: takes one value, not a list")
    return _one(command, param, value)


def _one(command: click.Command, param: click.Parameter, value: Any) -> Any:
    return _as(str(param.name), param.type, value)


# Option.describe()'s types as JSON Schema's (paths and text are strings)
_SCHEMA_TYPES: dict[str, JsonType] = {"int": "integer", "float": "number", "bool": "boolean"}


def option_property(o: Option) -> dict[str, Any]:
    """The JSON Schema of a declared option as a tool argument, from its description
    (Option.describe(), what `memlens capabilities` says of it)."""
    d = o.describe()
    item: dict[str, Any] = {"type": _SCHEMA_TYPES.get(d["type"], "string")}
    if "choices" in d:
        item["enum"] = d["choices"]
    prop = {"type": "array", "items": item} if d.get("multiple") else dict(item)
    if d["help"]:
        prop["description"] = " ".join(d["help"].split())
    if d["default"] not in (None, []) and not d["required"]:
        prop["default"] = d["default"]
    return prop


def convert_option(o: Option, value: Any) -> Any:
    """A tool argument (None: not given) as the command line would hand the declared
    option to the command: converted and checked by the click type it has there."""
    if value is None:
        return tuple(o.default or ()) if o.multiple else o.default
    kind = click.Choice(o.choices) if o.choices else click.types.convert_type(o.type)
    if o.multiple:
        return tuple(_as(o.name, kind, v) for v in (value if isinstance(value, list) else [value]))
    if isinstance(value, list):
        raise MemlensError(f"{o.name}: takes one value, not a list")
    return _as(o.name, kind, value)


def _as(name: str, kind: click.ParamType[Any], value: Any) -> Any:
    if isinstance(value, (dict, list)):
        raise MemlensError(f"{name}: {type(value).__name__} is not a valid value")
    try:
        return kind.convert(value, None, None)
    except click.BadParameter as exc:
        raise MemlensError(f"{name}: {exc.message}") from None
