"""What a registered analysis is: `Analysis` (one question: its function, result type,
renderer, options, report section) and `Option` (one of its options); the options every
host shares (DEVICE, HIDE, ...), declared once; and the one request path every host takes:
`request` (a host's option values, checked before any load), `open` (references to
inputs, with the host's loader) and `call` (devices picked, the function run). The
registry of analyses, and its public API, is memlens.analysis.registry."""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    existing: bool = False  # a path that must exist, a file or a folder (--annotations)

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


# The options every host (the CLI, the MCP tools) shares, declared once: each host spells
# them from here (cli.options.click_option, agents.params.option_property), in --help order.
DEVICE = Option("device", int, None, "Device ordinal (default: the device with the longest trace).",
                flag="--device", short="-d")  # fmt: skip
DEVICE_B = Option("device_b", int, None, "Device of B when it differs from --device.")
HIDE = Option("hide", str, (),
              "Filename pattern to skip when naming the call site (repeatable), added to the "
              "defaults: torch, the stdlib and thin glue (einops, accelerate's hooks, "
              "bitsandbytes, ...), which yields to the line that called it.",
              multiple=True, metavar="REGEX")  # fmt: skip
HIDE_ONLY = Option("hide_only", str, (),
                   "Like --hide, but instead of the default patterns (repeatable). "
                   "--hide-only '' shows every frame.", multiple=True, metavar="REGEX")  # fmt: skip
ANNOTATIONS = Option("annotation_files", str, (),
                     "Add stages from PATH (repeatable): a `memlens.inspect` run directory (each "
                     "sampled forward pass, with its activation bytes) or a JSON list of "
                     '{"name", "stage": "START"|"END", "time_us"} entries.',
                     multiple=True, flag="--annotations", metavar="PATH", existing=True)  # fmt: skip
NO_CACHE = Option(
    "no_cache", bool, False, "Do not read or write the column cache (MEMLENS_CACHE_DIR)."
)
JSON = Option("as_json", bool, False, "Print one JSON object (schema: docs/json-schema.md).",
              flag="--json")  # fmt: skip
# the keyword of `run` that --hide and --hide-only become (analysis.sites.hide_patterns)
HIDE_PATTERNS = Option("hide_patterns", str, None,
                       "Filename patterns to skip when naming the call site (None: torch "
                       "internals, stdlib; [] shows every frame).", multiple=True)  # fmt: skip


