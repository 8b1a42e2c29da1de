"""Flags and wiring shared by the commands that watch (snapshot, agent, watch)."""

from __future__ import annotations

import argparse
from typing import Any

from monitor.core.errors import ConfigError


def add_engine_url_flag(g: Any, default: list[str] | None) -> None:
    """--vllm URL (alias --engine-url), repeatable; the agent passes default None so that a
    flag left out does not hide its environment and config-file settings."""
    g.add_argument(
        "--vllm",
        "--engine-url",
        dest="vllm",
        metavar="URL",
        action="append",
        default=default,
        help=(
            "a serving engine's metrics: vLLM, SGLang, TGI, TensorRT-LLM (trtllm-serve), Triton "
            "with TensorRT-LLM or llama.cpp (base URL or the metrics page); repeat for several"
        ),
    )
    add_engine_flag(g)


def add_source_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sources")
    add_engine_url_flag(g, default=[])
    g.add_argument("--dcgm-exporter", metavar="URL", help="a dcgm-exporter /metrics endpoint")
    g.add_argument("--dcgm", action="store_true", help="read GPUs through DCGM's pydcgm bindings")
    g.add_argument("--no-nvml", action="store_true", help="do not read GPUs through NVML")
    g.add_argument("--no-gpm", action="store_true", help="NVML without GPM profiling metrics")
    g.add_argument("--no-host", action="store_true", help="do not read host CPU")
    g.add_argument(
        "--pid",
        type=int,
        action="append",
        default=[],
        help="an engine process to watch (default: found from the engine's port)",
    )
    g.add_argument("--timeout", type=float, default=2.0, help="HTTP timeout in seconds (default 2)")


def add_engine_flag(g: argparse._ActionsContainer) -> None:
    from monitor.sources.metric_names import FLAVOURS

    g.add_argument(
        "--engine",
        metavar="NAME",
        choices=list(FLAVOURS),
        help=f"the engine behind the URLs ({', '.join(FLAVOURS)}; default: found from the page)",
    )


def add_price_flag(g: argparse._ActionsContainer) -> None:
    g.add_argument(
        "--gpu-hour-price",
        metavar="PRICE",
        help="what one GPU costs an hour (default: $HEADROOM_GPU_HOUR_PRICE): adds the cost "
        "per million tokens, and the idle part of the bill in money",
    )


def gpu_hour_price(args: argparse.Namespace) -> float | None:
    """--gpu-hour-price, else HEADROOM_GPU_HOUR_PRICE; a bad one is a ConfigError (one line)."""
    from monitor.diagnosis.energy import price_from

    return price_from(getattr(args, "gpu_hour_price", None))


def add_diagnosis_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The diagnosis group's flags, each defaulting to None (the agent's config layers show
    through); the group is returned for a command's own additions."""
    g = p.add_argument_group("diagnosis")
    add_price_flag(g)
    g.add_argument("--max-num-seqs", type=int, help="the engine's --max-num-seqs (else inferred)")
    g.add_argument("--max-num-batched-tokens", type=int, help="the engine's token budget per step")
    g.add_argument(
        "--gpu-model", help="peak-table entry to use (e.g. H200) when the name is not matched"
    )
    g.add_argument("--thresholds", metavar="FILE", help="TOML or YAML file of diagnosis thresholds")
    return g


def build_sources_from_args(
    args: argparse.Namespace, one_shot: bool = False
) -> tuple[list[Any], list[str]]:
    from monitor.sources.build import build_sources

    if args.timeout <= 0:
        raise ConfigError("--timeout must be positive")
    return build_sources(
        vllm_urls=args.vllm,
        dcgm_exporter_url=args.dcgm_exporter,
        nvml=not args.no_nvml,
        dcgm=args.dcgm,
        gpm=not args.no_gpm,
        host=not args.no_host,
        host_pids=args.pid,
        timeout=args.timeout,
        engine=args.engine,
        one_shot=one_shot,
        find_gpu_page=True,
    )


def build_diagnoser_from_args(args: argparse.Namespace) -> Any:
    from monitor.diagnosis import Caps, Diagnoser, Thresholds, load_thresholds

    thresholds = load_thresholds(args.thresholds) if args.thresholds else Thresholds()
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    caps = Caps(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu=args.gpu_model,
    )
    return Diagnoser(thresholds, caps, gpu_hour_price=gpu_hour_price(args))


def add_raw_parser(
    sub: argparse._SubParsersAction, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """A subcommand whose description and epilog keep the line breaks they are written with."""
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
