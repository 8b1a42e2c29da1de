"""The agent's settings: flags over environment (HEADROOM_*) over a file (YAML or TOML) over defaults.

Every bad value becomes one ``ConfigError`` line naming where it came from
(``config FILE: interval: must be > 0``, ``environment HEADROOM_INTERVAL: ...``,
``--interval: ...``), never a traceback.

The web config (TLS and basic auth) follows Prometheus's exporter-toolkit file
format, so a file written for node_exporter works here unchanged.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from monitor.core.configfile import read_settings_file
from monitor.core.errors import ConfigError

DEFAULT_PORT = 9402
ENV_PREFIX = "HEADROOM_"
# The agent's default step between verdicts (seconds): two steps make a cause stable.
DIAGNOSE_EVERY_S = 5.0


# A plain dataclass checked by hand, not a pydantic model: the agent is a daemon that
# should cost little, and pydantic with this model built is ~10 MiB of its RSS for a
# dozen settings read once (bench/results/agent_process_cost*.txt).
@dataclass(frozen=True)
class AgentConfig:
    """What `headroom agent` runs with. Field names are also the file keys and, upper-cased
    after ``HEADROOM_``, the environment variables. Values from files and the environment
    are converted ("2" -> 2.0, "true" -> True); a bad one raises ``SettingError``."""

    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    vllm: tuple[str, ...] = ()
    # The engine behind every vllm URL (vllm, sglang, tgi, ...); None: found from the page.
    engine: str | None = None
    dcgm_exporter: str | None = None
    interval: float = 1.0
    window: float = 10.0
    # Seconds between the agent's steps: a cause counts as stable once it holds in two
    # steps, and the auto-profiler hears each. A reader (scrape, /api/v1/snapshot) between
    # steps gets the latest reading judged for it. None: DIAGNOSE_EVERY_S, at most the
    # window. Judging every 1 s tick was a fifth of the agent's CPU, for verdicts nobody read.
    diagnose_every: float | None = None
    timeout: float = 2.0
    # /healthz turns 503 when the last tick is older than this (default: 3 intervals + 5 s,
    # so one machine stall does not flap a liveness probe).
    stale_after: float | None = None
    nvml: bool = True
    gpm: bool = True
    # Seconds over which NVML's GPM duty cycle (GRAPHICS_UTIL, ~1.8 ms of driver CPU a
    # call on an H200) is computed; 0 = every tick. Keeps the agent under 0.5% of a core.
    gpu_util_every: float = 5.0
    # Seconds between reads of the processes on each GPU (NVML's lists and per-process
    # samples, then user, command and container for each new PID); 0 = never.
    gpu_processes_every: float = 5.0
    # Seconds between reads of NVML's energy counter (~3.9 ms of driver CPU a call on an
    # H200); power is integrated over the ticks between. 0 = power alone.
    gpu_energy_every: float = 30.0
    # What one GPU costs an hour: cost per million tokens and the idle bill in money.
    gpu_hour_price: float | None = None
    dcgm: bool = False
    # The GPUs to watch by index (NVML's, or pydcgm's with dcgm); empty: every GPU.
    gpus: tuple[int, ...] = ()
    host: bool = True
    pids: tuple[int, ...] = ()
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_model: str | None = None
    thresholds: str | None = None
    web_config: str | None = None
    # POST /api/v1/profile (py-spy on the engine's hot thread) only when asked for: it reads
    # another process's memory, so it is the operator's choice, not a default.
    allow_profile: bool = False
    # While cpu-bound holds, profile the engine's hot thread by itself at most this often
    # (seconds, per process); 0 turns the automatic profile off.
    profile_every: float = 300.0
    profile_rate: int = 20  # samples a second (snapshot --profile: 50, its windows are short)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = _convert(f.name, _KINDS[f.name], getattr(self, f.name))
            check = _CHECKS.get(f.name)
            if check is not None and value is not None:
                check(value)  # raises SettingError(name, message)
            object.__setattr__(self, f.name, value)
        if self.window < self.interval:
            raise SettingError(
                "",
                f"window ({self.window:g} s) must be at least the interval ({self.interval:g} s)",
            )
        if self.diagnose_every is not None and self.diagnose_every > self.window:
            # Windows judged further apart than they are long would leave readings unjudged.
            raise SettingError(
                "",
                f"diagnose_every ({self.diagnose_every:g} s) must be at most the window "
                f"({self.window:g} s)",
            )

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_listen(self.listen)

    @property
    def diagnose_every_s(self) -> float:
        """The Monitor's step (0: every snapshot)."""
        if self.diagnose_every is not None:
            return self.diagnose_every
        return min(DIAGNOSE_EVERY_S, self.window)

    @property
    def stale_after_s(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval + 5.0


class SettingError(ValueError):
    """One setting's bad value; ``load_agent_config`` says where it came from."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


# How a value from a file or the environment is converted, by the field's annotation: one
# list of settings (the dataclass), their kinds read off it.
_KIND_OF = {
    "str": "str",
    "str | None": "str?",
    "tuple[str, ...]": "strs",
    "float": "float",
    "float | None": "float?",
    "int": "int",
    "int | None": "int?",
    "tuple[int, ...]": "ints",
    "bool": "bool",
}
_KINDS = {f.name: _KIND_OF[str(f.type)] for f in fields(AgentConfig)}
# Settings whose environment value is a comma-separated list.
_LIST_FIELDS = {name for name, kind in _KINDS.items() if kind in ("strs", "ints")}
_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


def _number(name: str, value: Any, integer: bool) -> float | int:
    if isinstance(value, bool):
        raise SettingError(name, "must be an integer" if integer else "must be a number")
    if integer:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value.strip())
        raise SettingError(name, f"must be an integer, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise SettingError(name, f"must be a number, got {value!r}")


def _convert(name: str, kind: str, value: Any) -> Any:
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if kind == "str":
        if not isinstance(value, str):
            raise SettingError(name, f"must be a string, got {value!r}")
        return value
    if kind in ("float", "int"):
        return _number(name, value, integer=kind == "int")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise SettingError(name, f"must be true or false, got {value!r}")
    # A list: from a file a list, from the environment the comma-separated parts.
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SettingError(name, f"must be a list, got {value!r}")
    if kind == "strs":
        return tuple(_convert(name, "str", v) for v in value)
    return tuple(_number(name, v, integer=True) for v in value)


def _positive(name: str) -> Callable[[float], None]:
    def check(v: float) -> None:
        if not (math.isfinite(v) and v > 0):
            raise SettingError(name, "must be > 0")

    return check


def _at_least_zero(name: str, zero_means: str) -> Callable[[float], None]:
    def check(v: float) -> None:
        if not (math.isfinite(v) and v >= 0):
            raise SettingError(name, f"must be >= 0 ({zero_means})")

    return check


def _at_least_one(name: str) -> Callable[[int], None]:
    def check(v: int) -> None:
        if v < 1:
            raise SettingError(name, "must be at least 1")

    return check


def _profile_rate(v: int) -> None:
    if not 1 <= v <= 1000:
        raise SettingError("profile_rate", "must be 1-1000 samples a second")


def _pids(v: tuple[int, ...]) -> None:
    if any(p < 1 for p in v):
        raise SettingError("pids", "process ids must be positive")


def _gpus(v: tuple[int, ...]) -> None:
    if any(i < 0 for i in v):
        raise SettingError("gpus", "GPU indices start at 0")


def _engine(v: str) -> None:
    from monitor.sources.metric_names import FLAVOURS

    if v not in FLAVOURS:
        raise SettingError("engine", f"unknown engine {v!r} (known: {', '.join(FLAVOURS)})")


def _price(v: float | None) -> None:
    if v is not None and not (math.isfinite(v) and v >= 0):
        raise SettingError("gpu_hour_price", f"must be a price per GPU-hour >= 0, not {v!r}")


def _listen(v: str) -> None:
    try:
        parse_listen(v)
    except ValueError as exc:
        raise SettingError("listen", str(exc)) from None


def _urls(name: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        for url in (v,) if isinstance(v, str) else v:
            if not url or any(c.isspace() for c in url):
                raise SettingError(name, f"not a URL: {url!r}")

    return check


_CHECKS: dict[str, Callable[[Any], None]] = {
    **{n: _positive(n) for n in ("interval", "window", "timeout", "stale_after", "diagnose_every")},
    "profile_every": _at_least_zero("profile_every", "0 = never by itself"),
    "profile_rate": _profile_rate,
    "gpu_processes_every": _at_least_zero("gpu_processes_every", "0 = never"),
    "gpu_util_every": _at_least_zero("gpu_util_every", "0 = every tick"),
    "gpu_energy_every": _at_least_zero("gpu_energy_every", "0 = power alone"),
    "gpu_hour_price": _price,
    "max_num_seqs": _at_least_one("max_num_seqs"),
    "max_num_batched_tokens": _at_least_one("max_num_batched_tokens"),
    "pids": _pids,
    "gpus": _gpus,
    "engine": _engine,
    "listen": _listen,
    "vllm": _urls("vllm"),
    "dcgm_exporter": _urls("dcgm_exporter"),
}


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (every interface) -> (host, port)."""
    host, sep, port_s = value.rpartition(":")
    if not sep:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address: {host!r}") from None
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets: [{host}]:{port_s}")
    if not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"port must be 0-65535, got {port_s!r}")
    return (host or "0.0.0.0"), int(port_s)


