"""`headroom sweep`: step the load on an OpenAI-compatible server and find where it saturates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from headroom.commands.common import add_engine_flag, add_price_flag, add_raw_parser, gpu_hour_price
from headroom.commands.sweep_flags import read_list, read_numbers
from monitor.core.errors import ConfigError

EPILOG = """\
examples:
  headroom sweep --target http://127.0.0.1:8000 --out sweep1
  headroom sweep --target http://gpu-box:8000 --concurrency 1,2,4,8,16,32,64 \\
      --step-seconds 30 --warmup-seconds 10 --slo ttft_p95=0.5 --slo itl_p95=0.05 --out sweep2
  headroom sweep --target http://gpu-box:8000 --rates 1,2,4,8 --arrival poisson --out sweep3

Loads one machine cannot make: add local Locust workers with --workers N; to add
workers on other hosts, start the sweep with --external-workers M --master-bind 0.0.0.0
--master-port 5557, copy OUT/loadgen-config.json to each host, and there run
  python -m loadgen.worker_locust --role worker --master-host SWEEP_HOST \\
      --master-port 5557 --mode closed --config loadgen-config.json
The API key is read from HEADROOM_API_KEY or OPENAI_API_KEY.
"""


HELP = "step the load and find the saturation point, its cause, and goodput"
DESCRIPTION = (
    "Step the load on an OpenAI-compatible server (closed loop: concurrency; "
    "open loop: request rates), watch the engine and GPUs at each step, and report the "
    "saturation point, its cause, and the largest load that meets your SLOs."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_raw_parser(sub, "sweep", HELP, DESCRIPTION, EPILOG)
    p.add_argument("--target", help="the server's base URL (http://host:port); required "
                   "unless --from-results")  # fmt: skip
    p.add_argument("--model", help="model name (default: the first from /v1/models)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", metavar="1,2,4,...",
                      help="closed loop at these concurrency levels (default: adaptive doubling)")  # fmt: skip
    load.add_argument("--rates", metavar="R1,R2,...|auto",
                      help="open loop at these request rates (req/s), or 'auto' for adaptive")  # fmt: skip
    p.add_argument("--arrival", choices=("poisson", "constant"), default="poisson")
    p.add_argument("--max-concurrency", default=1024, help="adaptive ceiling (default 1024)")
    p.add_argument("--start-concurrency", default=1, metavar="N",
                   help="adaptive: the first load, doubled from there (default 1)")  # fmt: skip
    p.add_argument("--refine-steps", default=2, metavar="N",
                   help="adaptive: steps that bisect towards the knee once it is found "
                   "(default 2; 0 takes the knee as the doubling found it)")  # fmt: skip
    p.add_argument("--step-seconds", default=30.0, help="hold per step (default 30)")
    p.add_argument("--warmup-seconds", default=10.0, help="excluded before each hold (default 10)")
    p.add_argument(
        "--input-tokens",
        default=256,
        help="synthetic prompt length in the model's tokens (default 256; exact through the "
        "server's /tokenize or --tokenizer, else approximate)",
    )
    p.add_argument(
        "--output-tokens",
        help="max_tokens per request (default 128; with --dataset, overrides the replies' lengths)",
    )
    p.add_argument("--tokenizer", metavar="PATH",
                   help="a local tokenizer.json (or its folder) for exact lengths when the server "
                   "has no /tokenize; hub names are not downloaded")  # fmt: skip
    p.add_argument(
        "--length-dist", choices=("fixed", "uniform", "normal", "exponential"), default="fixed"
    )
    p.add_argument("--length-spread", default=0.5,
                   help="uniform half-width or normal sd, as a share of the mean (default 0.5)")  # fmt: skip
    p.add_argument("--prompts", metavar="FILE.jsonl", help="prompts from a JSONL file instead")
    p.add_argument("--dataset", metavar="FILE",
                   help="ShareGPT JSON/JSONL (first human turn; the reply's length as max_tokens) "
                   "or a JSONL of {prompt|messages, max_tokens}, sampled with --seed")  # fmt: skip
    p.add_argument("--dataset-prompts", default=1000, metavar="N",
                   help="prompts to sample from --dataset (default 1000; a step needing more "
                   "cycles through them)")  # fmt: skip
    p.add_argument("--seed", default=0, help="seed for sampling and prompts (default 0)")
    p.add_argument("--shared-prefix-tokens", default=0, metavar="N",
                   help="every prompt starts with one of --prefix-groups shared prefixes of N tokens")  # fmt: skip
    p.add_argument("--prefix-groups", default=1, metavar="G",
                   help="how many different shared prefixes (default 1)")  # fmt: skip
    p.add_argument("--turns", default=1, metavar="K",
                   help="conversations of K turns through the chat API, each carrying the history "
                   "(concurrency counts sessions)")  # fmt: skip
    p.add_argument("--think-time", default=0.0, metavar="S",
                   help="seconds a user waits between turns (default 0)")  # fmt: skip
    p.add_argument("--trace", metavar="FILE.jsonl",
                   help="replay a Mooncake-style trace (timestamp, input_length, output_length, "
                   "hash_ids) open loop")  # fmt: skip
    p.add_argument("--speed", default="1", metavar="X[,Y,...]",
                   help="trace replay speed(s), one step each (default 1)")  # fmt: skip
    p.add_argument("--trace-time-unit", choices=("s", "ms"), default="s",
                   help="the trace's timestamp unit (default s; Mooncake's published traces use ms)")  # fmt: skip
    p.add_argument("--trace-block-tokens", default=512,
                   help="prompt tokens per trace hash id (default 512, Mooncake's block)")  # fmt: skip
    p.add_argument(
        "--no-ignore-eos", action="store_true", help="do not send ignore_eos (non-vLLM servers)"
    )
    p.add_argument("--no-usage", action="store_true", help="do not ask for usage in the stream")
    p.add_argument("--no-dephase", action="store_true",
                   help="closed loop: start a step's users in step, as before (with replies of "
                   "one length they then send in waves); by default each user's first request "
                   "asks for a random share of its reply, spreading their requests out")  # fmt: skip
    p.add_argument(
        "--request-timeout",
        default=120.0,
        help="seconds one request may take, send to last token (default 120)",
    )
    p.add_argument(
        "--vllm-metrics",
        "--engine-metrics",
        dest="vllm_metrics",
        metavar="URL",
        help="the engine's metrics page (default TARGET/metrics)",
    )
    add_engine_flag(p)
    p.add_argument(
        "--no-engine-metrics", action="store_true", help="do not read the engine's /metrics"
    )
    p.add_argument(
        "--dcgm-exporter", metavar="URL", help="a dcgm-exporter /metrics for GPU activity"
    )
    p.add_argument("--nvml", action="store_true", help="also read this host's GPUs through NVML")
    p.add_argument("--max-num-seqs", metavar="N",
                   help="the engine's --max-num-seqs, for each step's diagnosis and what-if "
                   "(else reported by the engine or inferred)")  # fmt: skip
    p.add_argument("--max-num-batched-tokens", metavar="N",
                   help="the engine's token budget per step, likewise")  # fmt: skip
    add_price_flag(p)
    p.add_argument(
        "--otlp-listen",
        metavar="[HOST:]PORT",
        help="receive the engine's request spans (OTLP/HTTP protobuf) here, to split the median "
        "request's TTFT into queue, prefill and outside (vLLM: --otlp-traces-endpoint "
        "http://HOST:PORT/v1/traces with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf); "
        "HOST defaults to 127.0.0.1",
    )
    p.add_argument(
        "--otlp-wait",
        default=10.0,
        metavar="S",
        help="how long after a step to wait for its spans (default 10: vLLM exports every 5 s)",
    )
    p.add_argument("--sample-interval", default=1.0, help="monitor tick, seconds (default 1)")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_PCT=SECONDS",
                   help="e.g. ttft_p95=0.5, itl_p95=0.05 (repeatable): goodput is the largest load meeting all")  # fmt: skip
    p.add_argument("--error-threshold", default=0.1,
                   help="error ratio that ends the sweep as saturated-by-errors (default 0.1)")  # fmt: skip
    p.add_argument("--max-lag", default=0.1,
                   help="open loop and trace: p99 send lateness (s) beyond which a step is flagged "
                   "and invalid (default 0.1)")  # fmt: skip
    p.add_argument(
        "--workers",
        default=0,
        help="Locust worker processes on this host (default 0: one process)",
    )
    p.add_argument("--external-workers", default=0, help="Locust workers joining from other hosts")
    p.add_argument(
        "--master-bind", default="127.0.0.1", help="where the Locust master listens (with workers)"
    )
    p.add_argument("--master-port", help="the Locust master's port (default: a free one)")
    p.add_argument(
        "--resume", action="store_true", help="continue a sweep in OUT from its steps.jsonl"
    )
    p.add_argument(
        "--target-rate",
        metavar="RPS",
        help="say how many boxes of this config serve RPS requests/s: the target over the "
        "best step's goodput (the most req/s meeting every --slo), with --margin to spare",
    )
    p.add_argument(
        "--margin",
        default=0.2,
        metavar="SHARE",
        help="with --target-rate: capacity held past the target (default 0.2, i.e. 20%%)",
    )
    p.add_argument(
        "--from-results",
        metavar="DIR",
        help="send no load: read DIR/sweep.json, add the capacity for --target-rate (with "
        "--slo and --margin; else the sweep's SLOs) and rewrite sweep.json and report.html",
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--out", metavar="DIR", help="output directory (required unless --from-results)")


def _traffic_checks(args: argparse.Namespace) -> None:
    """Flag combinations that cannot work, before anything else."""
    _otlp_listen(args.otlp_listen)
    if args.dataset and args.prompts:
        raise ConfigError("--dataset and --prompts both give prompts: use one")
    if args.trace:
        if args.concurrency is not None or args.rates is not None:
            raise ConfigError("--trace sets its own arrivals: drop --concurrency and --rates")
        if args.turns > 1:
            raise ConfigError("--trace replays single requests: drop --turns")
        if args.workers or args.external_workers:
            raise ConfigError("--trace replays from one process: drop --workers")
    elif args.speed != "1":
        raise ConfigError("--speed applies to --trace replay only")
    if args.turns > 1 and args.rates is not None:
        raise ConfigError("--turns holds sessions in a closed loop: use --concurrency, not --rates")


# Flags whose value goes unchanged into the SweepConfig field of the same name.
_SWEEP_SAME_NAMED = (
    "concurrency", "max_concurrency", "start_concurrency", "refine_steps", "step_seconds",
    "warmup_seconds", "engine",
    "dcgm_exporter", "workers", "external_workers", "master_bind", "master_port",
    "error_threshold",
)  # fmt: skip


def config_from_args(args: argparse.Namespace, model: str, target: str, traffic=None):
    from loadgen.analysis import parse_slo
    from loadgen.schema import SweepConfig, WorkerConfig

    slos = dict(parse_slo(s) for s in args.slo)
    rates = None
    adaptive = args.concurrency is None
    mode = "closed"
    speeds = None
    if args.trace:
        mode, adaptive, speeds = "open", False, read_list("--speed", args.speed, float)
    elif args.rates is not None:
        mode = "open"
        if args.rates.strip() == "auto":
            adaptive = True
        else:
            rates = read_list("--rates", args.rates, float)
            adaptive = False
    metrics = None
    if not args.no_engine_metrics:
        # A bare base URL lets the source find the page itself: /metrics, or the engine's
        # own path where it serves Prometheus text elsewhere (trtllm-serve).
        bare = urlsplit(target).path in ("", "/")
        metrics = args.vllm_metrics or (target if bare else f"{target}/metrics")
    extra = dict(traffic.worker) if traffic is not None else {}
    prompts_file = str(Path(args.prompts).resolve()) if args.prompts else None
    prompts_file = extra.pop("prompts_file", prompts_file)  # a sampled --dataset
    worker = WorkerConfig(
        target=target,
        model=model,
        api="chat" if args.turns > 1 else args.api,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens or 128,
        length_dist=args.length_dist,
        length_spread=args.length_spread,
        prompts_file=prompts_file,
        ignore_eos=not args.no_ignore_eos,
        include_usage=not args.no_usage,
        request_timeout_s=args.request_timeout,
        arrival=args.arrival,
        seed=args.seed,
        prefix_tokens=args.shared_prefix_tokens,
        prefix_groups=args.prefix_groups,
        turns=args.turns,
        think_time_s=args.think_time,
        trace_file=str(Path(args.trace).resolve()) if args.trace else None,
        trace_time_unit_s=0.001 if args.trace_time_unit == "ms" else 1.0,
        trace_block_tokens=args.trace_block_tokens,
        dephase=not args.no_dephase,
        **extra,
    )
    return SweepConfig(
        **{name: getattr(args, name) for name in _SWEEP_SAME_NAMED},
        worker=worker,
        mode=mode,
        adaptive=adaptive,
        rates=rates,
        sample_interval_s=args.sample_interval,
        vllm_metrics=metrics,
        slos=slos,
        max_lag_s=args.max_lag,
        speeds=speeds,
        dataset_prompts=traffic.dataset_prompts if traffic is not None else None,
        otlp_listen=_otlp_listen(args.otlp_listen),
        otlp_wait_s=args.otlp_wait,
        gpu_hour_price=gpu_hour_price(args),
        max_num_seqs=getattr(args, "max_num_seqs", None),
        max_num_batched_tokens=getattr(args, "max_num_batched_tokens", None),
        target_rate_rps=getattr(args, "target_rate", None),
        capacity_margin=getattr(args, "margin", 0.2),
    )


def _otlp_listen(value: str | None) -> str | None:
    """``[HOST:]PORT`` as ``host:port``, or one line saying what is wrong with it."""
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--otlp-listen {value}: want [HOST:]PORT, e.g. 127.0.0.1:4318")
    return f"{host}:{int(port)}"


def check_out_dir(out: Path) -> None:
    """The output directory can be made and written, or one line saying why not."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".headroom-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None


