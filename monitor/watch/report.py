"""The snapshot report: one JSON-able dict for `snapshot --json`, the agent's API, the TUI and recordings.

Field names here are a public interface (scripts parse them): add, never rename.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from monitor.diagnosis.energy import Energy, money, window_energy
from monitor.diagnosis.gpu_sharing import hidden_pids_note, processes_json
from monitor.text.capacity import capacity_words, headroom_words
from monitor.text.whatif import whatif_text
from monitor.window.scopes import engine_scope, gpu_scope
from monitor.window.stats import EngineWindow, GpuWindow, HostWindow, WindowStats

if TYPE_CHECKING:
    from monitor.diagnosis.verdict import Verdict

__all__ = ["build_report", "render_text", "error_line"]

REPORT_VERSION = 1


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(float(v), nd)


def gpu_json(g: GpuWindow) -> dict[str, Any]:
    return {
        "index": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "source": g.source,
        "util": _r(g.util),
        "sm_active": _r(g.sm_active),
        "sm_occupancy": _r(g.sm_occupancy),
        "tensor_active": _r(g.tensor_active),
        "dram_active": _r(g.dram_active),
        "fp16_active": _r(g.fp16_active),
        "fp32_active": _r(g.fp32_active),
        "mem_util": _r(g.mem_util),
        "power_watts": _r(g.power_watts, 1),
        "power_limit_watts": _r(g.power_limit_watts, 1),
        "sm_clock_hz": _r(g.sm_clock_hz, 0),
        "sm_clock_max_hz": _r(g.sm_clock_max_hz, 0),
        "throttle_reasons": list(g.throttle_reasons) if g.throttle_reasons is not None else None,
        "temperature_c": _r(g.temperature_c, 1),
        "memory_used_bytes": g.memory_used_bytes,
        "memory_total_bytes": g.memory_total_bytes,
        "pcie_tx_bytes_per_s": _r(g.pcie_tx_bytes_per_s, 0),
        "pcie_rx_bytes_per_s": _r(g.pcie_rx_bytes_per_s, 0),
        "nvlink_tx_bytes_per_s": _r(g.nvlink_tx_bytes_per_s, 0),
        "nvlink_rx_bytes_per_s": _r(g.nvlink_rx_bytes_per_s, 0),
        "mig_parent": g.mig_parent,
        "mig_instance": g.mig_instance,
        "scope": gpu_scope(g),
        "labels": dict(g.labels),
        "pcie_peak_bytes_per_s": _r(g.pcie_peak_bytes_per_s, 0),
        "driver_util": _r(g.driver_util),
        "util_note": util_note(g),
        "energy_joules": _r(g.energy_joules, 1),
        "energy_source": g.energy_source,
        "energy_joules_total": _r(g.energy_joules_total, 1),
    }


# Past this, headroom's duty cycle and nvidia-smi's differ enough that users ask why.
UTIL_NOTE_GAP = 0.2


def util_note(g: GpuWindow) -> str | None:
    """Why headroom's duty cycle and nvidia-smi's utilization.gpu differ, where they do."""
    if g.util is None or g.driver_util is None or abs(g.driver_util - g.util) <= UTIL_NOTE_GAP:
        return None
    if g.driver_util > g.util:
        pcie, peak = g.pcie_bytes_per_s, g.pcie_peak_bytes_per_s
        moving = (
            f" (PCIe moves {pcie / 1e9:.0f} GB/s{f' of {peak / 1e9:.0f}' if peak else ''})"
            if pcie
            else ""
        )
        return (
            f"nvidia-smi's utilization.gpu reads {100 * g.driver_util:.0f}% against headroom's "
            f"{100 * g.util:.0f}%: the driver counts copy-engine work as busy{moving}, "
            "headroom's duty cycle (GPM graphics activity) counts kernels only"
        )
    return (
        f"nvidia-smi's utilization.gpu reads {100 * g.driver_util:.0f}% against headroom's "
        f"{100 * g.util:.0f}%: the driver's is a point sample of a bursty load, headroom's "
        "covers the whole span"
    )


def engine_json(e: EngineWindow) -> dict[str, Any]:
    return {
        "url": e.url,
        "model_name": e.model_name,
        "engine": e.engine,
        "flavour": e.flavour,
        "flavour_version": e.flavour_version,
        # What the page lacks: a field here is unknown, not 0.
        "missing": [{"field": f, "looked_for": list(names)} for f, names in e.missing],
        "running": _r(e.running_mean, 3),
        "running_max": _r(e.running_max, 3),
        "waiting": _r(e.waiting_mean, 3),
        "waiting_max": _r(e.waiting_max, 3),
        "waiting_capacity": _r(e.waiting_capacity_mean, 3),
        "waiting_deferred": _r(e.waiting_deferred_mean, 3),
        "kv_cache_usage": _r(e.kv_cache_usage_mean),
        "kv_cache_usage_max": _r(e.kv_cache_usage_max),
        "preemptions_per_s": _r(e.preemptions_per_s),
        "generation_tokens_per_s": _r(e.generation_tokens_per_s, 2),
        "prompt_tokens_per_s": _r(e.prompt_tokens_per_s, 2),
        "requests_per_s": _r(e.requests_per_s),
        "admission_rejections_per_s": _r(e.admission_rejections_per_s),
        "ttft_p50_s": _r(e.ttft_p50_s, 5),
        "ttft_p95_s": _r(e.ttft_p95_s, 5),
        "itl_p50_s": _r(e.itl_p50_s, 6),
        "itl_p95_s": _r(e.itl_p95_s, 6),
        "tpot_mean_s": _r(e.tpot_mean_s, 6),
        "e2e_mean_s": _r(e.e2e_mean_s, 4),
        "e2e_p50_s": _r(e.e2e_p50_s, 4),
        "e2e_p95_s": _r(e.e2e_p95_s, 4),
        "queue_mean_s": _r(e.queue_mean_s, 5),
        "prefill_mean_s": _r(e.prefill_mean_s, 5),
        "decode_mean_s": _r(e.decode_mean_s, 5),
        "iteration_tokens_mean": _r(e.iteration_tokens_mean, 2),
        "flops_per_s": _r(e.flops_per_s, 0),
        "read_bytes_per_s": _r(e.read_bytes_per_s, 0),
        "write_bytes_per_s": _r(e.write_bytes_per_s, 0),
        "prefix_cache_hit_rate": _r(e.prefix_cache_hit_rate, 4),
        "cache_config": dict(e.cache_config),
        "samples": e.samples,
    }


# Summed over engines (data-parallel ranks, several servers): counts and rates add up.
_TOTALS = (
    ("running", "running_mean"),
    ("waiting", "waiting_mean"),
    ("generation_tokens_per_s", "generation_tokens_per_s"),
    ("prompt_tokens_per_s", "prompt_tokens_per_s"),
    ("requests_per_s", "requests_per_s"),
    ("preemptions_per_s", "preemptions_per_s"),
)


def engines_total(engines: Sequence[EngineWindow]) -> dict[str, Any] | None:
    """The sum over engines, or None for fewer than two. A figure some engine lacks is
    None: a partial sum would read as the whole."""
    if len(engines) < 2:
        return None
    out: dict[str, Any] = {"engines": len(engines)}
    for key, attr in _TOTALS:
        values = [getattr(e, attr) for e in engines]
        out[key] = None if any(v is None for v in values) else _r(sum(values), 3)
    return out


def host_json(h: HostWindow) -> dict[str, Any]:
    t = h.busiest_thread
    return {
        "cpu_count": h.cpu_count,
        "cpu_busy_ratio": _r(h.cpu_busy_ratio),
        "cpu_steal_ratio": _r(h.cpu_steal_ratio),
        "cpu_freq_mhz": _r(h.cpu_freq_mhz, 0),
        "cpu_freq_max_mhz": _r(h.cpu_freq_max_mhz, 0),
        "engine_cpu_cores": _r(h.engine_cpu_cores, 3),
        "busiest_thread": None
        if t is None
        else {"pid": t.pid, "tid": t.tid, "name": t.name, "cpu_ratio": _r(t.cpu_ratio)},
        "pids": list(h.pids),
    }


def energy_fields(en: Energy) -> dict[str, Any]:
    """What each engine is shown of the box's energy (see monitor.diagnosis.energy)."""
    return {
        "energy_per_token_joules": _r(en.joules_per_token, 5),
        "energy_per_request_joules": _r(en.joules_per_request, 3),
        "tokens_per_joule": _r(en.tokens_per_joule, 4),
        "cost_per_million_tokens": _r(en.cost_per_million_tokens, 4),
    }


