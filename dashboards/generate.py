"""Generate headroom's Grafana dashboards (Grafana 11 JSON model, schemaVersion 39).

Run ``python dashboards/generate.py`` after changing a panel; the JSON files beside
this script are its output and a test checks they match. Plain dicts, no SDK: the
JSON model is small and stable, and this keeps the project free of a dependency
whose builds are hard to pin. tests/agent/test_prometheus.py runs every panel's
PromQL against a real Prometheus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
# Instance filter: the agent's scrape target; engine series also carry model_name.
INST = 'instance=~"$instance"'
IG = 'instance=~"$instance",gpu=~"$gpu"'
IM = 'instance=~"$instance",model_name=~"$model"'
M = 'model_name=~"$model"'


class Layout:
    """Places panels left to right in a 24-column grid, wrapping to new rows."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []
        # The size a panel takes unless it says otherwise; each row sets its own.
        self.w, self.h = 12, 8

    def row(self, title: str, w: int = 12, h: int = 8) -> None:
        self._newline()
        self.size(w, h)
        self.panels.append(
            {
                "type": "row",
                "id": self._id(),
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def size(self, w: int, h: int) -> None:
        """The size of the panels that follow, until the next row or size."""
        self.w, self.h = w, h

    def add(self, panel: dict[str, Any], w: int | None = None, h: int | None = None) -> None:
        w, h = w or self.w, h or self.h
        if self.x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def series(
        self,
        title: str,
        *queries: tuple[str, str],
        w: int | None = None,
        h: int | None = None,
        **options: Any,
    ) -> None:
        """A time-series panel of these (PromQL, legend) queries; options as timeseries'."""
        self.add(timeseries(title, targets(*queries), **options), w, h)

    def _newline(self) -> None:
        if self.x > 0:
            self.y += self.row_h
        self.x, self.row_h = 0, 0

    def _id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    t = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref}
    t.update(extra)
    return t


def targets(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(pairs)]


def _legend(prefix: str, legend: str) -> str:
    return f"{prefix} {legend}" if legend else prefix


def gpu_series(metric: str, legend: str = "") -> tuple[str, str]:
    """(PromQL, legend) of one of the agent's per-GPU series, the legend after the GPU's index."""
    return f"headroom_gpu_{metric}{{{IG}}}", _legend("GPU {{gpu}}", legend)


def engine_series(metric: str, legend: str = "") -> tuple[str, str]:
    """(PromQL, legend) of one of the agent's per-engine series, the legend after the model's."""
    return f"headroom_engine_{metric}{{{IM}}}", _legend("{{model_name}}", legend)


def vllm_rule(rule: str, legend: str) -> tuple[str, str]:
    """(PromQL, legend) of one of the recording rules over vLLM's own metrics (model:vllm_*)."""
    return f"model:vllm_{rule}{{{M}}}", _legend("{{model_name}}", legend)


# A ratio drawn as a percentage on a 0-100% axis.
SHARE: dict[str, Any] = {"unit": "percentunit", "max_": 1}


def timeseries(
    title: str,
    tgts: list[dict[str, Any]],
    unit: str = "short",
    description: str = "",
    max_: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"},
    }
    if max_ is not None:
        defaults["min"], defaults["max"] = 0, max_
    panel = {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": tgts,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }
    panel.update(extra)
    return panel


def stat(
    title: str, tgts: list[dict[str, Any]], unit: str = "short", description: str = ""
) -> dict[str, Any]:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": tgts,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
    }


def cause_timeline(
    title: str,
    expr: str,
    legend: str,
    description: str | None = None,
    thresholds: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A state timeline of headroom_diagnosis: one row a cause, named by its value mapping.

    Causes that never fired would be empty rows: all-zero series are hidden."""
    defaults: dict[str, Any] = {"mappings": DIAGNOSIS_MAPPINGS}
    if thresholds is not None:
        defaults |= {"color": {"mode": "thresholds"}, "thresholds": thresholds}
    panel: dict[str, Any] = {"type": "state-timeline", "title": title}
    if description is not None:
        panel["description"] = description
    return panel | {
        "datasource": DS,
        "targets": targets((expr, legend)),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"showValue": "never", "mergeValues": True, "rowHeight": 0.8, **(options or {})},
        "transformations": [
            {
                "id": "filterByValue",
                "options": {
                    "type": "exclude",
                    "match": "all",
                    "filters": [
                        {
                            "fieldName": "Value",
                            "config": {"id": "lowerOrEqual", "options": {"value": 0}},
                        }
                    ],
                },
            },
        ],
    }


def vllm_quantiles(title: str, histogram: str) -> dict[str, Any]:
    """p50, p95 and p99 of one vLLM histogram, from the recording rules' one-minute quantiles."""
    return timeseries(
        title,
        targets(*(vllm_rule(f"{histogram}:{q}_1m", q) for q in ("p50", "p95", "p99"))),
        unit="s",
    )


def query_var(name: str, label: str, query: str, include_all: bool = True) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "definition": query,
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "includeAll": include_all,
        "allValue": ".*",
        "multi": True,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
    }


def templating() -> dict[str, Any]:
    return {
        "list": [
            {
                "type": "datasource",
                "name": "datasource",
                "label": "Prometheus",
                "query": "prometheus",
                "current": {},
                "options": [],
                "refresh": 1,
                "hide": 0,
            },
            query_var("instance", "Agent", "label_values(headroom_agent_build_info, instance)"),
            query_var(
                "gpu",
                "GPU",
                'label_values(headroom_gpu_utilization_ratio{instance=~"$instance"}, gpu)',
            ),
            query_var(
                "model",
                "Model",
                'label_values(headroom_engine_requests_running{instance=~"$instance"}, model_name)',
            ),
        ]
    }


def dashboard(
    uid: str, title: str, description: str, panels: list[dict[str, Any]], tags: list[str]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": tags,
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "refresh": "30s",
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "links": [],
        "templating": templating(),
        "panels": panels,
    }


DIAGNOSIS_MAPPINGS = [
    {"type": "value", "options": {"0": {"text": "-", "color": "transparent", "index": 0},
                                  "1": {"text": "active", "color": "orange", "index": 1}}},
]  # fmt: skip


def overview() -> dict[str, Any]:
    lay = Layout()
    lay.row("GPUs", h=9)
    lay.series(
        "GPU $gpu: duty cycle vs SM active vs tensor vs DRAM",
        (f"headroom_gpu_utilization_ratio{{{IG}}}", "duty cycle"),
        (f"headroom_gpu_sm_active_ratio{{{IG}}}", "SM active"),
        (f"headroom_gpu_tensor_active_ratio{{{IG}}}", "tensor"),
        (f"headroom_gpu_dram_active_ratio{{{IG}}}", "DRAM"),
        **SHARE,
        description=(
            "Duty cycle counts any kernel; SM active counts busy SMs. A high duty cycle "
            "with low SM active is launch-bound; tensor or DRAM near the top is saturation."
        ),
        repeat="gpu",
        repeatDirection="h",
        maxPerRow=2,
    )
    lay.size(6, 9)
    lay.series(
        "Power and SM clock",
        gpu_series("power_watts", "power"),
        gpu_series("power_limit_watts", "limit"),
        unit="watt",
    )
    lay.series(
        "Memory used", (f"gpu:headroom_gpu_memory_used:ratio{{{IG}}}", "GPU {{gpu}}"), **SHARE
    )
    lay.size(8, 7)
    lay.series("SM clock", gpu_series("sm_clock_hertz"), unit="hertz")
    lay.series("Temperature", gpu_series("temperature_celsius"), unit="celsius")
    throttled = f"count by (reason) (headroom_gpu_clock_throttle_active{{{IG}}})"
    lay.add(stat("Clock throttle reasons active", targets((throttled, "{{reason}}"))))
    lay.size(12, 8)
    lay.series(
        "GPU memory by container",
        gpu_series("container_memory_bytes", "{{namespace}}/{{pod}} {{container}}"),
        unit="bytes",
        description=(
            "GPU memory held by each container's processes (an empty container: processes "
            "on the host). Under Kubernetes, pod and namespace name it."
        ),
    )
    lay.series(
        "SM time: the engine's processes vs others",
        gpu_series("process_sm_share_ratio", "{{owner}}"),
        **SHARE,
        description=(
            "Each owner's share of the GPU's time with kernels on the SMs (NVML's "
            "per-process samples). Others beside the engine: the contended cause."
        ),
    )

    lay.row("Engine", w=8)
    lay.series(
        "Running and waiting requests",
        engine_series("requests_running", "running (R)"),
        engine_series("requests_waiting", "waiting (Q)"),
        engine_series("seq_cap", "sequence cap ({{origin}})"),
        description="Window means. R flat at the cap while Q > 0 is the sequence cap.",
    )
    lay.series(
        "KV cache usage",
        engine_series("kv_cache_usage_ratio", "mean"),
        engine_series("kv_cache_usage_max_ratio", "max"),
        **SHARE,
    )
    lay.series(
        "Preemptions",
        engine_series("preemptions_per_second", "(agent window)"),
        vllm_rule("num_preemptions:rate1m", "{{instance}} (vLLM)"),
        unit="reqps",
    )
    lay.series(
        "Tokens per second",
        vllm_rule("generation_tokens:rate1m", "generated"),
        vllm_rule("prompt_tokens:rate1m", "prompt"),
    )
    lay.add(vllm_quantiles("Time to first token", "time_to_first_token_seconds"))
    lay.add(vllm_quantiles("Inter-token latency", "inter_token_latency_seconds"))

    lay.row("Diagnosis")
    lay.add(
        cause_timeline(
            "Diagnosis",
            f"max by (cause, scope) (headroom_diagnosis{{{INST}}})",
            "{{cause}} {{scope}}",
            description="Each cause the agent named, over time (headroom_diagnosis == 1).",
            # Orange while a cause holds; its name as the value text.
            thresholds={
                "mode": "absolute",
                "steps": [
                    {"color": "transparent", "value": None},
                    {"color": "orange", "value": 1},
                ],
            },
            options={
                "alignValue": "left",
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            },
        ),
        w=16,
        h=9,
    )
    lay.series(
        "Verdict confidence",
        (f"headroom_diagnosis_confidence{{{INST}}}", "{{cause}} {{scope}}"),
        **SHARE,
        w=8,
        h=9,
    )
    lay.add(
        {
            "type": "table",
            "title": "Evidence of current verdicts",
            "description": "The numbers that decided each verdict and the thresholds they crossed.",
            "datasource": DS,
            "targets": [
                target(
                    f"headroom_diagnosis_evidence{{{INST}}}", "", "A", format="table", instant=True
                ),
                target(
                    f"headroom_diagnosis_evidence_threshold{{{INST}}}",
                    "",
                    "B",
                    format="table",
                    instant=True,
                ),
            ],
            "transformations": [
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "job": True},
                        "renameByName": {"Value #A": "value", "Value #B": "threshold"},
                    },
                },
            ],  # fmt: skip
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"showHeader": True},
        },
        w=24,
    )

    lay.row("Why: Little's law, CPU and the roofline", w=8)
    lay.series(
        "Little's law: in flight, measured vs predicted",
        engine_series("in_flight_requests", "R + Q"),
        engine_series("in_flight_predicted_requests", "arrivals x latency"),
        description="They should agree within ~15%; if not, something queues in front of the engine.",
    )
    lay.series(
        "Arrival rate vs the rate that fills the slots",
        engine_series("arrival_rate_requests_per_second", "arrivals"),
        engine_series("fill_rate_requests_per_second", "fills the cap"),
        unit="reqps",
    )
    lay.series(
        "CPU in the path",
        engine_series("busy_ratio", "GPU busy"),
        engine_series("thread_cpu_ratio", "engine thread (of a core)"),
        (f"headroom_host_cpu_busy_ratio{{{INST}}}", "host CPU"),
        unit="percentunit",
    )
    lay.series(
        "Roofline: MFU and share of peak bandwidth",
        engine_series("roofline_mfu_ratio", "MFU"),
        engine_series("roofline_bandwidth_ratio", "bandwidth"),
        **SHARE,
    )
    lay.series(
        "Roofline: arithmetic intensity vs ridge",
        engine_series("roofline_arithmetic_intensity", "FLOP/byte"),
        engine_series("roofline_ridge_intensity", "ridge"),
        description="Below the ridge the engine is memory-bound, above it compute-bound.",
    )
    side = "{{model_name}}: {{side}}-bound on {{gpu_model}}"
    lay.add(stat("Roofline side", targets((f"headroom_engine_roofline_side{{{IM}}}", side))))

    lay.row("Agent", w=8, h=7)
    # (title, PromQL, legend, unit): the agent's health, one query a panel.
    for title, expr, legend, unit in (
        (
            "Tick duration p95",
            "histogram_quantile(0.95, sum by (instance, le) "
            f"(rate(headroom_agent_tick_duration_seconds_bucket{{{INST}}}[$__rate_interval])))",
            "{{instance}}",
            "s",
        ),
        (
            "Source errors",
            "sum by (source, target) "
            f"(rate(headroom_agent_source_errors_total{{{INST}}}[$__rate_interval]))",
            "{{source}} {{target}}",
            "reqps",
        ),
        (
            "Seconds since each source's last success",
            f"time() - headroom_agent_source_last_success_timestamp_seconds{{{INST}}}",
            "{{source}} {{target}}",
            "s",
        ),
    ):
        lay.series(title, (expr, legend), unit=unit)

    lay.row("Energy and cost", w=8)
    lay.series(
        "GPU power from the energy counter",
        (
            # irate: the last two samples in the range, so the panel reads full power
            # from an agent's second scrape; rate() over a range divides by all of it
            # and reads low for that long after an agent starts. The counter carries its
            # reading's time, so Prometheus never marks it stale: the agent's tick series
            # end the line when the agent stops.
            f"irate(headroom_gpu_energy_joules_total{{{IG}}}[$__rate_interval]) "
            f"and on (instance) headroom_agent_last_tick_timestamp_seconds{{{INST}}}",
            "GPU {{gpu}} ({{energy_from}})",
        ),
        unit="watt",
        description=(
            "The energy counter's rate between its last two readings: the mean power "
            "between them, bursts included "
            "(energy_from=power where the GPU has no counter and power is integrated)."
        ),
    )
    lay.series(
        "Energy per token and per request",
        engine_series("energy_per_token_joules", "J/token"),
        engine_series("energy_per_request_joules", "J/request"),
        unit="joule",
        description="The box's GPU energy over the window against every engine's tokens.",
    )
    lay.series(
        "Cost per million tokens",
        engine_series("cost_per_million_tokens"),
        unit="currencyUSD",
        description="At the agent's gpu_hour_price (HEADROOM_GPU_HOUR_PRICE); empty without one.",
    )
    return dashboard(
        "headroom-overview",
        "headroom: serving box",
        "Why the GPU is under-used and how much more load the box can take: per-GPU activity, "
        "the engine's queue and caps, latency, and headroom's diagnosis.",
        lay.panels,
        ["headroom", "gpu", "vllm"],
    )


