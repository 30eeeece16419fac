"""Pure analysis, torch-free: CUDA source, nvcc and ptxas output, occupancy, static checks of a
candidate's source, reading ncu reports, metrics, classification into performance states,
findings, and the text reports of build and check results. Imports only harness.protocol."""
