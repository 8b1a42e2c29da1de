"""Shared ground: the one error type, where files go, and the settings-file reader. Imports nothing of ours."""
