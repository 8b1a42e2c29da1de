"""The immutable state every widget draws from: the latest report and a short history of reports."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.tui import fmt

Report = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class View:
    report: Report | None = None
    # Oldest first, the latest last; each a frozen report.
    history: tuple[Report, ...] = ()
    # The feed's own failure (agent unreachable), shown while the last report stays up.
    feed_error: str | None = None
    position: tuple[int, int] | None = None
    notes: tuple[str, ...] = field(default=())
    # The app's sparkline columns, kept across its views (None: worked out each time).
    column_cache: fmt.ColumnCache | None = field(default=None, compare=False, repr=False)

    def gpus(self) -> Sequence[Report]:
        return self.report.get("gpus", ()) if self.report else ()

    def engines(self) -> Sequence[Report]:
        return self.report.get("engines", ()) if self.report else ()

    def gpu(self, index: int) -> Report | None:
        return next((g for g in self.gpus() if g.get("index") == index), None)

    def engine(self, key: str) -> Report | None:
        return next((e for e in self.engines() if fmt.engine_key(e) == key), None)

    def gpu_series(self, index: int, name: str) -> list[float | None]:
        return fmt.series(self.history, _pick_gpu(index, name))

    def engine_series(self, key: str, name: str, in_analysis: bool = False) -> list[float | None]:
        return fmt.series(self.history, _pick_engine(key, name, in_analysis))

    def columns(self, values: Sequence[float | None]) -> list[float | None]:
        """A series over the history as sparkline columns (fmt.columns): one per whole span."""
        return fmt.columns([r.get("time") for r in self.history], values)

    def gpu_columns(self, index: int, name: str) -> list[float | None]:
        """``columns(gpu_series(index, name))``, from the app's cache where there is one."""
        return self._columns(("gpu", index, name), _pick_gpu(index, name))

    def engine_columns(self, key: str, name: str) -> list[float | None]:
        """``columns(engine_series(key, name))``, from the app's cache where there is one."""
        return self._columns(("engine", key, name), _pick_engine(key, name, False))

    def host_columns(self, name: str) -> list[float | None]:
        """A host figure's sparkline columns, from the app's cache where there is one."""
        return self._columns(("host", name), _pick_host(name))

    def _columns(self, key: Any, pick: Callable[[Report], Any]) -> list[float | None]:
        if self.column_cache is None:
            return self.columns(fmt.series(self.history, pick))
        return self.column_cache(key, self.history, pick)

    def errors_for(self, sources: Sequence[str]) -> list[Report]:
        if not self.report:
            return []
        return [e for e in self.report.get("errors", ()) if e.get("source") in sources]


def _pick_gpu(index: int, name: str) -> Callable[[Report], Any]:
    def pick(rep: Report) -> Any:
        for g in rep.get("gpus", ()):
            if g.get("index") == index:
                return g.get(name)
        return None

    return pick


def _pick_engine(key: str, name: str, in_analysis: bool) -> Callable[[Report], Any]:
    def pick(rep: Report) -> Any:
        for e in rep.get("engines", ()):
            if fmt.engine_key(e) == key:
                return (e.get("analysis") or {}).get(name) if in_analysis else e.get(name)
        return None

    return pick


def _pick_host(name: str) -> Callable[[Report], Any]:
    def pick(rep: Report) -> Any:
        return (rep.get("host") or {}).get(name)

    return pick


GPU_SOURCES = ("nvml", "dcgm", "dcgm-exporter", "gpm")
ENGINE_SOURCES = ("vllm", "engine", "sglang", "tgi")
HOST_SOURCES = ("host",)
