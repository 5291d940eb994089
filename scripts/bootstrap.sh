#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv.
# torch is installed first with its exact CPU pin, so the package's own
# dependency range is already satisfied and pip downloads no other build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# a .venv cut short (its creation killed before pip was in it) is made again, not used half-made
{ [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; } || "$PY" -m venv --clear .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[test,ray,peers]'  # ray: Flower's Ray engine and the Ray executor; peers: the bench's PyOD detectors — all tested in CI
