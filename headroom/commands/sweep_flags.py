"""The numeric flags of `headroom sweep`, read and checked before any load.

argparse reads them as text: its own type errors print the whole usage block and exit 2,
where a bad value should be one line and exit 1 like every other bad input. Each flag's
rule is here once, so a value that passes can no longer fail (or be replaced) later, in
the middle of a sweep or inside a load-generator process.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from monitor.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Rule:
    dest: str
    kind: type  # int or float
    low: float | None = None  # the smallest value allowed
    above: bool = False  # low itself is not allowed
    high: float | None = None  # the largest value allowed

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def words(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            return f"{what} from {self.low:g} to {self.high:g}"
        if self.low is not None:
            if self.low == 0:
                return f"{what} above 0" if self.above else f"{what}, 0 or more"
            return f"{what} above {self.low:g}" if self.above else f"{what}, {self.low:g} or more"
        return what

    def read(self, text: str) -> int | float:
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise ConfigError(f"{self.flag} {text}: want {self.words()}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{self.flag} {text}: want {self.words()}")
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            raise ConfigError(f"{self.flag} {text}: want {self.words()}")
        if self.high is not None and value > self.high:
            raise ConfigError(f"{self.flag} {text}: want {self.words()}")
        return value


RULES = (
    Rule("max_concurrency", int, 1),
    Rule("start_concurrency", int, 1),
    Rule("refine_steps", int, 0),
    Rule("step_seconds", float, 0, above=True),
    Rule("warmup_seconds", float, 0),
    Rule("input_tokens", int, 1),
    Rule("output_tokens", int, 1),
    Rule("length_spread", float, 0),
    Rule("dataset_prompts", int, 1),
    Rule("seed", int, 0),
    Rule("shared_prefix_tokens", int, 0),
    Rule("prefix_groups", int, 1),
    Rule("turns", int, 1),
    Rule("think_time", float, 0),
    Rule("trace_block_tokens", int, 1),
    Rule("request_timeout", float, 0, above=True),
    Rule("otlp_wait", float, 0),
    Rule("sample_interval", float, 0, above=True),
    Rule("error_threshold", float, 0, high=1),
    Rule("max_lag", float, 0, above=True),
    Rule("workers", int, 0),
    Rule("external_workers", int, 0),
    Rule("master_port", int, 1, high=65535),
    Rule("target_rate", float, 0, above=True),
    Rule("margin", float, 0, high=10),
    Rule("max_num_seqs", int, 1),
    Rule("max_num_batched_tokens", int, 1),
)


def read_list(flag: str, text: str, kind: type) -> list:
    """'1,2,4' -> [1, 2, 4]; one line naming the flag where a value is not a positive number."""
    what = "positive integers" if kind is int else "positive numbers"
    try:
        values = [kind(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text}: want {what} separated by commas") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ConfigError(f"{flag} {text}: want {what} separated by commas")
    return values


def read_numbers(args: argparse.Namespace) -> None:
    """Replace each numeric flag's text in ``args`` by its value, or raise ConfigError.

    Defaults are numbers already (argparse converts only given text here), and a flag left
    out stays None."""
    for rule in RULES:
        value = getattr(args, rule.dest)
        if isinstance(value, str):
            setattr(args, rule.dest, rule.read(value))
    if args.start_concurrency > args.max_concurrency:
        raise ConfigError(
            f"--start-concurrency {args.start_concurrency} is above --max-concurrency "
            f"{args.max_concurrency}: the sweep would measure nothing"
        )
    if isinstance(args.concurrency, str):
        args.concurrency = read_list("--concurrency", args.concurrency, int)
    if args.rates is not None and args.rates.strip() != "auto":
        # Kept as text (config_from_args reads 'auto' or the list): checked here, up front.
        read_list("--rates", args.rates, float)
    if args.speed != "1":
        read_list("--speed", args.speed, float)
