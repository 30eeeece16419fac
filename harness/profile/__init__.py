"""Profiling a checked candidate in the worker: Nsight Compute runs (a plain-CUDA launcher
replayed through the native driver, harness/native/, without Python) and the in-process
counters (CUPTI range profiler). Worker-only."""
