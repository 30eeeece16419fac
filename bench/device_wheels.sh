#!/usr/bin/env bash
# Download, into .whl/, every wheel that installing this project on a lent GPU machine needs
# (Python 3.12 on x86-64 Linux, no network, PyTorch preinstalled: /work/.library/device/
# KINDS.md lists what its image holds): the project's dependencies (pyproject.toml) and theirs
# that the image lacks or may hold in too old a version, and the build backend of the project
# (setuptools, wheel). bench/fresh_machine.py installs from them; `carry: [".whl"]` takes them
# there (they are git-ignored). All but ncu-report: its wheel (17 MB, NVIDIA's host library
# inside) would take a call past the 64 MiB it carries with the checkout (~43 MB); the machine's
# own Nsight Compute has the same module (extras/python), which fresh_machine.py uses.
#
#   bash bench/device_wheels.sh            # then check: bash bench/device_wheels.sh --check
#   bash bench/device_wheels.sh --tests    # the GPU tests' pytest plugins, into .whl-test/
#
# The versions are the ones the tests run with; keep them in step with the venv (`pip list`).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
    # the project's own dependencies (pyproject.toml)
    pygls==2.1.1 lsprotocol==2025.0.0 openai==3.57.0 msgspec==0.22.0 watchdog==7.1.0
    tree-sitter==0.26.1 tree-sitter-cuda==0.21.2 platformdirs==4.14.8
    psycopg==3.3.9 psycopg-binary==3.3.9
    # theirs: pygls/lsprotocol -> cattrs, attrs; openai -> httpx2 (not httpx), httpcore2,
    # truststore, jiter, pydantic (pydantic-core, annotated-types, typing-inspection), anyio,
    # sniffio; and what several need in a recent version (typing-extensions, idna, h11)
    cattrs==26.2.1 attrs==26.1.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
    h11==0.16.0 anyio==4.16.0 idna==3.20 sniffio==1.3.1 jiter==0.19.0 pydantic==2.14.4
    pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
    # the build of the project itself (pyproject.toml [build-system]; wheel needs packaging);
    # setuptools below 82, which the machine's torch 2.11 requires
    setuptools==81.0.0 wheel==0.48.0 packaging==26.4
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_25_x86_64 manylinux_2_24_x86_64
    manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
TARGET=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for platform in "${PLATFORMS[@]}"; do TARGET+=(--platform "$platform"); done
TARGET+=(--platform any)

# The GPU tests' own: the machine's image has pytest and xdist, not pytest-asyncio or
# pytest-lsp; into .whl-test/, carried beside .whl/ (CONTRIBUTING.md, "GPU tests").
TEST_WHEELS=(pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 pytest-asyncio==1.5.0 pytest-lsp==1.0.1)
if [[ "${1:-}" == "--tests" ]]; then
    mkdir -p .whl-test
    python3 -m pip download --no-deps --only-binary=:all: "${TARGET[@]}" -d .whl-test \
        "${TEST_WHEELS[@]}"
    exit 0
fi

if [[ "${1:-}" == "--check" ]]; then
    # Resolve the project's dependencies for Python 3.12 from .whl/ alone, as the machine will
    # (no index): a wheel missing, or two versions of one, fails. But ncu-report (above) and
    # psutil, which the image holds (KINDS.md).
    requirements=$(python3 -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"));
print("\n".join(r for r in d["project"]["dependencies"]
                if not r.startswith(("ncu-report", "psutil"))))')
    report=$(mktemp)
    # shellcheck disable=SC2086 # one requirement a line, none with a space
    python3 -m pip install --dry-run --ignore-installed --no-index --find-links .whl \
        --only-binary=:all: "${TARGET[@]}" --target "$(mktemp -d)" --report "$report" -q \
        $(echo "$requirements" | tr '\n' ' ') setuptools wheel
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
print(len(r['install']), 'to install:', ', '.join(sorted(i['metadata']['name'] for i in r['install'])))" "$report"
    names=$(ls .whl | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort)
    if [[ -n "$(echo "$names" | uniq -d)" ]]; then
        echo "two versions of: $(echo "$names" | uniq -d)" >&2
        exit 1
    fi
    exit 0
fi

mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: "${TARGET[@]}" -d .whl "${WHEELS[@]}"
du -sh .whl
