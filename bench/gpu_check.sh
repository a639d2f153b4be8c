#!/usr/bin/env bash
# GPU check of a node (one H100/H200, about 10 minutes, offline): a pass/fail table and figures for
#   vllm-sample   spatialiq eval sample --engine vllm on the tiny model: greedy k=10 and k=10 at temperature 1
#   grpo-vllm     TRL GRPO with colocated vLLM, 2 steps on the tiny model (dynamic sampling on)
#   sft-zero3     LoRA SFT under DeepSpeed ZeRO-3 for 2 steps, merged export loaded back
#   mitsuba-cuda  Mitsuba cuda_ad_rgb id pass (ground truth) equal to scalar_rgb's
#   train-7b      random-weight Qwen2.5-VL-7B built from the shipped dapo_tight_7b recipe (bench/bench_train.py
#                 --recipe dapo_tight_7b): tokens/s, peak memory, MFU of two SFT and two RL steps; writes no
#                 checkpoint (105 s on one H200 for the build and both phases, limit 240 s)
# Two cheap stages run everywhere and catch script errors: gpu-tests-collect (pytest collects tests/gpu) and
# train-plan (bench_train.py --dry-run: 7B parameter count, lengths, FLOP factors, no weights).
#
#   bash bench/gpu_check.sh [--dry-run] [--run-pytest] [--out DIR] [--budget SECONDS]
#
# Each stage has a time limit (STAGE_LIMITS below); they add up to the default budget (660 s, 11 minutes of
# GPU time), and a --budget below their sum is refused (exit 2): a late stage loses at most the seconds the script
# spends between stages and the 10 s grace of an earlier stage that was killed, never a whole stage's time.
# SPATIALIQ_GPU_CHECK_LIMITS="NAME:SECONDS ..." overrides limits (e.g. a loaded machine, or tests).
# Runs in the GPU-node environment (pip install -e '.[train,render,gpu]': the gpu extra brings pytest); a missing
# pytest fails the pytest stages with that install named.
# A stage whose engine is not installed (STAGE_ENGINES: vLLM, DeepSpeed, Mitsuba; no stage needs Ray) is not run:
# it reports ABSENT, naming the module and the install, and counts neither as a pass nor as a failure.
# Exit status: 0 only when a GPU is visible and every stage passed; 1 when a stage failed or did not run (SKIP,
# e.g. every test of a pytest stage skipped); 3 when nothing failed or skipped but some stage's engine is absent.
# Without a CUDA GPU the two cheap stages still run, every GPU stage reports SKIP with the reason, and the script
# ends with "no GPU: nothing was checked" and exit 1 (--run-pytest runs the pytest stages anyway: those whose engine
# is installed run and their tests skip, tests/gpu/conftest.py; the others report ABSENT). --dry-run runs only the cheap
# stages and exits 0 when they passed: a dry run checks the script, never a GPU. The GPU tests live in tests/gpu/.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
REPO=$(pwd)
PY=${PYTHON:-python}
DRY=0
RUN_PYTEST=0
OUT=""
BUDGET=""
# Seconds per stage, in the order they run; their sum is the default budget.
STAGE_LIMITS=(gpu-tests-collect:20 train-plan:20 mitsuba-cuda:40 vllm-sample:140 grpo-vllm:120 sft-zero3:80
              train-7b:240)
# The Python module each engine stage needs, and the install that brings it (ABSENT names both when it is missing).
STAGE_ENGINES=(mitsuba-cuda:mitsuba vllm-sample:vllm grpo-vllm:vllm sft-zero3:deepspeed)
ENGINE_INSTALL="pip install -e '.[train,render,gpu]'"

while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --run-pytest) RUN_PYTEST=1 ;;
        --out) OUT=$2; shift ;;
        --budget) BUDGET=$2; shift ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (expected --dry-run, --run-pytest, --out DIR, --budget SECONDS)" >&2; exit 2 ;;
    esac
    shift
done

