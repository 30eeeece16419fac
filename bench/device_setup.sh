#!/usr/bin/env bash
# Prepare a lent GPU machine (no network, PyTorch preinstalled) to run this checkout: install
# the wheels carried in .whl/ (see the device tool's README) into /tmp/site and put them and
# the checkout on PYTHONPATH. Source it: `. bench/device_setup.sh`.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
# The `kernelblaster` command, as the console script would be.
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m kernelblaster "$@"\n' > /tmp/bin/kernelblaster
chmod +x /tmp/bin/kernelblaster
export PATH=/tmp/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, kernelblaster; print('torch', torch.__version__, torch.cuda.get_device_name())"
set +e
