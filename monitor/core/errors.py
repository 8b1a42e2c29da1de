"""headroom's one exception tree. Every error a user can cause ends as one line and exit 1."""

from __future__ import annotations


class HeadroomError(Exception):
    """Base of every error headroom reports to a user as one line."""


class ConfigError(HeadroomError):
    """A malformed config file, environment variable or flag."""


class SourceUnavailable(HeadroomError):
    """A source cannot start at all (NVML library missing, no GPU, pydcgm absent)."""


class EndpointError(HeadroomError):
    """An endpoint is down, times out, or does not serve what we expect."""


class EndpointAnsweredError(EndpointError):
    """The endpoint answered, with an HTTP error status: the server is up, the path may be wrong."""


class NoDataError(HeadroomError):
    """No source produced any data."""
