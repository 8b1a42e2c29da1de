"""The scope strings verdicts, the exporter and the TUI use to name what a verdict is about."""

from __future__ import annotations

from monitor.window.stats import EngineWindow, GpuWindow


def engine_scope(e: EngineWindow) -> str:
    return f"engine:{e.model_name}/{e.engine}@{e.url}"


def gpu_label(g: GpuWindow) -> str:
    """The GPU as the exporter's ``gpu`` label names it: "0", or "0/mig:1" for GPU 0's MIG
    GPU instance 1 (a MIG instance's own index is its slot, which would clash with GPU 1's)."""
    if g.mig_parent is not None:
        mig = g.mig_instance if g.mig_instance is not None else g.index
        return f"{g.mig_parent}/mig:{mig}"
    return str(g.index)


def gpu_scope(g: GpuWindow) -> str:
    return f"gpu:{gpu_label(g)}"


BOX_SCOPE = "box"
