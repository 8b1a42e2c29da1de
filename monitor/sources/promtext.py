"""Fetch a Prometheus text exposition over HTTP and parse only the families we read.

Parsing vLLM's whole 55 KB ``/metrics`` with prometheus-client's parser costs
~8 ms; dropping the families we never read (a set lookup per line) leaves the
histogram buckets we need, ~4 ms more in that parser; a fast path reads those
plain lines itself for well under 1 ms and hands every other family to
prometheus-client (bench/parse_cost.py). Nothing here raises on a malformed
page: a bad line is skipped and counted, and the caller decides what a page
with nothing usable means.
"""

from __future__ import annotations

import base64
import codecs
import http.client
import math
import re
import ssl
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

from prometheus_client.parser import text_string_to_metric_families

from monitor.core.errors import ConfigError, EndpointAnsweredError, EndpointError
from monitor.sources.http_page import BadResponse, PageClient, build_request

# A family's samples may carry these suffixes (histograms, summaries, counters).
SUFFIXES = ("", "_bucket", "_sum", "_count", "_total")


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Exposition:
    """The samples of the wanted families, and how many lines could not be parsed."""

    samples: tuple[Sample, ...]
    skipped_lines: int = 0

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def by_name(self) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {}
        for s in self.samples:
            out.setdefault(s.name, []).append(s)
        return out


def expand_names(bases: Iterable[str]) -> frozenset[str]:
    """Every sample name a family may use: the base name and its suffixed forms."""
    return frozenset(base + suffix for base in bases for suffix in SUFFIXES)


def _line_name(line: str) -> str | None:
    if line.startswith("#"):
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
            return parts[2]
        return None
    return _sample_name(line)


def _sample_name(line: str) -> str:
    # The text before the first "{", " " or tab: three C-level cuts cost a third
    # of one regex match, and this runs on every line of the page.
    name = line.partition(" ")[0]
    if "{" in name:
        name = name.partition("{")[0]
    if "\t" in name:
        name = name.partition("\t")[0]
    return name


def select_lines(text: str, names: Collection[str]) -> str:
    """Keep the lines (samples and their # HELP/# TYPE) whose metric name is in ``names``.

    ``names`` must hold the exact sample names (see ``expand_names``).
    """
    kept = [line for line in text.splitlines() if _line_name(line) in names]
    return "\n".join(kept) + "\n" if kept else ""


# The fast path reads only lines in the plain form every exporter we scrape
# writes: ``name{label="value",...} number`` or ``name number``, no escapes, no
# timestamp, no exemplar, single spaces. prometheus-client's parser spends
# ~18 us on such a line (a Python loop per character); one regex match does it
# in ~1 us. Anything else goes to prometheus-client, a family at a time, so
# what the page means never depends on this regex.
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
# [0-9], not \d: \d also matches other scripts' digits, which float() accepts.
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN"
_SIMPLE_SAMPLE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})? ({_NUMBER})"
)
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_SIMPLE_COMMENT = re.compile(
    r"# (?:HELP ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: .*)?|TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) ([a-z]+))"
)
# Sample names a family may hold, by its # TYPE (as prometheus-client reads them).
_TYPE_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}
# Past 308 digits float(int(s)) overflows where float(s) gives inf: leave such
# values to prometheus-client, which reads integers through int().
_MAX_NUMBER_CHARS = 300


_NUMBER_ONLY = re.compile(_NUMBER)
_NUMBERS_ONLY = re.compile(rf"(?:{_NUMBER})(?: (?:{_NUMBER}))*")
_NOT_DECIMAL = re.compile(r"[^0-9.eE+\- ]")
# Scrape after scrape a page repeats its series and only the numbers change:
# remember each plain line's text before the number (its name and labels,
# already checked) so a repeat costs a dict lookup, not the line regex.
_PREFIXES: dict[str, tuple[str, dict[str, str]]] = {}
_MAX_PREFIXES = 4096


