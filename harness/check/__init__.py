"""Checking a built candidate in the worker: verification against the reference, the runtime
integrity snapshot, the kernel watch (CUPTI launch callbacks), the stream gate, timing and the
eager/torch.compile baselines, compute-sanitizer, standalone programs. Worker-only (torch)."""
