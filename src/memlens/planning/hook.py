"""`memlens plan --sweep-hook FILE.py:FUNCTION` (or `MODULE:FUNCTION`): for a script
configured neither by its arguments nor by environment variables (a config file, say).

The function is called here, in the planning process, once per point, before anything
runs: `FUNCTION(values, args)` with the point's `--sweep` values ({name: value}, all
strings) and the script's own arguments (a list), and returns a dict with `"args"` (the
script's arguments at that point; default: `args` as given) and/or `"env"` ({name: value}
set for the script on top of the inherited environment). What it returns is the point's
cache key, with the script's bytes: a hook that writes a config file should name the file
after its content (or run with --no-cache), and with --scheduler the file must be where the
workers see it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError


def _module(where: str, spec: str) -> Any:
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise MemlensError(f"--sweep-hook {spec!r}: no such file: {where}")
        name = "memlens_sweep_hook_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        found = importlib.util.spec_from_file_location(name, path)
        if found is None or found.loader is None:
            raise MemlensError(f"--sweep-hook {spec!r}: cannot load {where}")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        return module
    return importlib.import_module(where)


@dataclass(frozen=True)
class Hook:
    spec: str
    function: Callable[..., Any]

    @classmethod
    def load(cls, spec: str) -> Hook:
        where, sep, name = spec.rpartition(":")
        if not sep or not where or not name.isidentifier():
            raise MemlensError(
                f"--sweep-hook {spec!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION"
            )
        try:
            module = _module(where, spec)
        except MemlensError:
            raise
        except Exception as exc:  # the user's module failed to import: say why, in one line
            raise MemlensError(f"--sweep-hook {spec!r}: {type(exc).__name__}: {exc}") from None
        function = getattr(module, name, None)
        if not callable(function):
            raise MemlensError(f"--sweep-hook {spec!r}: {where} has no function {name}")
        return cls(spec, function)

    def call(self, values: dict[str, str], args: list[str]) -> tuple[list[str], dict[str, str]]:
        """(the script's arguments, its extra environment) at the point of `values`."""
        try:
            out = self.function(dict(values), list(args))
        except Exception as exc:
            raise MemlensError(
                f"--sweep-hook {self.spec} at {values}: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(out, dict) or not set(out) <= {"args", "env"}:
            raise MemlensError(
                f"--sweep-hook {self.spec} at {values}: return a dict with 'args' and/or 'env'"
            )
        argv = out.get("args", args)
        env = out.get("env", {})
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise MemlensError(f"--sweep-hook {self.spec} at {values}: 'args' must be [str]")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise MemlensError(f"--sweep-hook {self.spec} at {values}: 'env' must be {{str: str}}")
        return list(argv), dict(env)