def sweep() -> dict[str, Any]:
    lay = Layout()
    lay.row("Load against response (run a sweep, then zoom the time range to it)", h=9)
    lay.series(
        "Throughput vs requests in flight",
        vllm_rule("generation_tokens:rate1m", "tokens/s"),
        (
            f"sum by (model_name) (headroom_engine_in_flight_requests{{{IM}}})",
            "{{model_name}} in flight",
        ),
        description="Throughput that stops growing while in-flight climbs marks saturation.",
        fieldConfig={
            "defaults": {"unit": "short", "custom": {"drawStyle": "line", "lineWidth": 1}},
            "overrides": [
                {
                    "matcher": {"id": "byRegexp", "options": ".*in flight"},
                    "properties": [{"id": "custom.axisPlacement", "value": "right"}],
                }
            ],
        },
    )
    lay.series(
        "Latency as load steps (p95)",
        vllm_rule("time_to_first_token_seconds:p95_1m", "TTFT p95"),
        vllm_rule("inter_token_latency_seconds:p95_1m", "ITL p95"),
        vllm_rule("e2e_request_latency_seconds:p95_1m", "e2e p95"),
        unit="s",
    )
    lay.size(12, 8)
    lay.series(
        "Queue: waiting requests and KV cache",
        engine_series("requests_waiting", "waiting"),
        (
            f"engine:headroom_engine_seq_slots_used:ratio{{{IM}}} * 100",
            "{{model_name}} slots used %",
        ),
        (f"headroom_engine_kv_cache_usage_ratio{{{IM}}} * 100", "{{model_name}} KV %"),
    )
    lay.series(
        "GPU activity as load steps",
        (f"instance:headroom_gpu_activity:avg{{{INST}}}", "{{instance}} SM active (or duty cycle)"),
        (f"avg by (instance) (headroom_gpu_tensor_active_ratio{{{INST}}})", "{{instance}} tensor"),
        (f"avg by (instance) (headroom_gpu_dram_active_ratio{{{INST}}})", "{{instance}} DRAM"),
        **SHARE,
    )
    lay.series(
        "Little's law check",
        engine_series("in_flight_requests", "measured"),
        engine_series("in_flight_predicted_requests", "predicted"),
        engine_series("littles_law_consistent", "consistent (1/0)"),
    )
    lay.add(
        cause_timeline(
            "Limiting cause at each step",
            f"max by (cause) (headroom_diagnosis{{{INST}}})",
            "{{cause}}",
        ),
    )
    lay.series(
        "Energy per token as load steps",
        engine_series("energy_per_token_joules", "J/token"),
        engine_series("tokens_per_joule", "tokens/J"),
        description=(
            "Batching spreads the GPU's watts over more tokens: J/token falls as load "
            "rises until the box saturates."
        ),
    )
    return dashboard(
        "headroom-sweep",
        "headroom: load sweep",
        "How the box responded as load stepped up: throughput, latency, queue, GPU activity "
        "and the limiting cause, for reading a `headroom sweep` run alongside its report.",
        lay.panels,
        ["headroom", "sweep"],
    )


DASHBOARDS = {"headroom-overview.json": overview, "headroom-sweep.json": sweep}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text = render(build)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(
            f"out of date (run python dashboards/generate.py): {', '.join(stale)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
