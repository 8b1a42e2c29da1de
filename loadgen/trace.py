"""``--trace FILE``: a request log to replay open-loop, in the Mooncake layout.

One JSON object a line: ``timestamp`` (when the request arrived), ``input_length`` and
``output_length`` (tokens) and optionally ``hash_ids``, the ids of the prompt's blocks
(requests naming the same id share that block of prompt, so a prefix cache can reuse
it). Replayed at ``--speed X``, entry i is sent at ``(timestamp_i - timestamp_0) / X``
after the replay starts, however many requests are still open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from monitor.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TraceEntry:
    at: float  # seconds after the trace's first entry
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


def _int(obj: dict, key: str, where: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1:
        raise ConfigError(f"--trace {where}: {key!r} must be a positive number, not {v!r}")
    return int(v)


def load_trace(path: str | Path, time_unit: float = 1.0) -> list[TraceEntry]:
    """The entries, times in seconds from the first; ``time_unit`` is seconds per timestamp unit."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--trace {p}: cannot read it ({exc})") from None
    entries: list[TraceEntry] = []
    first: float | None = None
    last: float | None = None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(line)
        except ValueError:
            raise ConfigError(f"--trace {where}: not JSON") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"--trace {where}: expected an object")
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            raise ConfigError(f"--trace {where}: 'timestamp' must be a number, not {ts!r}")
        t = float(ts) * time_unit
        if last is not None and t < last:
            raise ConfigError(
                f"--trace {where}: timestamp {ts} goes backwards (the line before was at "
                f"{last / time_unit:g}); a trace must be in arrival order"
            )
        hashes = obj.get("hash_ids") or []
        if not isinstance(hashes, list) or not all(isinstance(h, int) for h in hashes):
            raise ConfigError(f"--trace {where}: 'hash_ids' must be a list of integers")
        first = t if first is None else first
        last = t
        entries.append(
            TraceEntry(
                t - first,
                _int(obj, "input_length", where),
                _int(obj, "output_length", where),
                tuple(hashes),
            )
        )
    if not entries:
        raise ConfigError(f"--trace {p}: no requests in it")
    return entries


def span_s(entries: list[TraceEntry]) -> float:
    return entries[-1].at if entries else 0.0


def mean_rate(entries: list[TraceEntry]) -> float:
    """Requests per second at speed 1 (all at once counts as that many in one second)."""
    span = span_s(entries)
    if len(entries) < 2 or span <= 0:
        return float(len(entries))
    return (len(entries) - 1) / span