def energy_note(en: Energy) -> str | None:
    if not en.missing:
        return None
    return (
        f"energy: no energy or power reading for {', '.join(en.missing)}; "
        "energy per token is not known (a dash, not 0)"
    )


def build_report(
    window: WindowStats,
    verdicts: Sequence[Verdict] = (),
    analyses: Mapping[str, Mapping[str, Any]] | None = None,
    notes: Sequence[str] = (),
    gpu_hour_price: float | None = None,
) -> dict[str, Any]:
    """The report for one window. ``analyses`` maps an engine's scope to the diagnosis's
    per-engine figures (Little's law, caps, roofline, busy fraction), placed under
    the engine's ``analysis`` key; the key ``box`` goes to the top level."""
    engines = []
    # The host source watches the engines' processes together: the hot thread's profile is
    # the box's, shown on each engine it serves (one, on a vLLM box).
    profile = window.cpu_profile.to_json() if window.cpu_profile is not None else None
    energy = window_energy(window, gpu_hour_price)
    for e in window.engines:
        ej = engine_json(e)
        ej.update(energy_fields(energy))
        ej["analysis"] = dict((analyses or {}).get(engine_scope(e), {}))
        if "requests_per_s" in ej["analysis"]:
            # The one request rate: null, not 0, where requests ran and none finished.
            ej["requests_per_s"] = ej["analysis"]["requests_per_s"]
        # Issue 18 names these at the engine's level, where scripts look first; the analysis
        # keeps them too (the TUI, the exporter and older scripts read them there).
        ej["ttft_parts"] = ej["analysis"].get("ttft_parts")
        ej["headroom"] = ej["analysis"].get("headroom")
        ej["whatif"] = ej["analysis"].get("whatif") or []
        ej["cpu_profile"] = profile
        engines.append(ej)
    return {
        "version": REPORT_VERSION,
        "time": window.wall_end,
        "window_s": round(window.duration_s, 3),
        "samples": window.samples,
        "gpus": [{**gpu_json(g), "processes": processes_json(g, window)} for g in window.gpus],
        "engines": engines,
        "engines_total": engines_total(window.engines),
        "host": host_json(window.host) if window.host is not None else None,
        "load": dict(window.load),
        "errors": [
            {"source": e.source, "target": e.target, "message": e.message} for e in window.errors
        ],
        "notes": list(notes) + [n for n in (hidden_pids_note(window), energy_note(energy)) if n],
        "energy": energy.to_json(),
        "box": dict((analyses or {}).get("box", {})),
        "cpu_profile": profile,
        "verdicts": [v.to_json() for v in verdicts],
    }


