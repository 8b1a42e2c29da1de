"""Where headroom writes what the user did not name a place for: the XDG state directory.

Recordings made with `r` and the demo's sweeps once landed in the current
directory and /tmp; they belong with the user's other application state.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def state_dir() -> Path:
    """``$XDG_STATE_HOME/headroom`` (default ``~/.local/state/headroom``), not created."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "headroom"


def new_state_path(kind: str, prefix: str, suffix: str = "") -> Path:
    """A fresh, timestamped path under the state directory's ``kind`` folder (created)."""
    folder = state_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{prefix}-{stamp}{suffix}"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{prefix}-{stamp}-{n}{suffix}"
    return path
