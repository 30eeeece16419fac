"""KernelBlaster: a CUDA language server that profiles, explains and rewrites GPU kernels."""

__version__ = "0.1.0"
