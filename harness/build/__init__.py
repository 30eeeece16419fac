"""Building a target with nvcc: the build spec and command, nvcc's own steps run without its
shell, the content-hash build cache, builds beside the user's file, the GPU's arch, and fixes
for failures with a known remedy. Torch-free; imports harness.protocol and harness.analysis."""