def knee_note(result: Any, load: float) -> str:
    """Why the step at the knee may read another verdict than the saturation's cause: the
    limit shows in the steps past it, where requests queue."""
    from loadgen.analysis import load_of

    knee = next((s for s in result.steps if load_of(s) == load), None)
    cause = result.saturation.cause
    if knee is None or not knee.verdict or knee.verdict == cause or cause in (None, "errors"):
        return ""
    return f" (seen past the knee; the step at {load:g} itself read {knee.verdict})"


def from_results(args: argparse.Namespace) -> int:
    """Capacity (and energy at saturation) added to a finished sweep, without any load."""
    from pydantic import ValidationError

    from loadgen.analysis import parse_slo
    from loadgen.capacity import capacity_line, energy_line, saturation_energy, sweep_capacity
    from loadgen.outputs import write_all
    from loadgen.schema import SweepResult

    out = Path(args.from_results)
    path = out / "sweep.json"
    if args.target_rate is None:
        raise ConfigError("--from-results: give --target-rate RPS (the rate to size for)")
    try:
        result = SweepResult.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--from-results {out}: cannot read {path}: {e.strerror}") from None
    except ValidationError:
        raise ConfigError(f"--from-results {out}: {path} is not a headroom sweep.json") from None
    slos = dict(parse_slo(s) for s in args.slo) if args.slo else result.config.slos
    cfg = result.config.model_copy(
        update={"target_rate_rps": args.target_rate, "capacity_margin": args.margin, "slos": slos}
    )
    cap = sweep_capacity(result.steps, slos, cfg.error_threshold, args.target_rate, args.margin)
    sat = saturation_energy(result.steps, result.saturation)
    result = result.model_copy(update={"config": cfg, "capacity": cap, "saturation": sat})
    write_all(out, result)
    line = energy_line(sat)
    if line:
        print(line)
    print(capacity_line(cap))
    print(f"wrote {path} and report.html")
    return 0


