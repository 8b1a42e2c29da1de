"""Imports run one way, down: headroom/ -> loadgen/ -> monitor/, and inside monitor/ from
the faces down to the readers (docs-pending/rooms.md draws the rooms).

Every import is read with ast, those inside functions and under TYPE_CHECKING included: a
lazy import that points up is still a cycle waiting to happen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A room may import its own modules and those of rooms on a lower level, never one on its
# own level or above (the two faces, serve and tui, do not import each other).
LEVELS: dict[str, int] = {
    "core": 0,  # errors, paths, the settings-file reader
    "text": 0,  # words every face shares
    "sources": 1,  # read the hardware and the engines into samples
    "window": 2,  # samples -> per-GPU/engine/host statistics
    "profiling": 2,  # py-spy stacks of the engine's hot threads
    "fleet": 2,  # many agents' series read back from Prometheus
    "read": 3,  # the sampler's ring of snapshots, recordings
    "diagnosis": 4,  # a window in, verdicts and figures out
    "watch": 5,  # the Monitor every face holds, and its report
    "serve": 6,  # the agent, its exporter and API
    "tui": 6,  # the terminal UI
}
# Top-level packages: each may import those listed, and nothing else of ours.
PACKAGES: dict[str, set[str]] = {
    "monitor": set(),
    "loadgen": {"monitor"},
    "headroom": {"loadgen", "monitor", "simulator"},
    "simulator": set(),
}


def _module(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path, root: Path) -> Iterator[tuple[int, list[str]]]:
    """Each import in the file as (line, dotted target split), relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module(path, root)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            # "from monitor import diagnosis" imports the room diagnosis
            if target == ["monitor"]:
                for alias in node.names:
                    yield node.lineno, ["monitor", alias.name]
            else:
                yield node.lineno, target


def violations(root: Path) -> list[str]:
    """Every import that points up or sideways, as "file:line: imports target (why)"."""
    found: list[str] = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root)
            here = _module(path, root)
            if pkg == "monitor" and len(here) == 2 and path.name != "__init__.py":
                found.append(f"{rel}: a module loose in monitor/; it belongs in a room")
                continue
            room = here[1] if pkg == "monitor" and len(here) > 1 else None
            if pkg == "monitor" and len(here) > 1 and here[1] not in LEVELS:
                found.append(f"{rel}: room {here[1]!r} has no level in tests/core/test_layout.py")
                continue
            for line, target in _imports(path, root):
                top = target[0]
                where = f"{rel}:{line}: imports {'.'.join(target)}"
                if top in PACKAGES and top != pkg and top not in PACKAGES[pkg]:
                    found.append(f"{where} ({pkg}/ must not import {top}/)")
                elif top == "monitor" == pkg and room is not None and len(target) > 1:
                    other = target[1]
                    if other == room:
                        continue
                    if other not in LEVELS:
                        found.append(f"{where} (not a room)")
                    elif LEVELS[other] >= LEVELS[room]:
                        found.append(f"{where} (room {room} must not import {other}: not below it)")
    return found


def test_imports_run_one_way_down() -> None:
    assert violations(ROOT) == []


def test_every_room_of_monitor_has_a_level() -> None:
    rooms = {p.name for p in (ROOT / "monitor").iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(LEVELS)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
    return tmp_path


def test_an_upward_import_is_named(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "monitor/__init__.py": "",
            "monitor/sources/__init__.py": "",
            "monitor/sources/nvml.py": "def f():\n    from monitor.diagnosis import verdict\n",
            "monitor/diagnosis/__init__.py": "",
            "monitor/diagnosis/rules.py": "from ..watch import report\nfrom monitor import tui\n",
            "monitor/tui/__init__.py": "from monitor.serve import agent\n",
            "monitor/window/__init__.py": "from monitor.window import full\nimport monitor.sources.nvml\n",
            "loadgen/sweep.py": "import headroom.cli\n",
            "monitor/loose.py": "",
        },
    )
    assert violations(root) == [
        "monitor/diagnosis/rules.py:1: imports monitor.watch (room diagnosis must not import watch: not below it)",
        "monitor/diagnosis/rules.py:2: imports monitor.tui (room diagnosis must not import tui: not below it)",
        "monitor/loose.py: a module loose in monitor/; it belongs in a room",
        "monitor/sources/nvml.py:2: imports monitor.diagnosis (room sources must not import diagnosis: not below it)",
        "monitor/tui/__init__.py:1: imports monitor.serve (room tui must not import serve: not below it)",
        "loadgen/sweep.py:1: imports headroom.cli (loadgen/ must not import headroom/)",
    ]
