"""The agent: its HTTP API and settings, the Prometheus exporter and its /metrics page."""