def run(args: argparse.Namespace) -> int:
    read_numbers(args)  # a bad value is one line before anything else
    if args.from_results:
        return from_results(args)
    if not args.target or not args.out:
        raise ConfigError("give --target URL and --out DIR (or --from-results DIR)")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from loadgen.analysis import parse_slo
    from loadgen.capacity import capacity_line, energy_line
    from loadgen.preflight import normalise_target, probe_stream, resolve_model
    from loadgen.progress import Progress
    from loadgen.prompts import load_jsonl
    from loadgen.sweep import Sweep, build_sampler
    from loadgen.traffic import check_files, prepare

    read_numbers(args)  # a bad value is one line before anything else
    for slo in args.slo:
        parse_slo(slo)  # a typo fails before any network traffic
    gpu_hour_price(args)  # likewise a bad price
    check_out_dir(Path(args.out))  # before any load: a sweep that cannot write is wasted
    _traffic_checks(args)
    api = "chat" if args.turns > 1 else args.api
    target = normalise_target(args.target)
    if args.prompts:
        load_jsonl(args.prompts, api, args.output_tokens or 128)  # bad file: fail before any load
    unit = 0.001 if args.trace_time_unit == "ms" else 1.0
    local = check_files(args.dataset, args.trace, args.tokenizer, api, args.output_tokens, unit)
    model = resolve_model(target, args.model)
    # Synthetic text goes out unless every prompt comes from a file.
    synthetic = not (args.prompts or args.dataset)
    traffic = prepare(target, model, api, local, args.tokenizer, Path(args.out),
                      dataset=args.dataset, dataset_max_tokens=args.output_tokens,
                      default_max_tokens=128, dataset_limit=args.dataset_prompts,
                      seed=args.seed, exact_wanted=synthetic)  # fmt: skip
    cfg = config_from_args(args, model, target, traffic)
    probe_stream(target, model, api, timeout=min(60.0, args.request_timeout))
    sampler, notes = build_sampler(cfg, nvml=args.nvml)
    progress = Progress(quiet=args.quiet)
    progress.message(f"sweeping {target} (model {model}), results in {args.out}")
    if args.turns > 1 and args.api != "chat":
        progress.message("note: --turns sends conversations through the chat API")
    for w in traffic.warnings:
        progress.message(f"warning: {w}")
    notes = [*traffic.notes, *notes]
    for n in notes:
        progress.message(f"note: {n}")
    # The report keeps every warning and note the console showed.
    notes = [*(f"warning: {w}" for w in traffic.warnings), *notes]
    sweep = Sweep(cfg, Path(args.out), sampler=sampler, progress=progress, resume=args.resume,
                  argv=["headroom", *sys.argv[1:]], notes=notes)  # fmt: skip
    result = sweep.run()
    sat = result.saturation
    unit = "concurrency" if cfg.mode == "closed" else "rate"
    load = sat.concurrency if cfg.mode == "closed" else sat.rate
    if sat.reached:
        cap = f", inferred cap {sat.inferred_cap}" if sat.inferred_cap is not None else ""
        if sat.fitted_knee is not None:
            # Read off the curve through every step: say where the curve bends, so a user
            # sees the step named is the measured load nearest it.
            cap += f", the throughput curve bends at {sat.fitted_knee:g}"
        progress.message(
            f"saturation at {unit} {load:g}: {sat.output_tokens_per_s or 0:.1f} tok/s, "
            f"cause {sat.cause or 'unknown'}{cap}{knee_note(result, load)}"
            if load is not None
            else f"saturated before the sweep, cause {sat.cause or 'unknown'}: {sat.reason}"
            if result.before is not None and result.before.saturated
            else f"saturated: {sat.reason}"
        )
    else:
        progress.message(f"saturation {sat.reason}")
    hc = result.headroom_check
    if hc is not None:
        est, meas = hc.in_mode(cfg.mode == "closed")
        progress.message(
            f"headroom estimated at step {hc.step_index}: {unit} {est:.3g} before {hc.limit}; "
            f"measured {meas:g} (estimate/measured {hc.ratio:.2f})"
            if est is not None and meas is not None and hc.ratio is not None
            else f"headroom estimated at step {hc.step_index}: first limit {hc.limit}"
        )
    if result.goodput is not None:
        g = result.goodput
        gl = g.concurrency if cfg.mode == "closed" else g.rate
        progress.message(
            f"goodput: {unit} {gl:g}, {g.output_tokens_per_s:.1f} tok/s"
            if g.met
            else f"goodput: {g.reason}"
        )
    line = energy_line(result.saturation) if sat.reached else None
    if line:
        progress.message(line)
    if result.capacity is not None:
        progress.message(capacity_line(result.capacity))
    progress.message(f"wrote {Path(args.out) / 'sweep.json'} and report.html ({result.stopped})")
    ok = ("complete", "saturated-by-errors", "saturated-before", "interrupted")
    return 0 if result.stopped in ok else 1