def process_rows(g: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One GPU's processes as table cells: pid, user, memory, SM, engine, container/pod, command."""
    rows = []
    for p in g.get("processes") or ():
        mem = "-" if p["memory_bytes"] is None else f"{p['memory_bytes'] / 2**30:.1f} GiB"
        sm = "-" if p["sm_share"] is None else f"{100 * p['sm_share']:.0f}%"
        who = p["engine"]
        who = "not visible" if who is None else "engine" if who != "other" else "other"
        where = p["container"] or "-"
        if p.get("pod"):
            where = f"{p['namespace']}/{p['pod']}"
        elif p.get("pod_uid"):
            where = f"pod {p['pod_uid'][:8]}"
        command = p["command"] or ("(another PID namespace)" if not p["visible"] else "-")
        rows.append((str(p["pid"]), p["user"] or "-", mem, sm, who, where, command))
    return rows


def process_lines(gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    if not any(g.get("processes") for g in gpus):
        return []
    out = ["", "GPU   pid      user       memory     SM  owner        container/pod   command"]
    for g in gpus:
        for pid, user, mem, sm, who, where, cmd in process_rows(g):
            gpu = g.get("scope", f"gpu:{g['index']}").removeprefix("gpu:")
            out.append(
                f"{gpu:<5} {pid:<8} {user[:10]:<10} {mem:>9} {sm:>4}  {who:<12} "
                f"{where[:15]:<15} {cmd[:60]}"
            )
    return out


def _fmt_ratio(v: Any) -> str:
    return "-" if v is None else f"{100 * v:5.1f}%"


def _fmt(v: Any, spec: str = ".3g", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _cap_how(a: Mapping[str, Any]) -> str:
    origin = a.get("seq_cap_origin")
    return f" {origin}" if origin else ""


def render_text(report: Mapping[str, Any]) -> str:
    """A readable table of one report, for `headroom snapshot` without --json."""
    lines: list[str] = [
        f"headroom snapshot: window {report['window_s']:.1f} s, {report['samples']} samples"
    ]
    gpus = report["gpus"]
    lines.append("")
    if gpus:
        lines.append(
            "GPU  name                      util  sm_act  occup  tensor   dram   power  memory"
        )
        for g in gpus:
            mem = "-"
            if g["memory_used_bytes"] is not None and g["memory_total_bytes"]:
                mem = f"{g['memory_used_bytes'] / 2**30:.1f}/{g['memory_total_bytes'] / 2**30:.0f} GiB"
            lines.append(
                f"{g['index']:<4} {g['name'][:24]:<24} {_fmt_ratio(g['util'])} {_fmt_ratio(g['sm_active'])} "
                f"{_fmt_ratio(g['sm_occupancy'])} {_fmt_ratio(g['tensor_active'])} {_fmt_ratio(g['dram_active'])} "
                f"{_fmt(g['power_watts'], '6.0f', ' W')}  {mem}"
            )
        lines += process_lines(gpus)
        line = energy_line(report.get("energy"))
        if line:
            lines.append(line)
    else:
        lines.append("GPUs: none read")
    lines.append("")
    if report["engines"]:
        lines.append(
            "engine                         running waiting (cap)   KV  preempt/s  gen tok/s  TTFT p50/p95   ITL p50"
        )
        for e in report["engines"]:
            label = f"{e['model_name']}/{e['engine']}"
            if label == "/":  # a server with no model or rank labels (TGI, llama.cpp)
                label = engine_title(e)
            label = label[:30]
            ttft = f"{_fmt(e['ttft_p50_s'], '.3f')}/{_fmt(e['ttft_p95_s'], '.3f')} s"
            lines.append(
                f"{label:<30} {_fmt(e['running'], '7.1f')} {_fmt(e['waiting'], '7.1f')} ({_fmt(e['waiting_capacity'], '.0f')}) "
                f"{_fmt_ratio(e['kv_cache_usage'])} {_fmt(e['preemptions_per_s'], '9.2f')} {_fmt(e['generation_tokens_per_s'], '10.1f')}  "
                f"{ttft:<16} {_fmt(e['itl_p50_s'], '.4f', ' s')}"
            )
            lines.append(f"  {e['url']}  ({engine_title(e)})")
            if e.get("missing"):
                lines.append(f"  missing: {missing_text(e)}")
            a = e.get("analysis") or {}
            if a:
                none = a.get("littles_unjudged") == "none-finished"
                lines.append(f"  headroom {headroom_words(a.get('headroom'), none)}")
                lines.append(f"  capacity {capacity_words(a, _cap_how(a))}")
            for u in e.get("analysis", {}).get("unjudged", []):
                lines.append(f"  cannot judge {u['cause']}: {u['why']}")
            for w in (e.get("whatif") or [])[:2]:
                lines.append(f"  what-if: {whatif_text(w)}")
        total = report.get("engines_total")
        if total:
            lines.append(
                f"{'total (' + str(total['engines']) + ' engines)':<30} {_fmt(total['running'], '7.1f')} "
                f"{_fmt(total['waiting'], '7.1f')}     {'':>6} {_fmt(total['preemptions_per_s'], '9.2f')} "
                f"{_fmt(total['generation_tokens_per_s'], '10.1f')}"
            )
    else:
        lines.append("engines: none read")
    host = report.get("host")
    if host:
        lines.append("")
        busiest = host["busiest_thread"]
        bt = (
            "-"
            if busiest is None
            else f"{busiest['name']} (pid {busiest['pid']}) {_fmt_ratio(busiest['cpu_ratio'])} of a core"
        )
        lines.append(
            f"host: {host['cpu_count']} CPUs, busy {_fmt_ratio(host['cpu_busy_ratio'])}, steal {_fmt_ratio(host['cpu_steal_ratio'])}, "
            f"engine {_fmt(host['engine_cpu_cores'], '.2f', ' cores')}, busiest thread {bt}"
        )
    if report.get("verdicts"):
        lines.append("")
        lines.append("diagnosis:")
        for v in report["verdicts"]:
            lines.append(f"  [{v['cause']}] {v['scope']}  confidence {v['confidence']:.2f}")
            lines.append(f"    {v['summary']}")
            ev = ", ".join(_evidence_text(x) for x in v["evidence"] if "profile" not in x)
            if ev:
                lines.append(f"    evidence: {ev}")
            for x in v["evidence"]:
                if "profile" in x:
                    lines += ["    " + ln for ln in profile_lines(x["profile"])]
            lines.append(f"    fix: {v['fix']}")
            if v.get("next"):
                lines.append(f"    next: {v['next']}")
    shown = any("profile" in x for v in report.get("verdicts", ()) for x in v["evidence"])
    engine_profile = report.get("cpu_profile")
    if engine_profile and not shown:
        lines.append("")
        lines += profile_lines(engine_profile)
    for err in report["errors"]:
        lines.append(f"! {error_line(err)}")
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def energy_line(en: Mapping[str, Any] | None) -> str | None:
    """The box's energy and cost in one line: "energy: 412 W (4.1 kJ over 10.0 s, counter);
    0.052 J/token, 19.2 tokens/J, 5.31 J/request; $1.35 per million tokens at $2.50/GPU-hour"."""
    if not en or not en.get("gpus"):
        return None
    if en.get("energy_joules") is None:
        missing = en.get("missing") or ()
        if missing:
            return f"energy: - (no energy or power reading for {', '.join(missing)})"
        return "energy: - (the window holds fewer than two readings)"
    out = (
        f"energy: {_fmt(en['power_watts'], '.0f', ' W')} ({en['energy_joules'] / 1000:.1f} kJ "
        f"over {en['window_s']:.1f} s, {en['source']}); "
        f"{_fmt(en['joules_per_token'], '.3g', ' J/token')}, "
        f"{_fmt(en['tokens_per_joule'], '.3g', ' tokens/J')}, "
        f"{_fmt(en['joules_per_request'], '.3g', ' J/request')}"
    )
    price = en.get("gpu_hour_price")
    if price is not None:
        cost = en.get("cost_per_million_tokens")
        out += (
            f"; {money(cost) if cost is not None else '-'} per million tokens at "
            f"{money(price)}/GPU-hour"
        )
    return out


_FIELD_TEXT = {
    "running": "running",
    "waiting": "waiting",
    "kv_cache_usage": "KV",
    "preemptions": "preemptions",
    "prompt_tokens": "prompt tokens",
    "generation_tokens": "generated tokens",
    "requests_completed": "completions",
    "ttft": "TTFT",
    "itl": "ITL",
    "e2e_latency": "e2e latency",
    "queue_time": "queue time",
    "prefix_cache_hits": "prefix-cache hits",
    "step_tokens": "tokens per step",
}


def field_text(name: str) -> str:
    return _FIELD_TEXT.get(name, name)


def missing_text(e: Mapping[str, Any]) -> str:
    """One line: 'KV (none exported); TTFT (looked for vllm:time_to_first_token_seconds)'."""
    parts = []
    for m in e.get("missing", []):
        names = m["looked_for"]
        why = "looked for " + ", ".join(names) if names else "none exported"
        parts.append(f"{field_text(m['field'])} ({why})")
    return "; ".join(parts)


_SHORT = {"running": "running", "waiting": "waiting", "kv_cache_usage": "KV", "ttft": "TTFT"}
_GAUGE = {"running": "running gauge", "waiting": "queue gauge", "kv_cache_usage": "KV gauge"}


def engine_title(e: Mapping[str, Any]) -> str:
    """ "TGI 1.0-3.x": the engine and the releases its names matched."""
    from monitor.sources.metric_names import table

    t = table(e.get("flavour") or "", e.get("flavour_version"))
    if t is None:
        return str(e.get("flavour") or "engine")
    # No version (a recording from before versions were kept): claim no release range.
    return t.label if e.get("flavour_version") else t.title


def missing_notes(e: Mapping[str, Any]) -> list[str]:
    """One line per headline field the engine's page lacks: "KV -: TGI 1.0-3.x exports no KV gauge"."""
    out = []
    for m in e.get("missing", []):
        short = _SHORT.get(m["field"])
        if short is None:
            continue
        what = _GAUGE.get(m["field"], "histogram")
        if m["looked_for"]:
            out.append(f"{short} -: {', '.join(m['looked_for'])} not on the page")
        else:
            out.append(f"{short} -: {engine_title(e)} exports no {what}")
    return out


def error_line(err: Mapping[str, Any]) -> str:
    """One line for a source error; the target is named once even when the message names it too."""
    if err["target"] and err["target"] in err["message"]:
        return f"{err['source']}: {err['message']}"
    return f"{err['source']} {err['target']}: {err['message']}".replace("  ", " ")


def _evidence_text(e: Mapping[str, Any]) -> str:
    v = "n/a" if e["value"] is None else f"{e['value']:.3g}"
    if e.get("threshold") is None or not e.get("op"):
        return f"{e['name']}={v}"
    return f"{e['name']}={v} {e['op']} {e['threshold']:.3g}"


def profile_lines(p: Mapping[str, Any], top: int = 10) -> list[str]:
    """A CPU profile as a table: the thread, then its top functions by own time."""
    name = p.get("thread") or f"thread {p.get('tid')}"
    out = [
        f"cpu profile: {name} (pid {p['pid']}, tid {p.get('tid')}), {p['samples']} samples "
        f"over {p['seconds']:g} s at {p.get('rate')}/s (py-spy, non-blocking)",
        "   self  total  function (file:line)",
    ]
    for f in p["functions"][:top]:
        out.append(
            f"  {100 * f['self_share']:4.0f}%  {100 * f['total_share']:4.0f}%  "
            f"{f['function']} ({f['file']}:{f['line']})"
        )
    kinds = p.get("kinds") or {}
    if kinds:
        out.append("  by kind: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in kinds.items()))
    for note in p.get("notes", ()):
        out.append(f"  note: {note}")
    return out
