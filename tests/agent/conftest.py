"""Fixtures for the agent tests; the helpers live in agent_support (a unique module name,
so `from agent_support import ...` never picks up another folder's conftest)."""

from agent_support import start_agent

__all__ = ["start_agent"]
