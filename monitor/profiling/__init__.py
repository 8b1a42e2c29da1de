"""Which code: Python stacks of the engine's hot threads (py-spy), and the GPU-side hand-off.

``stacks`` turns py-spy's raw output into per-thread function shares (pure);
``pyspy`` runs py-spy and turns its failures into one-line refusals;
``hot_path`` says which kind of work dominates and what to do about it;
``runner`` takes profiles in the background at a bounded rate;
``trace`` summarises a torch-profiler (Chrome) trace; ``vllm_profiler``
drives vLLM's own profiler endpoints; ``handoff`` writes the next command
for a kernel profiler.
"""
