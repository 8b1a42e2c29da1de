"""Reading over time: the sampler that ticks the sources into a ring of snapshots, and recordings of them."""