def _simple_sample(line: str) -> Sample | None:
    # In a plain line the number holds no space, so the last one ends the prefix.
    prefix, _, number = line.rpartition(" ")
    known = _PREFIXES.get(prefix)
    if known is not None:
        if _NUMBER_ONLY.fullmatch(number) is None:
            return None
        name, labels = known
    else:
        m = _SIMPLE_SAMPLE.fullmatch(line)
        if m is None:
            return None
        name, body = m.group(1, 2)
        labels = {}
        if body:
            pairs = _PAIR.findall(body)
            labels = dict(pairs)
            if len(labels) != len(pairs):
                return None  # a repeated label: prometheus-client rejects the line
        if len(_PREFIXES) >= _MAX_PREFIXES:
            _PREFIXES.clear()  # a page with ever-new series: start over, stay bounded
        _PREFIXES[prefix] = (name, labels)
    if len(number) > _MAX_NUMBER_CHARS:
        return None
    value = float(number)
    if not value and number[0] == "-" and number[1:].isdigit():
        value = 0.0  # prometheus-client reads an integer by int(): "-0" is +0 there
    # A copy: the caller owns its labels, the cache keeps its own.
    return Sample(name, dict(labels) if labels else {}, value)


# Per set of wanted names (the flavours' frozensets, made once): line prefix -> unwanted.
_SKIPPED: dict[frozenset[str], dict[str, bool]] = {}


def _skip_cache(names: frozenset[str]) -> dict[str, bool]:
    cache = _SKIPPED.get(names)
    if cache is None:
        if len(_SKIPPED) >= 16:
            _SKIPPED.clear()
        cache = _SKIPPED[names] = {}
    return cache


@dataclass(frozen=True, slots=True)
class _Family:
    """A run of lines that prometheus-client would read from a fresh state.

    It starts at a # HELP/# TYPE line naming a family other than the current
    one; ``events`` is None once a line needs prometheus-client.
    """

    lines: list[str]
    events: list[Sample | tuple[str, str, str]] | None
    # The page's line number of each event (comments' too), parallel to ``events``.
    origins: list[int]


def _split_families(lines: Iterable[str], names: Collection[str] | None) -> Iterator[_Family]:
    """Group the wanted lines into families, reading the plain ones on the way."""
    buf: list[str] = []
    events: list[Sample | tuple[str, str, str]] | None = []
    origins: list[int] = []
    # The family prometheus-client is in is the last # HELP/# TYPE name or none
    # (a sample outside it ends it), so a comment naming another family starts
    # afresh and may be read apart. None: unknown, after a comment the fast
    # path cannot read; no split until the next comment names the family.
    last: str | None = ""
    remember = isinstance(names, frozenset)
    skipped = _skip_cache(names) if remember else {}
    for at, line in enumerate(lines):
        if not line:
            continue
        if line[0] == "#":
            if names is not None:
                parts = line.split(None, 3)  # as _line_name, inlined: it runs per line
                if len(parts) < 3 or parts[1] not in ("HELP", "TYPE") or parts[2] not in names:
                    continue
            m = _SIMPLE_COMMENT.fullmatch(line)
            if m is None:
                buf.append(line)
                events = None
                last = None
                continue
            help_name, type_name, typ = m.groups()
            fam = help_name or type_name
            if last is not None and fam != last and buf:
                yield _Family(buf, events, origins)
                buf, events, origins = [], [], []
            last = fam
            buf.append(line)
            if events is not None:
                events.append(("HELP", fam, "") if help_name else ("TYPE", fam, typ))
                origins.append(at)
            continue
        if names is not None:
            # The name ends at or before the first space, so the text before the last
            # space decides it: a repeated series (most of each scrape) costs one lookup.
            prefix = line.rpartition(" ")[0]
            skip = skipped.get(prefix) if prefix else None
            if skip is None:
                skip = _sample_name(line) not in names
                if prefix and remember:
                    if len(skipped) >= _MAX_PREFIXES:
                        skipped.clear()
                    skipped[prefix] = skip
            if skip:
                continue
        buf.append(line)
        sample = _simple_sample(line) if events is not None else None
        if sample is not None:
            events.append(sample)  # type: ignore[union-attr] - not None here
            origins.append(at)
            continue
        events = None
        if line.lstrip().startswith("#"):
            last = None  # a comment once stripped: it may name a family
    if buf:
        yield _Family(buf, events, origins)


