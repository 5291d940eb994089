#!/usr/bin/env bash
# Here, before a call of the device tool: what benchmarks/gpu_check.sh needs on the GPU machine, in .gpu/ (which
# git ignores through .git/info/exclude, so it travels only where a call's `carry` names it).
#   .gpu/whl   the wheels the machine's image lacks for fedgca's runs there (dp-accounting for the DP methods, and
#              its dm-tree); flwr and its ~14 MB of dependencies stay behind: the checks run no Flower app
#   .gpu/data  a link to the data directory; a call carries the folders it needs through it (.gpu/data/magic ...)
# The working tree travels too (26 MB); a call carries at most 64 MiB, so the tabular and the vision parts of
# gpu_check.sh are two calls: see its header for each one's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qsx '/.gpu/' .git/info/exclude || { mkdir -p .git/info && echo '/.gpu/' >> .git/info/exclude; }
mkdir -p .gpu/whl
ln -sfn "$(realpath "${FEDGCA_DATA_DIR:-../shared/data}")" .gpu/data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/whl dp-accounting==0.6.0 dm-tree==0.1.10
du -sh .gpu/whl "$(realpath .gpu/data)"/{adbench,magic,academic,adult,bank,fashion_mnist}
