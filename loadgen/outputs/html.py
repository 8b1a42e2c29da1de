"""report.html: one self-contained file (plots inlined as base64), readable offline."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from loadgen.analysis import load_of
from loadgen.schema import StepResult, SweepResult

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.l{text-align:left}.bad{color:#b00}.box{background:#f7f7f7;padding:1em;border-radius:6px}
img{max-width:100%;margin:0.5em 0}code{background:#f3f3f3;padding:1px 4px}
tr.knee td{font-weight:bold;background:#fff4e0}.note{font-size:13px;color:#444;max-width:900px}
"""


def _f(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _e(v) -> str:
    return html.escape(str(v))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _tokens_note(s: StepResult) -> str:
    if not s.tokens_off:
        return ""
    parts = [f"{name} {_pct(off)}" for name, off in (("prompt", s.prompt_tokens_off),
             ("completion", s.completion_tokens_off)) if off is not None]  # fmt: skip
    return "served tokens off what was asked: " + ", ".join(parts)


def _traffic_table(result: SweepResult, unit: str) -> list[str]:
    """What each step sent against what was served, and the figures only some traffic has."""
    steps = sorted(result.steps, key=load_of)
    if not any(s.served_prompt_tokens_mean is not None or s.prefix_cache_hit_rate is not None
               or s.ttft_sched_p50_s is not None or s.ttft_p50_by_turn for s in steps):  # fmt: skip
        return []
    w = result.config.worker
    how = [f"lengths counted by {w.token_source}" if w.token_source else "approximate lengths"]
    if w.prefix_tokens:
        how.append(f"{w.prefix_groups} shared prefix(es) of {w.prefix_tokens} tokens")
    if w.turns > 1:
        how.append(f"sessions of {w.turns} turns, {w.think_time_s:g} s think time")
    if w.trace_file:
        how.append(f"trace {Path(w.trace_file).name}")
    heads = ["#", unit, "prompt asked", "prompt served", "completion asked", "completion served",
             "prefix-cache hits", "TTFT from schedule p50", "p99", "e2e from schedule p50", "p99",
             "lateness p99", "TTFT p50 by turn"]  # fmt: skip
    out = [f"<h2>Traffic</h2><p>{_e('; '.join(how))}</p><table><tr>",
           "".join(f"<th>{_e(h)}</th>" for h in heads) + "</tr>"]  # fmt: skip
    for s in steps:
        bad = " class='bad'" if s.tokens_off else ""
        cells = [
            s.index, _f(load_of(s), "g"), _f(s.requested_prompt_tokens_mean, ".1f"),
            _f(s.served_prompt_tokens_mean, ".1f"), _f(s.requested_completion_tokens_mean, ".1f"),
            _f(s.served_completion_tokens_mean, ".1f"),
            _hits(s.prefix_cache_hit_rate, w.shares_prefixes),
            _f(s.ttft_sched_p50_s, ".4f"), _f(s.ttft_sched_p99_s, ".4f"),
            _f(s.e2e_sched_p50_s, ".3f"), _f(s.e2e_sched_p99_s, ".3f"), _f(s.sched_lag_p99_s, ".4f"),
            " / ".join(f"{k}: {v:.3f}" for k, v in (s.ttft_p50_by_turn or {}).items()) or "-",
        ]  # fmt: skip
        out.append(f"<tr{bad}>" + "".join(f"<td>{_e(x)}</td>" for x in cells) + "</tr>")
    out.append("</table>")
    return out


def _rps(s: StepResult) -> str:
    """Requests finished per second; a dash where none finished in the hold."""
    return "-" if s.requests_completed == 0 else _f(s.requests_per_s, ".2f")


def _hits(rate: float | None, prefixes: bool) -> str:
    """The prefix-cache hit rate; a dash for 0% where no prompts could share a prefix."""
    if rate is None or (rate == 0 and not prefixes):
        return "-"
    return f"{100 * rate:.0f}%"


def render_html(result: SweepResult, plots: list[Path]) -> str:
    c = result.config
    sat = result.saturation
    unit = "concurrency" if c.mode == "closed" else "rate (req/s)"
    sat_load = sat.concurrency if c.mode == "closed" else sat.rate
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>headroom sweep</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>headroom sweep of {_e(c.worker.target)}</h1>",
        f"<p>model <code>{_e(c.worker.model)}</code>, {_e(c.worker.api)} API, {_e(c.mode)} loop, "
        f"{len(result.steps)} steps of {c.step_seconds:g} s after {c.warmup_seconds:g} s warm-up; "
        f"stopped: {_e(result.stopped)}</p>",
        "<div class='box'>",
    ]
    if result.before is not None and result.before.saturated:
        parts.append(f"<p class='bad'><b>Warning:</b> {_e(result.before.summary)}.</p>")
    if sat.reached and sat_load is None and result.before is not None and result.before.saturated:
        parts.append(
            f"<p><b>Saturated</b> before the sweep. <b>Limiting cause:</b> "
            f"{_e(sat.cause or 'unknown')}.<br>{_e(sat.reason)}</p>"
        )
    elif sat.reached:
        at = next((s for s in result.steps if s.index == sat.step_index), None)
        rps = (
            ""
            if at is not None and at.requests_completed == 0
            else f", {_f(sat.requests_per_s, '.2f')} req/s"
        )
        parts.append(
            f"<p><b>Saturation</b> at {unit} {_e(_f(sat_load, 'g'))}: {_f(sat.output_tokens_per_s, '.1f')} output tok/s"
            f"{rps}. <b>Limiting cause:</b> {_e(sat.cause or 'unknown')}"
            + (f" (inferred cap {sat.inferred_cap})" if sat.inferred_cap is not None else "")
            + f".<br>{_e(sat.reason)}</p>"
        )
    else:
        parts.append(f"<p><b>Saturation not reached.</b> {_e(sat.reason)}</p>")
    if sat.reached and sat.energy_per_token_joules is not None:
        cost = (
            f", ${sat.cost_per_million_tokens:,.2f} per million output tokens at "
            f"${c.gpu_hour_price:,.2f}/GPU-hour"
            if sat.cost_per_million_tokens is not None and c.gpu_hour_price is not None
            else ""
        )
        parts.append(
            f"<p><b>Energy at saturation:</b> {sat.energy_per_token_joules:.3g} J per output "
            f"token{_e(cost)}.</p>"
        )
    hc = result.headroom_check
    if hc is not None:
        est, meas = hc.in_mode(c.mode == "closed")
        parts.append(
            f"<p><b>Headroom estimate</b> from step {hc.step_index}'s window: {unit} "
            f"{_e(_f(est, '.3g'))} before <b>{_e(hc.limit or '-')}</b>; the sweep measured "
            f"{_e(_f(meas, 'g'))} (estimate over measured {_e(_f(hc.ratio, '.2f'))}).</p>"
        )
    g = result.goodput
    if g is not None:
        slos = ", ".join(f"{k.removesuffix('_s')} &le; {v:g} s" for k, v in g.slos.items())
        if g.met:
            gl = g.concurrency if c.mode == "closed" else g.rate
            parts.append(
                f"<p><b>Goodput</b> ({slos}): {unit} {_e(_f(gl, 'g'))}, "
                f"{_f(g.output_tokens_per_s, '.1f')} tok/s, {_f(g.requests_per_s, '.2f')} req/s.</p>"
            )
        else:
            parts.append(f"<p><b>Goodput</b> ({slos}): {_e(g.reason)}.</p>")
    cap = result.capacity
    if cap is not None:
        parts.append(f"<p><b>Capacity</b> for {cap.target_rps:g} req/s: " + (
            f"<b>{cap.boxes} box{'es' if cap.boxes != 1 else ''}</b> of this config "
            f"(ceil({cap.target_rps:g} / {cap.goodput_rps_per_box:.3g} req/s per box x "
            f"{1 + cap.margin:g})); {_e(cap.basis)}, {100 * cap.margin:.0f}% margin.</p>"
            if cap.boxes is not None and cap.goodput_rps_per_box is not None
            else f"unknown: {_e(cap.basis)}.</p>"
        ))  # fmt: skip
    parts.append("</div><h2>Steps</h2><table><tr>")
    heads = ["#", unit, "req/s", "output tok/s", "TTFT p50 (s)", "TTFT p95 (s)", "ITL p50 (s)",
             "ITL p95 (s)", "e2e p50 (s)", "errors (%)", "client in flight (requests)",
             "engine running + waiting", "running", "waiting", "Little's law",
             "client CPU (% of a core)", "GPU util (%)", "GPU power (W)", "J/token", "J/request",
             "cost per M tokens", "engine verdict at this step", "notes"]  # fmt: skip
    parts.append("".join(f"<th>{_e(h)}</th>" for h in heads) + "</tr>")
    any_off = False
    for s in sorted(result.steps, key=load_of):
        notes = "; ".join(x for x in (s.invalid_reason, _tokens_note(s)) if x)
        knee = sat.reached and sat_load is not None and load_of(s) == sat_load
        if knee:
            notes = "; ".join(n for n in ("saturation point", notes) if n)
        if s.littles_law_ok is False:
            any_off = True
            notes = "; ".join(
                n
                for n in (
                    notes,
                    f"Little's law off: {_f(s.client_in_flight_mean, '.1f')} in flight at the "
                    f"client, {_f(s.engine_in_flight_mean, '.1f')} at the engine, "
                    f"{_f(s.littles_law_in_flight, '.1f')} by req/s x e2e",
                )
                if n
            )
        cells = [
            s.index, _f(load_of(s), "g"), _rps(s), _f(s.output_tokens_per_s, ".1f"),
            _f(s.ttft_p50_s, ".4f"), _f(s.ttft_p95_s, ".4f"), _f(s.itl_p50_s, ".4f"), _f(s.itl_p95_s, ".4f"),
            _f(s.e2e_p50_s, ".3f"), f"{100 * s.error_ratio:.1f}%", _f(s.client_in_flight_mean, ".1f"),
            _f(s.engine_in_flight_mean, ".1f"), _f(s.running_mean, ".1f"), _f(s.waiting_mean, ".1f"),
            "-" if s.littles_law_ok is None else ("agrees" if s.littles_law_ok else "off (see notes)"),
            "-" if s.client_cpu_ratio is None else f"{100 * s.client_cpu_ratio:.0f}%",
            "-" if s.gpu.util is None else f"{100 * s.gpu.util:.0f}%",
            _f(s.gpu_power_watts, ".0f"), _f(s.energy_per_token_joules, ".3g"),
            _f(s.energy_per_request_joules, ".3g"), _f(s.cost_per_million_tokens, ".3g"),
        ]  # fmt: skip
        row = "".join(f"<td>{_e(x)}</td>" for x in cells)
        row += f"<td class='l'>{_e(s.verdict or '-')}</td><td class='l bad'>{_e(notes)}</td>"
        parts.append(f"<tr class='knee'>{row}</tr>" if knee else f"<tr>{row}</tr>")
    parts.append("</table>")
    parts.append(
        "<p class='note'>req/s counts requests that finished inside a step's hold; output "
        "tok/s counts every token received in it, finished or not. With requests that last "
        "a good part of the hold, a step can show more tokens/s but fewer requests/s than "
        "the step below it. The engine verdict is the diagnosis of that step's own window: "
        "at the saturation point the engine may still look unqueued, and the limiting "
        "cause shows in the steps past it.</p>"
    )
    if any_off:
        parts.append(
            "<p class='note'>Little's law: the requests in flight at the client, at the engine "
            f"(running + waiting) and by throughput x latency should agree within "
            f"{100 * c.littles_tolerance:.0f}%. Where they do not, something between client "
            "and engine holds requests (a gateway, a proxy's queue, the client itself), or the "
            "step was disturbed (requests longer than the hold, a host stall).</p>"
        )
    parts += _traffic_table(result, unit)
    for p in plots:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        parts.append(
            f"<h3>{_e(p.stem.replace('_', ' '))}</h3><img alt='{_e(p.stem)}' src='data:image/png;base64,{data}'>"
        )
    if result.notes:
        parts.append(
            "<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>"
        )
    env = result.environment
    parts.append(
        f"<h2>Environment</h2><p>headroom {_e(env.headroom_version)}, Python {_e(env.python)}, "
        f"Locust {_e(env.locust_version)}, {_e(env.platform)}, host {_e(env.hostname)} "
        f"({env.cpu_count} CPUs)</p>"
    )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_html(path: Path, result: SweepResult, plots: list[Path]) -> None:
    path.write_text(render_html(result, plots), encoding="utf-8")