def _read_file(path: str | Path) -> Mapping[str, Any]:
    p = Path(path)
    data = read_settings_file(p, f"config {p}")
    # A file may hold other tools' tables too ([thresholds], [caps]): the agent's are under
    # [agent] when that table exists.
    if isinstance(data.get("agent"), Mapping):
        data = data["agent"]
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _from_env(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for name in _KINDS:
        var = ENV_PREFIX + name.upper()
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        value: Any = raw.strip()
        if name in _LIST_FIELDS:
            value = tuple(x.strip() for x in raw.split(",") if x.strip())
        out[name] = (value, f"environment {var}")
    return out


# Settings whose flag is named for one of the values it repeats (--pid 1 --pid 2).
_FLAG_NAMES = {"pids": "--pid", "gpus": "--gpu"}


def _flag(name: str) -> str:
    return _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


def load_agent_config(
    file: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Merge the layers (flags > environment > file > defaults) and validate.

    ``flags`` holds only the flags the user gave (None values are ignored).
    """
    origin: dict[str, tuple[Any, str]] = {}
    if file is not None:
        for key, value in _read_file(file).items():
            origin[key] = (value, f"config {file}")
    origin.update(_from_env(os.environ if env is None else env))
    for key, value in (flags or {}).items():
        if value is None or (key in _LIST_FIELDS and not value):
            continue
        origin[key] = (tuple(value) if isinstance(value, list) else value, _flag(key))
    unknown = [k for k in origin if k not in _KINDS]
    if unknown:
        where = origin[unknown[0]][1]
        if where.startswith("--") or where.startswith("environment"):
            raise ConfigError(f"{where}: unknown setting")
        raise ConfigError(f"{where}: {unknown[0]}: unknown setting")
    try:
        return AgentConfig(**{k: v for k, (v, _) in origin.items()})
    except SettingError as exc:
        field = exc.name
        where = origin[field][1] if field in origin else "config"
        if where.startswith("--") or where.startswith("environment"):
            raise ConfigError(f"{where}: {exc.message}") from None
        label = f"{where}: {field}" if field else where
        raise ConfigError(f"{label}: {exc.message}") from None


# --- web config (Prometheus exporter-toolkit format) --------------------------------------

_CLIENT_AUTH = {
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
}
_TLS_VERSIONS = {"TLS10", "TLS11", "TLS12", "TLS13"}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}


@dataclass(frozen=True)
class TlsConfig:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"


@dataclass(frozen=True)
class WebConfig:
    tls: TlsConfig | None = None
    # user -> bcrypt hash (never the password itself).
    basic_auth_users: tuple[tuple[str, str], ...] = ()


def load_web_config(path: str | Path) -> WebConfig:
    """Read a Prometheus web-config file; relative paths are relative to the file."""
    p = Path(path)
    where = f"web config {p}"
    try:
        import yaml

        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: not valid YAML: {first}") from None
    data = data or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a table at the top level")
    unknown = set(data) - {"tls_server_config", "basic_auth_users"}
    if unknown:
        raise ConfigError(f"{where}: {sorted(unknown)[0]}: not supported by headroom agent")
    tls = None
    if data.get("tls_server_config") is not None:
        t = data["tls_server_config"]
        if not isinstance(t, Mapping):
            raise ConfigError(f"{where}: tls_server_config: expected a table")
        bad = set(t) - _TLS_KEYS
        if bad:
            raise ConfigError(f"{where}: tls_server_config.{sorted(bad)[0]}: not supported")
        for key in ("cert_file", "key_file"):
            if not t.get(key):
                raise ConfigError(f"{where}: tls_server_config.{key}: required")
        auth = t.get("client_auth_type", "NoClientCert")
        if auth not in _CLIENT_AUTH:
            raise ConfigError(
                f"{where}: tls_server_config.client_auth_type: unknown value {auth!r}"
            )
        if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not t.get(
            "client_ca_file"
        ):
            raise ConfigError(f"{where}: tls_server_config.client_ca_file: required by {auth}")
        version = t.get("min_version", "TLS12")
        if version not in _TLS_VERSIONS:
            raise ConfigError(f"{where}: tls_server_config.min_version: unknown value {version!r}")

        def resolve(name: str) -> Path:
            f = Path(str(t[name]))
            f = f if f.is_absolute() else p.parent / f
            if not f.is_file():
                raise ConfigError(f"{where}: tls_server_config.{name}: no such file {f}")
            return f

        tls = TlsConfig(
            cert_file=resolve("cert_file"),
            key_file=resolve("key_file"),
            client_auth_type=auth,
            client_ca_file=resolve("client_ca_file") if t.get("client_ca_file") else None,
            min_version=version,
        )
    users: list[tuple[str, str]] = []
    if data.get("basic_auth_users") is not None:
        u = data["basic_auth_users"]
        if not isinstance(u, Mapping):
            raise ConfigError(f"{where}: basic_auth_users: expected a table of user: bcrypt hash")
        for user, hashed in u.items():
            if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise ConfigError(
                    f"{where}: basic_auth_users.{user}: expected a bcrypt hash ($2y$...), "
                    "as Prometheus's web config does; never a plain password"
                )
            users.append((str(user), hashed))
    return WebConfig(tls=tls, basic_auth_users=tuple(users))
