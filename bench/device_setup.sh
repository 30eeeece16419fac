#!/usr/bin/env bash
# Prepare a lent GPU machine (no network, PyTorch preinstalled) to run this checkout: install
# the wheels carried in .whl/ (see the device tool's README) into /tmp/site and put them and
# the checkout on PYTHONPATH. Source it: `. bench/device_setup.sh`.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
# ncu_report: the machine's Nsight Compute has it (extras/python) where .whl/ does not
# (bench/device_wheels.sh leaves its 17 MB wheel out: see there)
if ! ls .whl/ncu_report-*.whl >/dev/null 2>&1 && command -v ncu >/dev/null; then
    # CUDA's bin/ncu is a script that runs nsight-compute-*/ncu: look there and beside it
    ncu_bin=$(dirname "$(readlink -f "$(command -v ncu)")")
    for folder in "$ncu_bin" "$(dirname "$ncu_bin")" "$(dirname "$ncu_bin")"/nsight-compute* \
        /opt/nvidia/nsight-compute/*; do
        if [ -f "$folder/extras/python/ncu_report.py" ]; then
            PYTHONPATH=$PYTHONPATH:$folder/extras/python
            break
        fi
    done
fi
export PYTHONUNBUFFERED=1
# The `kernelblaster` command, as the console script would be.
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m kernelblaster "$@"\n' > /tmp/bin/kernelblaster
chmod +x /tmp/bin/kernelblaster
export PATH=/tmp/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, kernelblaster, ncu_report; print('torch', torch.__version__, torch.cuda.get_device_name())"
set +e
