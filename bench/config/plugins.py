"""Your own implementations and cases, without editing this repository: `python -m bench
plugins=[MODULE, ...]` imports each MODULE (an importable name, or a path to a .py file) before
the configuration is composed and the plan made. A plugin calls bench.registry.register_impl
(an Impl for an existing case) or register_case (a new Case, with its own knobs); what it adds
gets the same float64 check, timing, metrics and report as the built-in ones (docs/harness.md,
"Your own implementation"). An error while a plugin loads names the plugin.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path


class PluginError(ValueError):
    pass


def load(names) -> list[str]:
    """Imports each plugin once (a second load of the same one does nothing); -> the module
    names."""
    out = []
    for name in [str(n) for n in names or []]:
        try:
            out.append(_import(name))
        except PluginError:
            raise
        except BaseException as exc:  # a plugin's own error, whatever it is, names the plugin
            if isinstance(exc, KeyboardInterrupt):
                raise
            first = (str(exc).strip().splitlines() or [""])[0]
            raise PluginError(f"plugins: {name}: {type(exc).__name__}: {first}") from exc
    return out


def _import(name: str) -> str:
    if not name.endswith(".py"):
        return importlib.import_module(name).__name__
    path = Path(name).resolve()
    if not path.is_file():
        raise PluginError(f"plugins: {name}: no such file")
    module = f"bench_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if module not in sys.modules:
        spec = importlib.util.spec_from_file_location(module, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[module]
            raise
    return module


def named_in(argv: list[str]) -> list[str]:
    """The plugins a command line names (plugins=[a,b] or plugins=a)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for arg in argv:
        if arg.split("=", 1)[0].lstrip("+~") == "plugins" and "=" in arg:
            value = OverridesParser.create().parse_overrides([arg.lstrip("+~")])[0].value()
            return [str(v) for v in (value if isinstance(value, list) else [value])]
    return []
