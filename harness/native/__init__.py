"""The native driver: a small C++ program that calls a plain-CUDA target's launcher once on the
reference's seeded inputs, outside Python (no torch, no second CUDA context, every buffer its
own cudaMalloc). Its source per launcher signature and its build (`native_driver.py`,
`native_driver.cpp`), the call's spec and data (`driver_inputs.py`), and the command that
runs it (`driver_run.py`), for Nsight Compute's pass (harness/profile/) and compute-sanitizer's
(harness/check/). Worker-only."""
