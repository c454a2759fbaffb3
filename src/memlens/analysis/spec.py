"""What a registered analysis is: `Analysis` (one question: its function, result type,
renderer, options, report section) and `Option` (one of its options). The registry of them,
and its public API, is memlens.analysis.registry."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from memlens.errors import MemlensError

Opens = Literal["device", "snapshot", "pair", "many"]
R = TypeVar("R")
# a renderer returns the text for stdout, or (line, to_stderr) pairs (a failed budget
# goes to stderr so CI logs show it)
Text = str | list[tuple[str, bool]]


@dataclass(frozen=True)
class Option:
    """One option of an analysis: a keyword of `run` and a CLI option (or argument)."""

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None
    multiple: bool = False
    kind: Literal["value", "argument", "snapshot"] = "value"
    flag: str = ""  # CLI spelling; default "--" + name with "-" for "_"
    short: str | None = None
    secondary: str | None = None  # a bool's "off" spelling: "--no-blocks"
    metavar: str | None = None
    show_default: bool = False
    path: bool = False  # a file path (a CLI argument or a "snapshot" option always is)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def describe(self) -> dict[str, Any]:
        """JSON-able: name, type, default, help (and choices, multiple when set)."""
        out: dict[str, Any] = {
            "name": self.name,
            "type": "path" if self.path or self.kind != "value" else self.type.__name__,
            "default": list(self.default) if isinstance(self.default, tuple) else self.default,
            "help": self.help,
            "required": self.kind == "argument",
        }
        if self.choices:
            out["choices"] = list(self.choices)
        if self.multiple:
            out["multiple"] = True
        return out


def _symbol(ref: str) -> Any:
    """ "package.module:name" -> the object (the module is imported on first use)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


# options every analysis shares (per its `opens` and `hide`), in --help order
DEVICE = Option("device", int, None, "Device ordinal (default: the device with the longest trace).",
                flag="--device", short="-d")  # fmt: skip
DEVICE_B = Option("device_b", int, None, "Device of B when it differs from --device.")
HIDE = Option("hide_patterns", str, None,
              "Filename patterns to skip when naming the call site (None: torch internals, "
              "stdlib; [] shows every frame).", multiple=True, flag="--hide", metavar="REGEX")  # fmt: skip
SHOW_INTERNAL = Option("show_internal", bool, False,
                       "Keep internal frames in the tree: torch's own code (nn.Module's _call_impl, "
                       "the optimizer's wrapper), the stdlib, and what --hide names.")  # fmt: skip


@dataclass(frozen=True)
class Analysis(Generic[R]):
    """One question memlens answers. Strings name what is imported only when used:

    name:        the command, `memlens NAME`
    help:        one line, the question it answers (docs/analyses.md's list, capabilities)
    doc:         the command's --help text (default: help)
    function:    "module:function": function(*inputs, **options) -> R, where options are
                 the declared ones by name, plus `device` (opens "snapshot"/"many") and
                 `hide_patterns` (when `hide`)
    result_type: its result, a TypedDict R (documented in docs/json-schema.md)
    render:      "module:function": render(result, options) -> Text, for the CLI
    options:     its own options (see Option), listed first in --help
    opens:       what it reads (see the module docstring)
    hide:        takes --hide patterns (hide_patterns)
    annotations: takes --annotations files (the CLI adds them to the snapshot)
    device_help: what --device means for it
    check:       "module:function": check(options) raises MemlensError for bad values;
                 the CLI calls it before reading any snapshot
    fails_unless: a result key whose false value means failure (exit 1)
    section:     "module:SECTION", its report section (views.report.context.Section)
    """

    name: str
    help: str
    function: str
    result_type: type[R]
    render: str
    options: tuple[Option, ...] = ()
    opens: Opens = "device"
    hide: bool = True
    annotations: bool = False
    device_help: str = DEVICE.help
    check_fn: str | None = None
    fails_unless: str | None = None
    section: str | None = None
    doc: str = ""
    # deprecated option names run() still accepts: (old, new) pairs
    aliases: tuple[tuple[str, str], ...] = (("limit", "top"),)

    @property
    def function_obj(self) -> Callable[..., R]:
        fn: Callable[..., R] = _symbol(self.function)
        return fn

    @property
    def renderer(self) -> Callable[[R, Mapping[str, Any]], Text]:
        fn: Callable[[R, Mapping[str, Any]], Text] = _symbol(self.render)
        return fn

    @property
    def report_section(self) -> Any:
        return _symbol(self.section) if self.section else None

    def shared_options(self) -> list[Option]:
        out = [Option(**{**DEVICE.__dict__, "help": self.device_help})]
        if self.opens == "pair":
            out.append(DEVICE_B)
        if self.hide:
            out.append(HIDE)
        return out

    def all_options(self) -> list[Option]:
        return [*self.options, *self.shared_options()]

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.all_options()}

    def check(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options with defaults filled (a deprecated alias such as limit= becomes its
        option, with a DeprecationWarning); MemlensError for an unknown or bad one."""
        known = self.defaults()
        values = dict(known)
        aliases = dict(self.aliases)
        for key, value in options.items():
            if key in aliases and aliases[key] in known:
                warnings.warn(
                    f"{self.name}: {key}= is deprecated, use {aliases[key]}=",
                    DeprecationWarning,
                    stacklevel=3,
                )
                key = aliases[key]
            if key not in known:
                raise MemlensError(f"{self.name} has no option {key!r} ({', '.join(known)})")
            values[key] = value
        if self.check_fn is not None:
            _symbol(self.check_fn)(values)
        return values

    def run(self, *inputs: Any, **options: Any) -> R:
        """The result `memlens NAME --json` prints, from opened inputs (see `opens`)."""
        return self.call(list(inputs), self.check(options))

    def run_paths(self, paths: str | Sequence[str], *, cache: bool = True, **options: Any) -> R:
        """`run` on snapshot file(s): one path, or a list for "pair" and "many"."""
        from memlens.snapshot.loader import load

        values = self.check(options)
        return self.call(open_inputs(self, paths, lambda p: load(p, cache=cache)), values)

    def call(self, inputs: list[Any], values: dict[str, Any]) -> R:
        """`run` with `values` from check() (all of them; `values` is consumed). An option
        of kind "snapshot" given as a path is loaded here."""
        for o in self.options:
            if o.kind == "snapshot" and isinstance(values[o.name], str):
                from memlens.snapshot.loader import load

                values[o.name] = load(values[o.name])
        device, device_b = values.pop("device"), values.pop("device_b", None)
        if self.opens == "device":
            inputs = [_trace(inputs[0], device)]
        elif self.opens == "pair":
            b_device = device_b if device_b is not None else device
            inputs = [_trace(inputs[0], device), _trace(inputs[1], b_device)]
        else:
            values["device"] = device
        return self.function_obj(*inputs, **values)

    def exit_code(self, result: Any) -> int:
        return 1 if self.fails_unless is not None and not result[self.fails_unless] else 0


def _trace(obj: Any, device: int | None) -> Any:
    """A Snapshot's trace of `device` (default the longest); a DeviceTrace as it is."""
    return obj.device(device) if hasattr(obj, "traces") else obj


def open_inputs(analysis: Analysis[Any], paths: Any, load: Callable[[str], Any]) -> list[Any]:
    """The inputs `run` takes, opened from paths with `load(path) -> Snapshot`."""
    if analysis.opens == "many":
        return [[(p, load(p)) for p in paths]]
    if analysis.opens == "pair":
        return [load(paths[0]), load(paths[1])]
    return [load(paths if isinstance(paths, str) else paths[0])]