def host_options(
    opens: str, device_help: str = DEVICE.help, hide: bool = True, annotations: bool = False
) -> list[Option]:
    """The shared options a command that `opens` its inputs so takes, in --help order
    (--json is the CLI's own: the MCP tools always answer JSON)."""
    out = [*([DEVICE_B] if opens == "pair" else []), *([HIDE, HIDE_ONLY] if hide else [])]
    out += [*([ANNOTATIONS] if annotations else []), NO_CACHE]
    return [Option(**{**DEVICE.__dict__, "help": device_help}), *out]


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
    check_fn:    "module:function": check(options) raises MemlensError for bad values;
                 every host calls it (through `check`) before reading any snapshot
    fails_unless: a result key whose false value means failure (exit 1)
    section:     "module:SECTION", its report section (views.report.context.Section)
    example:     options of a run on a small trace, for the registry test (a path
                 option's value is the file's text: the test writes it to a file)
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
    example: Mapping[str, Any] = field(default_factory=dict)

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
        """The keywords of `run` every analysis of its kind takes: `device` (and
        `device_b` for a pair), and `hide_patterns` when it names call sites."""
        out = [Option(**{**DEVICE.__dict__, "help": self.device_help})]
        if self.opens == "pair":
            out.append(DEVICE_B)
        if self.hide:
            out.append(HIDE_PATTERNS)
        return out

    def all_options(self) -> list[Option]:
        """The keywords of `run`: its own options, then the shared ones."""
        return [*self.options, *self.shared_options()]

    def host_options(self) -> list[Option]:
        """What a host offers: its own options, then the shared ones as the CLI spells
        them (--hide and --hide-only for `hide_patterns`, --annotations, --no-cache)."""
        shared = host_options(self.opens, self.device_help, self.hide, self.annotations)
        return [*self.options, *shared]

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

    def request(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """`run`'s checked values from a host's values of host_options(): --hide and
        --hide-only become `hide_patterns`; --no-cache and --annotations are the host
        loader's, not the analysis's, and are left out. MemlensError before any load."""
        from memlens.analysis.sites import hide_patterns

        loader = {NO_CACHE.name, ANNOTATIONS.name, HIDE.name, HIDE_ONLY.name}
        values = {k: v for k, v in given.items() if k not in loader}
        if self.hide:
            values["hide_patterns"] = hide_patterns(
                given.get("hide", ()), given.get("hide_only", ())
            )
        return self.check(values)

    def open(
        self, refs: Sequence[Any], load: Callable[[str], Any], values: dict[str, Any]
    ) -> list[Any]:
        """The inputs `call` takes, from the references `run` takes as inputs: a path (a
        str or os.PathLike) is opened with the host's `load(path) -> Snapshot` (the CLI's
        loader, the MCP session's, memlens.load); anything else (a Snapshot, a
        DeviceTrace, a (name, Snapshot) pair of "many") is kept. Options of kind "snapshot"
        in `values` are opened the same way, in place. The devices are picked in `call`."""

        def one(ref: Any) -> Any:
            return load(os.fspath(ref)) if isinstance(ref, (str, os.PathLike)) else ref

        for o in self.options:
            if o.kind == "snapshot" and values.get(o.name) is not None:
                values[o.name] = one(values[o.name])
        return open_refs(self.name, self.opens, refs, one)

    def run(self, *inputs: Any, **options: Any) -> R:
        """The result `memlens NAME --json` prints, from the inputs (see `opens`): opened
        objects, or snapshot paths (read with memlens.load)."""
        from memlens.snapshot.loader import load

        values = self.check(options)
        return self.call(self.open(inputs, load, values), values)

    def run_paths(self, paths: str | Sequence[str], *, cache: bool = True, **options: Any) -> R:
        """`run` on snapshot file(s): one path, or a list for "pair" and "many"."""
        from memlens.snapshot.loader import load

        values = self.check(options)
        refs = [paths] if isinstance(paths, str) else refs_of(self.opens, paths)
        return self.call(self.open(refs, lambda p: load(p, cache=cache), values), values)

    def call(self, inputs: list[Any], values: dict[str, Any]) -> R:
        """`run` with opened `inputs` (see `open`) and `values` from check() (all of them;
        `values` is consumed): here, and only here, A's and B's devices are picked."""
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


def refs_of(opens: str, paths: Any) -> list[Any]:
    """The inputs of `run` as references, from the paths a command line gives: SNAPSHOT,
    (SNAPSHOT, SNAPSHOT2) for "pair", [SNAPSHOTS...] for "many"."""
    return list(paths) if opens == "pair" else [paths]


def open_refs(name: str, opens: str, refs: Sequence[Any], one: Callable[[Any], Any]) -> list[Any]:
    """The inputs by `opens`, each reference opened with `one(ref)`: one input, two for
    "pair", a list of (name, Snapshot) for "many"."""
    wanted = 2 if opens == "pair" else 1
    if len(refs) != wanted:
        raise MemlensError(f"{name} takes {wanted} input(s), not {len(refs)}")
    if opens == "many":
        return [[r if isinstance(r, tuple) else (_label(r), one(r)) for r in refs[0]]]
    return [one(r) for r in refs]


def _label(ref: Any) -> str:
    """The name of one of "many"'s inputs: its path, or a Snapshot's source."""
    return os.fspath(ref) if isinstance(ref, (str, os.PathLike)) else str(ref.source)
