#!/usr/bin/env bash
# Minimum-versions stage: the project installed at the lower bound of every runtime dependency range it declares
# (tests/min_versions/lower_bounds.txt, pip constraints; what those packages need in turn resolves freely), and the
# training, sampling and export tests run there. A bound the suite does not pass at is not a bound.
#
#   bash tests/min_versions/run.sh [--build-only]
#
# The environment is .venv-min (Python 3.11: PYTHON311, else python3.11 or python3 when it is 3.11). It is rebuilt
# when lower_bounds.txt, pyproject.toml or the interpreter change (a stamp holds their digest), and the stamp is
# written only after the install succeeded. torch's lower bound is PyPI's build (CUDA 13 libraries included, about
# 5 GB installed): PyPI has no CPU-only torch 2.11, and the CUDA build runs on a CPU. Exit status: the build's or
# pytest's.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv-min
BOUNDS=tests/min_versions/lower_bounds.txt
TESTS=(tests/test_tiny.py tests/test_processor.py tests/test_versions.py tests/test_recipes.py tests/test_train_*.py
       tests/test_rehearse_recipes.py tests/test_learning.py tests/test_vllm_importance_sampling.py
       tests/test_eval_batched_sampling.py tests/test_release.py tests/test_release_card.py)
say() { printf '[min-versions] %s\n' "$*"; }

py=""
for candidate in ${PYTHON311:-python3.11 python3}; do
    if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = 3.11 ]; then
        py=$(command -v "$candidate")
        break
    fi
done
if [ -z "$py" ]; then
    echo "error: the minimum-versions stage needs Python 3.11 (numpy 1.26 has no wheel for later ones): none found${PYTHON311:+ (PYTHON311=$PYTHON311)}; put python3.11 on PATH or set PYTHON311" >&2
    exit 2
fi
digest=$({ cat "$BOUNDS" pyproject.toml && "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
if [ -f "$VENV/.siq-stamp" ] && [ "$(cat "$VENV/.siq-stamp")" = "$digest" ]; then
    say "$VENV is up to date"
else
    say "building $VENV with $py at the lower bounds of $BOUNDS"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --progress-bar off -c "$BOUNDS" -e '.[train]' pytest hypothesis
    echo "$digest" > "$VENV/.siq-stamp.tmp"
    mv "$VENV/.siq-stamp.tmp" "$VENV/.siq-stamp"
fi
# every pinned package that is installed is at its pin (a constraint the resolver could not honour stops here)
"$VENV/bin/python" - "$BOUNDS" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

wrong, found = [], []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, pin = line.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        wrong.append(f"{name} is not installed (pinned {pin})")
        continue
    found.append(f"{name} {have}")
    if have.split("+")[0] != pin:
        wrong.append(f"{name} {have} installed, pinned {pin}")
print("[min-versions] installed: " + ", ".join(found))
if wrong:
    sys.exit("error: " + "; ".join(wrong))
EOF
if [ "${1:-}" = --build-only ]; then
    exit 0
fi
say "running ${#TESTS[@]} test files"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"
