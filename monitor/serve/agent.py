"""The agent: samples continuously and serves /metrics, /healthz and /api/v1/snapshot.

The sampler thread (and its workers) does all the reading; a request makes the
ticks read since the last digest (DIGEST_EVERY_S) and renders the result, so a
slow or dead endpoint delays nothing but its own reading, and a storm of scrapes
costs no NVML or HTTP calls. Each event (start, a source failing or recovering,
stop) is one log line, logged when its reading is made.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import logging
import math
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder

from monitor.core.errors import ConfigError
from monitor.serve import exposition
from monitor.serve.config import AgentConfig, TlsConfig, WebConfig, load_web_config
from monitor.serve.exporter import SelfStats, build_registry
from monitor.sources.base import Reading, Source
from monitor.sources.paced import Paced
from monitor.sources.promtext import display_url
from monitor.sources.samples import SourceError

log = logging.getLogger("monitor.serve.agent")

# At ticks under this, the HTTP sources are read this often (monitor.sources.paced).
ENGINE_EVERY_S = 1.0
# The sampler reads on every tick and makes snapshots, parses engine pages, the window and
# the diagnosis this often (or when a request asks for them): a few ticks' work at once
# costs less than each tick's alone (monitor.read.sampler's digest_every_s). Every reader
# (/metrics, /healthz, /api/v1/snapshot) sees every tick read before it.
DIGEST_EVERY_S = 5.0
_HTTP_SOURCES = ("vllm", "dcgm-exporter")
# Read in the sampler's thread: local reads, cheaper than a hand-off to a worker.
_LOCAL_SOURCES = ("nvml", "dcgm", "host")

try:
    from importlib.metadata import version as _pkg_version

    VERSION = _pkg_version("headroom")
except Exception:  # running from a source tree that was never installed
    VERSION = "0+unknown"


class TrackedSource:
    """Wraps a source to time-stamp its successes and log its failures once per change."""

    def __init__(self, source: Source, stats: SelfStats) -> None:
        self._source = source
        self._stats = stats
        self.name = source.name
        # As the source's own errors name it: no credentials (it labels exported series).
        self.target = display_url(str(getattr(source, "url", "") or ""))
        self._failing: dict[str, str] = {}  # target -> message, as last logged

    def read(self) -> Reading:
        try:
            reading = self._source.read()
        except Exception as exc:  # a source must not raise; a bug in one must not stop the agent
            reading = self._failed(exc)
        return self._track(reading, None)

    def read_later(self) -> Callable[[], Reading]:
        """The source's own read_later where it has one (the sampler's digest_every_s), its
        success stamped with the time it read, not the time its reading was made."""
        later = getattr(self._source, "read_later", None)
        if later is None:
            reading = self.read()
            return lambda: reading
        wall = self._stats.now()
        try:
            finish = later()
        except Exception as exc:
            failed = self._failed(exc)
            return lambda: self._track(failed, wall)

        def made() -> Reading:
            try:
                reading = finish()
            except Exception as exc:
                reading = self._failed(exc)
            return self._track(reading, wall)

        return made

    def _failed(self, exc: Exception) -> Reading:
        return Reading(
            errors=(SourceError(self.name, self.target, f"{type(exc).__name__}: {exc}"),)
        )

    def _track(self, reading: Reading, wall: float | None) -> Reading:
        has_data = bool(reading.gpus or reading.engines or reading.host is not None)
        if has_data or not reading.errors:
            self._stats.source_succeeded(self.name, self.target, wall)
        self._log_changes(reading.errors)
        return reading

    def _log_changes(self, errors: Sequence[SourceError]) -> None:
        now = {e.target: e.message for e in errors}
        for target, message in now.items():
            if self._failing.get(target) != message:
                log.warning("source %s %s failing: %s", self.name, target or "-", message)
        for target in self._failing.keys() - now.keys():
            log.info("source %s %s recovered", self.name, target or "-")
        self._failing = now

    def close(self) -> None:
        self._source.close()


class BasicAuth:
    """Checks HTTP basic credentials against bcrypt hashes, as Prometheus's web config does.

    bcrypt is slow on purpose (~50-200 ms a check), so a credential that passed is
    remembered by its digest: a scrape every second must not cost a core.
    """

    def __init__(self, users: Sequence[tuple[str, str]]) -> None:
        try:
            import bcrypt
        except ImportError:
            raise ConfigError(
                "basic_auth_users needs the bcrypt package (pip install bcrypt)"
            ) from None
        self._bcrypt = bcrypt
        self._users = {u: h.encode() for u, h in users}
        # Checked for unknown users too, so the time taken does not tell which users exist.
        self._dummy = bcrypt.hashpw(b"headroom", bcrypt.gensalt(rounds=4))
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self._users.get(user)
        key = hashlib.sha256(
            user.encode() + b"\0" + password.encode() + b"\0" + (hashed or b"")
        ).digest()
        with self._lock:
            if any(hmac.compare_digest(key, k) for k in self._ok):
                return True
        ok = self._bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
        if ok:
            with self._lock:
                self._ok.add(key)
        return ok


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = {
        "TLS10": ssl.TLSVersion.TLSv1,
        "TLS11": ssl.TLSVersion.TLSv1_1,
        "TLS12": ssl.TLSVersion.TLSv1_2,
        "TLS13": ssl.TLSVersion.TLSv1_3,
    }[tls.min_version]
    try:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        if tls.client_ca_file is not None:
            ctx.load_verify_locations(str(tls.client_ca_file))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"web config: cannot load TLS certificate or key: {exc}") from None
    if tls.client_auth_type in ("RequireAnyClientCert", "RequireAndVerifyClientCert"):
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif tls.client_auth_type == "VerifyClientCertIfGiven":
        ctx.verify_mode = ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if ctx.verify_mode != ssl.CERT_NONE and tls.client_ca_file is None:
        raise ConfigError(f"web config: {tls.client_auth_type} needs client_ca_file")
    return ctx


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Scrapers that connect and never send must not pin request threads forever.
    request_timeout = 10.0
    agent: Agent
    tls: ssl.SSLContext | None = None

    def server_activate(self) -> None:
        # The connections being served: a scraper's kept-alive one would otherwise go on
        # being answered by a stopped agent (its request thread outlives the accept loop).
        self.open_connections: set[Any] = set()
        self._connections_lock = threading.Lock()
        super().server_activate()

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self.open_connections)
            self.open_connections.clear()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            # The handshake runs in the request thread (finish_request), never on the accept loop.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.request_timeout)
        with self._connections_lock:
            self.open_connections.add(request)
        try:
            if isinstance(request, ssl.SSLSocket):
                try:
                    request.do_handshake()
                except (ssl.SSLError, OSError) as exc:
                    log.debug("TLS handshake with %s failed: %s", client_address, exc)
                    return
            super().finish_request(request, client_address)
        finally:
            with self._connections_lock:
                self.open_connections.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is routine for a server; one line at debug.
        log.debug("request from %s ended early", client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "headroom-agent"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="headroom"')
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any, head: bool = False) -> None:
        body = json.dumps(obj, allow_nan=False).encode()
        self._send(status, body, "application/json", head)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_POST(self) -> None:
        agent = self.server.agent
        parts = urlsplit(self.path)
        # Read (and drop) any body so the connection stays usable.
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 16))
        if agent.auth is not None and not agent.auth.check(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8")
            return
        if parts.path != "/api/v1/profile":
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        if not agent.config.allow_profile:
            self._json(
                403,
                {"error": "profiling is off: start the agent with --allow-profile "
                 "(HEADROOM_ALLOW_PROFILE=1, allow_profile: true)"},
            )  # fmt: skip
            return
        query = parse_qs(parts.query)
        try:
            seconds = float(query.get("seconds", ["5"])[0])
            if not math.isfinite(seconds):
                raise ValueError
        except ValueError:
            self._json(400, {"error": "seconds must be a number"})
            return
        from monitor.profiling.pyspy import ProfileError
        from monitor.profiling.runner import ProfileBusy

        try:
            prof = agent.profiler.profile_now(seconds)
        except ProfileBusy as exc:
            self._json(409, {"error": str(exc)})
            return
        except ProfileError as exc:
            self._json(422, {"error": str(exc)})
            return
        self._json(200, _finite({"cpu_profile": prof.to_json()}))

    def _route(self, head: bool) -> None:
        agent = self.server.agent
        path = urlsplit(self.path).path
        if path == "/healthz":
            # Open even with basic auth: probes carry no credentials, and it tells nothing secret.
            status, body = agent.health()
            self._json(200 if status == "ok" else 503, body, head)
            return
        if agent.auth is not None and not agent.auth.check(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8", head)
            return
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept"))
            agent.sampler.flush()  # every tick read before this scrape, in every collector
            collected = list(agent.registry.collect())
            body = exposition.render(collected, content_type)
            if body is None:  # what headroom's own writer does not write: the library's
                body = encoder(_Collected(collected))
            self._send(200, body, content_type, head)
        elif path == "/api/v1/snapshot":
            report = agent.monitor.report()
            if report is None:
                self._json(503, {"error": "no reading yet"}, head)
            else:
                self._json(200, _finite(report), head)
        elif path == "/":
            body = (
                b"headroom agent\n/metrics  Prometheus metrics\n/healthz  200 while sampling "
                b"is fresh\n/api/v1/snapshot  the latest report (JSON)\n"
                b"POST /api/v1/profile?seconds=S  profile the engine's hot thread "
                b"(with --allow-profile)\n"
            )
            self._send(200, body, "text/plain; charset=utf-8", head)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head)


class _Collected:
    """Families already collected, as a registry for prometheus-client's writers."""

    def __init__(self, metrics: list[Any]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        return iter(self._metrics)


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class Agent:
    """The sampler, the diagnosis and the HTTP server, started and stopped together."""

    def __init__(
        self,
        config: AgentConfig,
        sources: Sequence[Source] | None = None,
        notes: Sequence[str] = (),
        diagnoser: Any = None,
    ) -> None:
        from monitor.read.sampler import Sampler
        from monitor.watch.pipeline import Monitor

        self.config = config
        web = load_web_config(config.web_config) if config.web_config else WebConfig()
        self.auth = BasicAuth(web.basic_auth_users) if web.basic_auth_users else None
        tls = tls_context(web.tls) if web.tls is not None else None
        if diagnoser is None:
            diagnoser = build_diagnoser(config)
        if sources is None:
            sources, built_notes = build_agent_sources(config)
            notes = (*notes, *built_notes)
        self.notes = tuple(notes)
        self.stats = SelfStats()
        self.sources = [TrackedSource(s, self.stats) for s in sources]
        if config.interval < ENGINE_EVERY_S:
            # Engine and exporter pages (HTTP) are read once a second at faster ticks.
            self.sources = [
                Paced(s, ENGINE_EVERY_S, slack_s=config.interval / 2)
                if s.name in _HTTP_SOURCES
                else s
                for s in self.sources
            ]
        # The ring only needs the diagnosis window (plus its baseline snapshot, and a paced
        # page's own baseline up to a read and a tick before it: Sampler.reach): keeping
        # hours of snapshots would make memory grow with uptime for nothing.
        capacity = int(math.ceil(config.window / config.interval)) + 8
        if config.interval < ENGINE_EVERY_S:
            capacity += int(math.ceil(ENGINE_EVERY_S / config.interval)) + 1
        # A slow endpoint must not hold the others' readings: a tick waits for its sources
        # at most most of an interval, and a late reading joins the next tick.
        self.sampler = Sampler(
            self.sources,
            interval=config.interval,
            capacity=capacity,
            max_wait_s=0.8 * config.interval,
            inline=_LOCAL_SOURCES,
            # Ticks this far apart gain nothing from waiting for the next: made at once.
            digest_every_s=DIGEST_EVERY_S if config.interval < DIGEST_EVERY_S else 0.0,
        )
        self.sampler.subscribe(self.stats.on_snapshot)
        # Verdicts are judged once a step (hysteresis counts steps), and for each read of
        # a newer reading between steps; the window takes every reading.
        self.monitor = Monitor(
            self.sampler,
            diagnoser,
            window_s=config.window,
            notes=self.notes,
            diagnose_every_s=config.diagnose_every_s,
        )
        from monitor.profiling.runner import Profiler

        self.profiler = Profiler(
            self.monitor,
            seconds=min(config.window, 10.0),
            every_s=config.profile_every,
            rate=config.profile_rate,
            auto=config.profile_every > 0,
        )
        self.registry = build_registry(
            self.monitor, self.stats, VERSION, config.interval, config.window
        )
        host, port = config.host_port
        server_cls: type[_Server] = _Server
        if ":" in host:
            server_cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        try:
            self.server = server_cls((host, port), _Handler)
        except OSError as exc:
            self.sampler.close()
            raise ConfigError(f"cannot listen on {config.listen}: {exc.strerror or exc}") from None
        self.server.agent = self
        self.server.tls = tls
        self._server_thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        scheme = "https" if self.server.tls is not None else "http"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def health(self) -> tuple[str, dict[str, Any]]:
        latest = self.sampler.latest()
        if latest is None:
            return "stale", {"status": "stale", "reason": "no tick yet"}
        age = time.monotonic() - latest.t
        status = "ok" if age <= self.config.stale_after_s else "stale"
        # A GPU or host read that hangs (a stuck driver) no longer stops the ticks, but the
        # box is not watched: stale, as when sampling itself stalls. An engine that is down
        # or slow is the engine's trouble, not the agent's: named below, still 200.
        stuck = [
            (s.name, quiet)
            for s, quiet in self.sampler.stuck()
            if s.name not in _HTTP_SOURCES and quiet > self.config.stale_after_s
        ]
        if stuck and status == "ok":
            status = "stale"
        # What is stale, by name: a source (or one of its targets) without data for longer
        # than stale_after_s, and what it last said if it is failing.
        messages = {e.source: e.message for e in latest.errors}
        ages = self.stats.source_ages(
            [(s.name, s.target) for s in self.sources if s.target]
            + [(s.name, "") for s in self.sources if not s.target]
        )
        stale = [
            {
                "source": source,
                "target": target,
                "no_data_for_s": round(quiet, 1),
                "error": messages.get(source),
            }
            for (source, target), quiet in ages.items()
            if quiet > self.config.stale_after_s
        ]
        body: dict[str, Any] = {
            "status": status,
            "last_tick_age_s": round(age, 3),
            "stale_after_s": self.config.stale_after_s,
            "errors": len(latest.errors),
            "stale_sources": stale,
        }
        if stuck:
            body["reason"] = "; ".join(f"{name} read stuck for {q:.1f} s" for name, q in stuck)
        return status, body

    def start(self) -> None:
        self.sampler.start()
        self._server_thread = threading.Thread(
            target=self.server.serve_forever,
            # The accept loop wakes this often only to see whether it should stop, and
            # stop() wakes it at once: each wake costs CPU on an idle box.
            kwargs={"poll_interval": 5.0},
            name="headroom-http",
            daemon=True,
        )
        self._server_thread.start()
        log.info(
            "agent %s listening on %s (interval %g s, window %g s, %d sources)",
            VERSION,
            self.url,
            self.config.interval,
            self.config.window,
            len(self.sources),
        )
        for note in self.notes:
            log.info("note: %s", note)

    def _wake_server(self) -> None:
        host, port = self.address
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        try:
            socket.create_connection((host, port), timeout=0.5).close()
        except OSError:
            pass

    def stop(self) -> None:
        if self._server_thread is not None:
            # shutdown() waits for the accept loop to see its flag; a connection wakes the
            # loop from its long poll instead of waiting it out.
            stopper = threading.Thread(target=self.server.shutdown, daemon=True)
            stopper.start()
            while stopper.is_alive():
                self._wake_server()
                stopper.join(0.05)
            self._server_thread.join(timeout=10)
            self._server_thread = None
        self.server.close_connections()
        self.server.server_close()
        self.sampler.close()
        log.info("agent stopped")

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build_agent_sources(config: AgentConfig) -> tuple[list[Source], list[str]]:
    from monitor.sources.build import build_sources

    return build_sources(
        vllm_urls=config.vllm,
        dcgm_exporter_url=config.dcgm_exporter,
        nvml=config.nvml,
        dcgm=config.dcgm,
        gpm=config.gpm,
        gpu_util_every_s=config.gpu_util_every,
        gpu_processes_every_s=config.gpu_processes_every,
        gpu_energy_every_s=config.gpu_energy_every,
        host=config.host,
        host_pids=config.pids,
        timeout=config.timeout,
        engine=config.engine,
        gpu_indices=config.gpus or None,
    )


def build_diagnoser(config: AgentConfig) -> Any:
    from monitor.diagnosis import Caps, Diagnoser, Thresholds, load_thresholds
    from monitor.diagnosis.peaks import peak_for_key

    thresholds = load_thresholds(config.thresholds) if config.thresholds else Thresholds()
    if config.gpu_model is not None and peak_for_key(config.gpu_model) is None:
        raise ConfigError(f"gpu_model: unknown GPU {config.gpu_model!r}")
    caps = Caps(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        gpu=config.gpu_model,
    )
    return Diagnoser(thresholds, caps, gpu_hour_price=config.gpu_hour_price)
