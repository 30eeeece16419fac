"""The lowest layer, loaded by every process (the editor's too): the records and protocols that
cross processes, the worker client, process handling, error kinds and their fixes, the profiling
lock. Torch-free and LLM-free; imports nothing else of harness."""