def _replay(
    events: list[Sample | tuple[str, str, str]],
    origins: list[int],
    out: list[Sample],
    out_origins: list[int],
) -> None:
    """What prometheus-client's text parser makes of these lines, minus the parsing.

    It groups samples under the last # HELP/# TYPE, starts an untyped family of
    one for a sample whose name that family does not allow, and renames a
    counter's samples to ``<name>_total`` when the family name lacks it. Each
    sample's line number goes to ``out_origins``, in step with ``out``.
    """
    name = ""
    typ = "untyped"
    allowed: tuple[str, ...] = ()
    family: list[Sample] = []
    family_at: list[int] = []

    def build() -> None:
        if typ == "counter" and not name.endswith("_total"):
            out.extend(Sample(s.name + "_total", s.labels, s.value) for s in family)
        else:
            out.extend(family)
        out_origins.extend(family_at)

    for ev, at in zip(events, origins):
        if isinstance(ev, Sample):
            if ev.name in allowed:
                family.append(ev)
                family_at.append(at)
            else:
                if name:
                    build()
                name, typ, allowed, family, family_at = "", "untyped", (), [], []
                out.append(ev)
                out_origins.append(at)
            continue
        kind, fam, new_typ = ev
        if fam != name:
            if name:
                build()
            name, typ, family, family_at = fam, "untyped", [], []
            allowed = (fam,)
        if kind == "TYPE":
            typ = new_typ
            allowed = tuple(fam + suffix for suffix in _TYPE_SUFFIXES.get(typ, ("",)))
    if name:
        build()


