"""The scope strings verdicts, the exporter and the TUI use to name what a verdict is about."""

from __future__ import annotations

from monitor.window import EngineWindow, GpuWindow


def engine_scope(e: EngineWindow) -> str:
    return f"engine:{e.model_name}/{e.engine}@{e.url}"


def gpu_scope(g: GpuWindow) -> str:
    return f"gpu:{g.index}"


BOX_SCOPE = "box"
