"""A GPU the engine shares with other processes: evidence on its verdicts, and `contended`.

Another process's memory on the engine's GPU is context for every verdict on that GPU (it
is KV cache the engine did not get). Where that process also runs kernels, its SM time is
time the engine's kernels wait: the GPU may read saturated while the engine gets a part of
it, so `contended` leads the saturations on that GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from monitor.diagnosis.gpu_sharing import Sharing, sharing
from monitor.diagnosis.rule_kit import Context, ev, make_verdict, pct
from monitor.diagnosis.verdict import Evidence, Verdict
from monitor.sources.samples import GpuProcess
from monitor.window.scopes import gpu_label, gpu_scope
from monitor.window.stats import GpuWindow

_FIX = (
    "give the engine its GPU to itself: move the other process to another GPU "
    "(CUDA_VISIBLE_DEVICES, or the scheduler's GPU request); where sharing is meant, split "
    "the GPU with MIG, or MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, so the engine's share "
    "is fixed"
)


def _who(p: GpuProcess) -> str:
    if not p.visible:
        return f"pid {p.pid} (not visible here)"
    name = (p.command or "").split(" ")[0].rsplit("/", 1)[-1] or "?"
    where = (
        f", pod {p.namespace}/{p.pod}"
        if p.pod
        else (f", container {p.container}" if p.container else "")
    )
    return f"pid {p.pid} ({name}{where})"


def contended(ctx: Context, g: GpuWindow) -> Verdict | None:
    """The engine holds this GPU and processes outside its tree take SM time on it."""
    share = sharing(g, ctx.window)
    if share is None or not share.engine or not share.strangers:
        return None
    other_sm = share.stranger_sm_share
    if other_sm is None or other_sm < ctx.th.contended_sm_min:
        return None
    busiest = max(share.strangers, key=lambda p: p.sm_share or 0.0)
    engine_sm = share.engine_sm_share
    took = f"the engine's processes {pct(engine_sm)}" if engine_sm is not None else "the engine"
    return make_verdict(
        "contended",
        0.85,
        gpu_scope(g),
        [
            ev("other_sm_share", other_sm, ctx.th.contended_sm_min, ">=", "ratio"),
            ev("engine_sm_share", engine_sm, unit="ratio"),
            ev("other_processes", len(share.strangers)),
            ev("other_memory_bytes", share.stranger_memory_bytes, unit="B"),
            ev("util", g.util, unit="ratio"),
        ],
        _FIX,
        f"Contended: GPU {gpu_label(g)} is shared; {_who(busiest)} and "
        f"{len(share.strangers) - 1} other(s) outside the engine take {pct(other_sm)} of its "
        f"time with their kernels, beside {took}.",
    )


def _sharing_evidence(share: Sharing) -> list[Evidence]:
    return [
        ev("other_processes", len(share.strangers)),
        ev("other_memory_bytes", share.stranger_memory_bytes, unit="B"),
        ev("other_sm_share", share.stranger_sm_share, unit="ratio"),
    ]


def with_sharing_evidence(ctx: Context, verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Each verdict on a GPU the engine shares carries the others' memory and SM share."""
    extra: dict[str, list[Evidence]] = {}
    for g in ctx.window.gpus:
        share = sharing(g, ctx.window)
        if share is not None and share.engine and share.strangers:
            extra[gpu_scope(g)] = _sharing_evidence(share)
    out = []
    for v in verdicts:
        more = extra.get(v.scope)
        if more and v.cause != "contended":
            v = dataclasses.replace(v, evidence=v.evidence + tuple(more))
        out.append(v)
    return out
