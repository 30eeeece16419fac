"""Build, verify, time and profile CUDA kernels. Knows nothing of editors or LLMs."""
