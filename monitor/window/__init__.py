"""A window of snapshots in, per-GPU/engine/host statistics out: the full window, the live one, and the scope names."""
