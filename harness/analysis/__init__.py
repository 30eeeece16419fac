"""Pure analysis, torch-free: CUDA source, nvcc and ptxas output, occupancy, static checks, ncu
reports and their metrics, classification into performance states, findings, text reports. Imports
only harness.protocol."""
