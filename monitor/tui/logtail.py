"""Keep log lines off the terminal while the UI owns it, and hand them back afterwards."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator
from contextlib import contextmanager

KEEP = 50


class _Tail(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: collections.deque[str] = collections.deque(maxlen=KEEP)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        # A failing source logs every tick: keep one copy of each line.
        if line not in self.lines:
            self.lines.append(line)


@contextmanager
def captured_logs() -> Iterator[collections.deque[str]]:
    """While inside, root log handlers writing to a stream are swapped for an in-memory tail."""
    root = logging.getLogger()
    swapped = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
    swapped = [h for h in swapped if not isinstance(h, logging.FileHandler)]
    tail = _Tail()
    for h in swapped:
        root.removeHandler(h)
    root.addHandler(tail)
    try:
        yield tail.lines
    finally:
        root.removeHandler(tail)
        for h in swapped:
            root.addHandler(h)
