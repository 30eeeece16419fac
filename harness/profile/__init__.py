"""Profiling a checked candidate in the worker: Nsight Compute runs, the in-process counters
(CUPTI range profiler), and the native driver that replays a plain-CUDA launcher under ncu
without Python. Worker-only."""
