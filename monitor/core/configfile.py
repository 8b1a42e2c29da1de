"""Read one TOML or YAML settings file into a mapping; every failure is one ConfigError line."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_settings_file(path: str | Path, label: str) -> Mapping[str, Any]:
    """The file's top-level table; ``label`` starts each error line (e.g. "config FILE")."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    suffix = p.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".toml":
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"{label}: unknown config format (use .toml, .yaml or .yml)")
    except ConfigError:
        raise
    except Exception as exc:  # the parsers' own errors: one line, no traceback
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{label}: not valid {suffix[1:].upper()}: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{label}: expected a table of settings at the top level")
    return data