def _samples(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield Sample(s.name, dict(s.labels), float(s.value))


def _parse_slow(text: str, out: list[Sample]) -> int:
    """prometheus-client's reading of ``text``; the number of lines skipped.

    The whole text is parsed in one go; if prometheus-client rejects it, each
    sample line is parsed on its own and the bad ones are skipped, so one
    garbled line does not hide every other metric.
    """
    try:
        out.extend(tuple(_samples(text)))
        return 0
    except Exception:  # the parser raises ValueError, IndexError, ... on bad input
        pass
    skipped = 0
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            out.extend(tuple(_samples(line + "\n")))
        except Exception:
            skipped += 1
    return skipped


class Split(NamedTuple):
    """A page's lines (str.splitlines) and each line but its number."""

    lines: list[str]
    key: list[str]


class PageLayout:
    """What a page's series were, so that the next page from the same server, whose
    lines repeat all but their numbers, is read by its numbers alone.

    A server writes the same series in the same order scrape after scrape; only
    the numbers move (and a series now and then appears or goes). When every
    line but its number matches the last page's, the samples are the last ones
    with new values: no family grouping, no name filtering, no label parsing.
    A page that differs anywhere, or a number the fast path would not read,
    takes the whole parse again. One layout per scraped URL (not thread-safe).
    """

    __slots__ = ("_key", "_names", "_origins", "_heads", "generation")

    def __init__(self) -> None:
        self._key: list[str] | None = None
        self._names: Collection[str] | None = None  # what the layout's page was narrowed to
        self._origins: tuple[int, ...] = ()
        self._heads: tuple[tuple[str, dict[str, str]], ...] = ()
        # Bumped whenever the series change: a caller keeping what it derived from
        # the samples' names and labels knows when to derive it again.
        self.generation = 0

    def repeat(self, text: str, names: Collection[str]) -> tuple[list[float] | None, Split]:
        """The numbers of ``text``'s remembered samples, in the samples' order, where its
        lines but for their numbers are the last page's (narrowed to the same ``names``):
        what a caller that derived its figures from the samples' names and labels (for
        this ``generation``) needs to derive them again. With them, how the text was
        split: a parse() of a text that was no repeat takes it rather than split again."""
        lines = text.splitlines()
        key = _line_key(lines)
        return self.numbers(lines, key, names), Split(lines, key)

    def numbers(
        self, lines: list[str], key: list[str], names: Collection[str]
    ) -> list[float] | None:
        if names is not self._names or key != self._key:
            return None
        if not self._origins:
            return []
        texts = [lines[at].rpartition(" ")[2] for at in self._origins]
        # Each must be a number the fast path reads, as _simple_sample would (a number
        # holds no space, so one check covers them all). Digits, points, exponents and
        # signs alone are such a number exactly when float() reads them; anything else
        # (NaN, Inf, another spelling) takes the full match.
        joined = " ".join(texts)
        if max(map(len, texts)) > _MAX_NUMBER_CHARS:
            return None
        if _NOT_DECIMAL.search(joined) is not None and _NUMBERS_ONLY.fullmatch(joined) is None:
            return None
        try:
            values = list(map(float, texts))
        except ValueError:  # digits and signs that are no number ("1e", "--1")
            return None
        if "-" in joined:
            for i, number in enumerate(texts):
                if number[0] == "-" and not values[i] and number[1:].isdigit():
                    values[i] = 0.0  # as _simple_sample: "-0" is an integer, +0
        return values

    def read(
        self, lines: list[str], key: list[str], names: Collection[str]
    ) -> tuple[Sample, ...] | None:
        """The samples of a page whose lines, but for their numbers, are the last page's
        (narrowed to the same ``names``)."""
        values = self.numbers(lines, key, names)
        if values is None:
            return None
        return tuple(
            Sample(name, dict(labels) if labels else {}, value)
            for (name, labels), value in zip(self._heads, values)
        )

    def remember(
        self,
        key: list[str] | None,
        names: Collection[str],
        samples: list[Sample],
        origins: list[int],
    ) -> None:
        self._key = key
        self._names = names
        self._origins = tuple(origins)
        self._heads = tuple((s.name, dict(s.labels)) for s in samples)
        self.generation += 1


def _line_key(lines: list[str]) -> list[str]:
    # Each line but its number; a comment whole (a # TYPE's last word is the type).
    return [line if line[:1] == "#" else line.rpartition(" ")[0] for line in lines]


def parse(
    text: str,
    names: Collection[str] | None = None,
    layout: PageLayout | None = None,
    split: Split | None = None,
) -> Exposition:
    """Parse ``text`` (first narrowed to ``names`` when given); never raises.

    Plain lines are read by the fast path; a family with any other line is
    parsed by prometheus-client, and if that rejects it, line by line, the bad
    ones skipped, so one garbled line hides neither its family nor the others.
    With a ``layout`` (and ``names``), a page that repeats the last one's series
    is read by its numbers alone (``PageLayout``); ``split``: how ``layout.repeat``
    split this text, already found no repeat.
    """
    # Split as the old two-step path did: select_lines by str.splitlines, and
    # prometheus-client (reading a StringIO) at "\n" only.
    key: list[str] | None = None
    if split is not None and layout is not None and names is not None:
        lines, key = split  # repeat() found this text no repeat of the last page
    else:
        lines = text.splitlines() if names is not None else text.split("\n")
        if layout is not None and names is not None:
            key = _line_key(lines)
            again = layout.read(lines, key, names)
            if again is not None:
                return Exposition(again, 0)
    samples: list[Sample] = []
    origins: list[int] = []
    skipped = 0
    plain = True
    for family in _split_families(lines, names):
        if family.events is not None:
            _replay(family.events, family.origins, samples, origins)
        else:
            plain = False
            skipped += _parse_slow("\n".join(family.lines) + "\n", samples)
    if key is not None and layout is not None:
        # Only a page read wholly by the fast path has a sample for each line it kept.
        layout.remember(key if plain else None, names, samples, origins if plain else [])
    return Exposition(tuple(samples), skipped)


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def metrics_url(url: str, what: str) -> str:
    """Normalise a base URL (``http://host:port``) or a full one to the URL to scrape.

    A URL without a path gets ``/metrics``; one with a path is taken as given.
    """
    raw = url.strip()
    if not raw:
        raise ConfigError(f"empty {what} URL")
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise ConfigError(f"invalid {what} URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"invalid {what} URL {url!r}: expected http://HOST:PORT[/metrics]")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def display_url(url: str) -> str:
    """The URL without credentials, for messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _connect_reason(exc: Exception) -> str:
    msg = str(exc) or type(exc).__name__
    low = msg.lower()
    if "refused" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "unknown host"
    # "[Errno 113] No route to host" -> "no route to host"
    msg = re.sub(r"^\[Errno -?\d+\]\s*", "", msg)
    return msg[:1].lower() + msg[1:]


class Scraper:
    """GETs one metrics URL tick after tick over one kept-alive connection.

    Plain http goes through http_page's client, which sends a request built once
    and cuts the answer out of one reusable buffer: 1.0 ms of CPU a GET of vLLM's
    page at one GET a second against 2.6 ms for the standard library's http.client
    (bench/results/http_get_cost.txt); httpx cost more again (parse_cost.txt).
    https keeps http.client: TLS on a scrape is rare and not worth a second client.
    The timeout bounds a whole get() on plain http: connect, send and every wait
    for the answer share it, so a server trickling bytes cannot hold a tick.
    No proxy from the environment (nothing may sit between us and a server on this
    host), no redirects, and the page asked for uncompressed: prometheus-client's
    exposition (vLLM's, SGLang's) gzips whenever asked, ~5 ms of the engine's
    API-server CPU per scrape at level 9 on 55 KB, and ~0.6 ms of ours to inflate
    it, to save bandwidth a 1 s scrape does not need. Credentials in the URL are
    sent as basic auth and never shown. Not thread-safe: one source, one scraper.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.url = url
        self.timeout = float(timeout)
        self._shown = display_url(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {
            "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "identity",
        }
        if parts.username is not None or parts.password is not None:
            user = unquote(parts.username or "")
            secret = unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._conn: http.client.HTTPConnection | None = None
        self._page: PageClient | None = None
        if not self._https:
            port = self._port if self._port is not None else 80
            request = build_request(self._host, port, self._target, self._headers)
            self._page = PageClient(self._host, port, request)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(
                    self._host,
                    self._port,
                    timeout=self.timeout,
                    context=ssl.create_default_context(),
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self._host, self._port, timeout=self.timeout
                )
        return self._conn

    def get(self) -> str:
        """The page's text; raise EndpointError with one line a user can act on."""
        if self._page is not None:
            return self._get_plain(self._page)
        return self._get_tls()

    def _get_plain(self, client: PageClient) -> str:
        shown = self._shown
        deadline = time.monotonic() + self.timeout
        for _ in (1, 2):
            reused = client.connected
            if not reused:
                try:
                    client.connect(deadline)
                except TimeoutError:
                    client.close()
                    raise EndpointError(self._late()) from None
                except OSError as exc:
                    client.close()
                    reason = _connect_reason(exc)
                    raise EndpointError(f"cannot connect to {shown}: {reason}") from None
            try:
                response = client.get(deadline)
            except TimeoutError:
                raise EndpointError(self._late()) from None
            except ConnectionError as exc:
                if reused:
                    continue  # a kept-alive connection the server closed (vLLM's does now and then)
                reason = _connect_reason(exc)
                raise EndpointError(f"{shown} closed the connection: {reason}") from None
            except (OSError, BadResponse) as exc:
                raise EndpointError(f"cannot read {shown}: {_connect_reason(exc)}") from None
            if response.status != 200:
                raise EndpointAnsweredError(
                    f"{shown} answered HTTP {response.status} {response.reason}".rstrip()
                )
            return response.body.decode(_charset(response.content_type), errors="replace")
        raise AssertionError("unreachable")  # pragma: no cover

    def _late(self) -> str:
        return f"{self._shown} did not answer within {self.timeout:g} s"

    def _get_tls(self) -> str:
        shown = self._shown
        late = self._late()
        for attempt in (1, 2):
            conn = self._connection()
            if conn.sock is None:
                try:
                    conn.connect()
                except TimeoutError:
                    self.close()
                    raise EndpointError(late) from None
                except OSError as exc:
                    self.close()
                    if attempt == 1:
                        continue  # a connect that raced a restart
                    reason = _connect_reason(exc)
                    raise EndpointError(f"cannot connect to {shown}: {reason}") from None
            try:
                conn.request("GET", self._target, headers=self._headers)
                response = conn.getresponse()
                body = response.read()
            except TimeoutError:
                self.close()
                raise EndpointError(late) from None
            except (ConnectionError, http.client.IncompleteRead) as exc:
                self.close()
                if attempt == 1:
                    continue  # a kept-alive connection the server closed (vLLM's does now and then)
                reason = _connect_reason(exc)
                raise EndpointError(f"{shown} closed the connection: {reason}") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise EndpointError(f"cannot read {shown}: {_connect_reason(exc)}") from None
            if response.status != 200:
                reason = response.reason or ""
                raise EndpointAnsweredError(
                    f"{shown} answered HTTP {response.status} {reason}".rstrip()
                )
            return body.decode(_charset(response.getheader("Content-Type")), errors="replace")
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._page is not None:
            self._page.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _charset(content_type: str | None) -> str:
    for part in (content_type or "").split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            name = value.strip('"')
            try:
                codecs.lookup(name)
            except LookupError:
                break
            return name
    return "utf-8"
