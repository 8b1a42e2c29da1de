"""Helpers for the profiling tests live in profiling_support; the agent's in tests/agent."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