for override in ${SPATIALIQ_GPU_CHECK_LIMITS:-}; do
    name=${override%%:*} seconds=${override#*:}
    known=0
    for i in "${!STAGE_LIMITS[@]}"; do
        if [ "${STAGE_LIMITS[$i]%%:*}" = "$name" ]; then
            known=1
            STAGE_LIMITS[i]="$name:$seconds"
        fi
    done
    if [ "$known" = 0 ] || [ "$override" = "$name" ] || ! [ "$seconds" -gt 0 ] 2>/dev/null; then
        echo "error: SPATIALIQ_GPU_CHECK_LIMITS entry '$override': expected NAME:SECONDS, NAME a stage of STAGE_LIMITS in $0 and SECONDS a whole number above 0" >&2
        exit 2
    fi
done

LIMIT_SUM=0
for entry in "${STAGE_LIMITS[@]}"; do
    LIMIT_SUM=$((LIMIT_SUM + ${entry##*:}))
done
if [ -z "$BUDGET" ]; then
    BUDGET=$LIMIT_SUM
elif ! [ "$BUDGET" -ge "$LIMIT_SUM" ] 2>/dev/null; then
    echo "error: --budget $BUDGET must be a whole number of seconds, at least the stage limits' sum ${LIMIT_SUM} (STAGE_LIMITS in $0)" >&2
    exit 2
fi

engine_of() {  # NAME -> the module its stage needs (STAGE_ENGINES), empty when none
    local entry
    for entry in "${STAGE_ENGINES[@]}"; do
        if [ "${entry%%:*}" = "$1" ]; then
            echo "${entry##*:}"
            return
        fi
    done
}

limit_of() {  # NAME -> its seconds in STAGE_LIMITS
    local entry
    for entry in "${STAGE_LIMITS[@]}"; do
        if [ "${entry%%:*}" = "$1" ]; then
            echo "${entry##*:}"
            return
        fi
    done
    echo "error: stage $1 has no limit in STAGE_LIMITS" >&2
    exit 2
}

if [ -z "$OUT" ]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
fi
mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
: > "$RESULTS"
export SPATIALIQ_GPU_FIGURES="$OUT/figures.jsonl"
: > "$SPATIALIQ_GPU_FIGURES"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

PYTEST_MISSING=""
if ! "$PY" -c 'import pytest' >/dev/null 2>&1; then
    PYTEST_MISSING="pytest is not installed for $PY: install the GPU-node environment, pip install -e '.[train,render,gpu]' (docs/training.md)"
fi

SKIP_REASON=""
if [ "$DRY" = 1 ]; then
    SKIP_REASON="--dry-run"
else
    SKIP_REASON=$("$PY" -c 'import torch; print("" if torch.cuda.is_available() else "no CUDA GPU is visible")' \
        2>/dev/null || echo "torch is not importable")
fi
START=$SECONDS

record() {  # stage status seconds detail
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$RESULTS"
}

left() {
    echo $((BUDGET - (SECONDS - START)))
}

# run_stage NAME gpu|pytest|any COMMAND...: PASS on exit 0, FAIL otherwise (timeout named), SKIP for GPU stages
# when CUDA is absent or the budget is spent, ABSENT (not run) when the stage's engine is not importable. Output goes
# to $OUT/NAME.log.
run_stage() {
    local name=$1 kind=$2 limit
    limit=$(limit_of "$name") || exit 2
    shift 2
    if [ "$kind" = pytest ] && [ "$RUN_PYTEST" = 1 ] && [ "$DRY" = 0 ]; then
        kind=any
    fi
    if [ "$kind" != any ] && [ -n "$SKIP_REASON" ]; then
        record "$name" SKIP 0 "$SKIP_REASON"
        return
    fi
    local engine
    engine=$(engine_of "$name")
    if [ -n "$engine" ] && ! "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$engine" >/dev/null 2>&1; then
        record "$name" ABSENT 0 "$engine is not installed for $PY: not run ($ENGINE_INSTALL installs it)"
        return
    fi
    local remaining
    remaining=$(left)
    if [ "$remaining" -lt 20 ]; then
        record "$name" SKIP 0 "time budget of ${BUDGET}s spent"
        return
    fi
    if [ "$limit" -gt "$remaining" ]; then
        limit=$remaining
    fi
    if [ "${2:-}" = -m ] && [ "${3:-}" = pytest ] && [ -n "$PYTEST_MISSING" ]; then
        record "$name" FAIL 0 "$PYTEST_MISSING"
        return
    fi
    local t0=$SECONDS rc=0
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    local took=$((SECONDS - t0))
    if [ "$rc" = 0 ]; then
        record "$name" PASS "$took" "$(junit_detail "$name")"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        record "$name" FAIL "$took" "timed out after ${limit}s (log: $OUT/$name.log)"
    else
        record "$name" FAIL "$took" "exit $rc: $(tail -n 1 "$OUT/$name.log" | cut -c1-150) (log: $OUT/$name.log)"
    fi
}

# A pytest stage whose tests all skipped is a SKIP with pytest's reason, not a PASS.
junit_detail() {
    local xml="$OUT/$1.xml"
    [ -f "$xml" ] || return 0
    "$PY" - "$xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
cases = suite.findall("testcase")
skips = [c.find("skipped") for c in cases if c.find("skipped") is not None]
if cases and len(skips) == len(cases):
    print("SKIPPED: " + (skips[0].get("message") or "").replace("\t", " ")[:150])
else:
    print(f"{len(cases) - len(skips)} passed, {len(skips)} skipped")
EOF
}

pytest_stage() {  # NAME TEST_FILE
    run_stage "$1" pytest "$PY" -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/$1.xml" "$2"
}

run_stage gpu-tests-collect any "$PY" -m pytest -q -p no:cacheprovider --collect-only tests/gpu
run_stage train-plan any "$PY" bench/bench_train.py --arch 7b --dry-run --out "$OUT/train_plan.json"
pytest_stage mitsuba-cuda tests/gpu/test_gpu_mitsuba.py
pytest_stage vllm-sample tests/gpu/test_gpu_vllm_sample.py
pytest_stage grpo-vllm tests/gpu/test_gpu_grpo_vllm.py
pytest_stage sft-zero3 tests/gpu/test_gpu_deepspeed.py
run_stage train-7b gpu "$PY" bench/bench_train.py --arch 7b --recipe dapo_tight_7b --steps 2 --out "$OUT/train_7b.json"

# A stage that reports SKIP inside a PASS (every pytest test skipped) is shown as SKIP.
"$PY" - "$RESULTS" "$SPATIALIQ_GPU_FIGURES" "$OUT" "$DRY" "$SKIP_REASON" "$BUDGET" <<'EOF'
import json
import sys
from pathlib import Path

results, figures, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
dry, no_gpu, budget = sys.argv[4] == "1", sys.argv[5], sys.argv[6]
rows = [line.split("\t") for line in results.read_text().splitlines() if line.strip()]
rows = [[n, "SKIP" if s == "PASS" and d.startswith("SKIPPED: ") else s, t, d.removeprefix("SKIPPED: ")]
        for n, s, t, d in rows]
train = out / "train_7b.json"
phases = json.loads(train.read_text()).get("phases", []) if train.is_file() else []
bad_phases = [f"{ph.get('phase')} {ph.get('status')}: {str(ph.get('error') or '')[:100]}".rstrip(": ")
              for ph in phases if ph.get("status") != "ok"]
for row in rows:  # the bench writes its JSON even when a phase fails: a phase that is not ok fails the stage
    if row[0] == "train-7b" and row[1] == "PASS" and bad_phases:
        row[1], row[3] = "FAIL", "; ".join(bad_phases)
print(f"\n{'stage':<18} {'status':<6} {'s':>5}  detail")
for name, status, took, detail in rows:
    print(f"{name:<18} {status:<6} {took:>5}  {detail}")
print("\nfigures")
for line in figures.read_text().splitlines():
    f = json.loads(line)
    print(f"  {f['stage']:<14} {f['name']}: {f['value']}")
plan = out / "train_plan.json"
if plan.is_file():
    p = json.loads(plan.read_text())
    print(f"  {'train-plan':<14} {p['parameters'] / 1e9:.2f} B parameters, {p['image_tokens']} image tokens, "
          f"SFT target {p['sft_target_tokens']} tokens, RL completions {p['rl_completion_tokens']} tokens, "
          f"FLOP factors {p['flops_factor']}")
for ph in phases:
    if ph.get("status") != "ok":
        print(f"  {'train-7b':<14} {ph.get('phase')}: {ph.get('status')}")
        continue
    mfu = "n/a" if ph.get("mfu") is None else f"{100 * ph['mfu']:.1f}%"
    print(f"  {'train-7b':<14} {ph['phase']}: {ph['s_per_step']:.2f} s/step, {ph['tokens_per_s']:.0f} tokens/s, "
          f"peak {ph['peak_memory_gb']:.1f} GiB, MFU {mfu} ({json.loads(train.read_text()).get('device')})")
failed = [r[0] for r in rows if r[1] == "FAIL"]
not_run = [r[0] for r in rows if r[1] == "SKIP"]
absent = [r for r in rows if r[1] == "ABSENT"]
passed = len(rows) - len(failed) - len(not_run) - len(absent)
print(f"\n{passed} passed, {len(not_run)} skipped, {len(failed)} failed of {len(rows)} stages (budget {budget} s); "
      f"logs under {out}")
if absent:  # neither a pass nor a failure: the engine is not installed in this environment
    engines: dict[str, list[str]] = {}
    for name, _, _, detail in absent:
        engines.setdefault(detail.split()[0], []).append(name)
    print("not installed here (not run, not counted as passed or failed): "
          + "; ".join(f"{mod} ({', '.join(names)})" for mod, names in engines.items())
          + " - pip install -e '.[train,render,gpu]' brings them")
if failed:
    print(f"failed: {', '.join(failed)} (see the detail column)")
if no_gpu and not dry:  # the last line whenever no GPU was visible, whatever else failed
    print(f"no GPU: nothing was checked ({no_gpu})")
    sys.exit(1)
if failed:
    sys.exit(1)
if dry:
    print(f"dry run: the script and the cheap stages checked, no GPU stage run ({len(not_run)} skipped)")
    sys.exit(0)
if not_run:
    print(f"not checked: {', '.join(not_run)} did not run (see the detail column)")
    sys.exit(1)
if absent:
    print(f"every stage that could run passed; {len(absent)} not run for an engine that is not installed (exit 3)")
    sys.exit(3)
print(f"all {len(rows)} stages passed")
EOF
