"""The lowest layer, loaded by every process (the editor's included): the records that cross
process boundaries, the worker/optimize/init protocols spoken on the pipes, the worker client,
process handling (start, kill, exit with the parent), error kinds and their fixes, and the
profiling lock. Torch-free and LLM-free; imports nothing else of harness."""
