"""The simulator's errors. It imports nothing of headroom's: the CLI maps these to its own tree."""

from __future__ import annotations


class SimError(Exception):
    """Base of every error the simulator reports to a user as one line."""


class SimConfigError(SimError):
    """A bad scenario name, config file, key or value."""


class SimStartError(SimError):
    """The simulator's process did not come up."""
