"""Many hosts at once: read the agents' headroom_* series back from a PromQL API, rank the
hosts by wasted GPU, and render the fleet as a table or JSON."""
