#!/usr/bin/env bash
# GPU check of a node (one H100/H200, about 10 minutes, offline): a pass/fail table and figures for
#   vllm-sample   spatialiq eval sample --engine vllm on the tiny model: greedy k=10 and k=10 at temperature 1
#   grpo-vllm     TRL GRPO with colocated vLLM, 2 steps on the tiny model (dynamic sampling on)
#   sft-zero3     LoRA SFT under DeepSpeed ZeRO-3 for 2 steps, merged export loaded back
#   mitsuba-cuda  Mitsuba cuda_ad_rgb id pass (ground truth) equal to scalar_rgb's
#   train-7b      random-weight Qwen2.5-VL-7B: tokens/s, peak memory, MFU of one SFT and one RL step at the
#                 dapo_tight_7b recipe's sequence lengths (bench/bench_train.py)
# Two cheap stages run everywhere and catch script errors: gpu-tests-collect (pytest collects tests/gpu) and
# train-plan (bench_train.py --dry-run: 7B parameter count, lengths, FLOP factors, no weights).
#
#   bash bench/gpu_check.sh [--dry-run] [--run-pytest] [--out DIR] [--budget SECONDS]
#
# Without CUDA, or with --dry-run, every GPU stage reports SKIP with the reason and the script exits 0;
# --run-pytest (without CUDA) still runs the pytest stages, whose tests then skip (tests/gpu/conftest.py).
# Exit status: 0 when no stage failed, 1 otherwise. The GPU tests themselves live in tests/gpu/.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
REPO=$(pwd)
PY=${PYTHON:-python}
DRY=0
RUN_PYTEST=0
OUT=""
BUDGET=570

while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --run-pytest) RUN_PYTEST=1 ;;
        --out) OUT=$2; shift ;;
        --budget) BUDGET=$2; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (expected --dry-run, --run-pytest, --out DIR, --budget SECONDS)" >&2; exit 2 ;;
    esac
    shift
done

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

# run_stage NAME LIMIT gpu|pytest|any COMMAND...: PASS on exit 0, FAIL otherwise (timeout named), SKIP for GPU stages
# when CUDA is absent or the budget is spent. Output goes to $OUT/NAME.log.
run_stage() {
    local name=$1 limit=$2 kind=$3
    shift 3
    if [ "$kind" = pytest ] && [ "$RUN_PYTEST" = 1 ] && [ "$DRY" = 0 ]; then
        kind=any
    fi
    if [ "$kind" != any ] && [ -n "$SKIP_REASON" ]; then
        record "$name" SKIP 0 "$SKIP_REASON"
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

pytest_stage() {  # NAME LIMIT TEST_FILE
    run_stage "$1" "$2" pytest "$PY" -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/$1.xml" "$3"
}

run_stage gpu-tests-collect 120 any "$PY" -m pytest -q -p no:cacheprovider --collect-only tests/gpu
run_stage train-plan 120 any "$PY" bench/bench_train.py --arch 7b --dry-run --out "$OUT/train_plan.json"
pytest_stage mitsuba-cuda 90 tests/gpu/test_gpu_mitsuba.py
pytest_stage vllm-sample 200 tests/gpu/test_gpu_vllm_sample.py
pytest_stage grpo-vllm 150 tests/gpu/test_gpu_grpo_vllm.py
pytest_stage sft-zero3 150 tests/gpu/test_gpu_deepspeed.py
run_stage train-7b 330 gpu "$PY" bench/bench_train.py --arch 7b --steps 2 --out "$OUT/train_7b.json"

# A stage that reports SKIP inside a PASS (every pytest test skipped) is shown as SKIP.
"$PY" - "$RESULTS" "$SPATIALIQ_GPU_FIGURES" "$OUT" <<'EOF'
import json
import sys
from pathlib import Path

results, figures, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
rows = [line.split("\t") for line in results.read_text().splitlines() if line.strip()]
rows = [[n, "SKIP" if s == "PASS" and d.startswith("SKIPPED: ") else s, t, d.removeprefix("SKIPPED: ")]
        for n, s, t, d in rows]
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
train = out / "train_7b.json"
if train.is_file():
    t = json.loads(train.read_text())
    for ph in t["phases"]:
        if ph.get("status") != "ok":
            print(f"  {'train-7b':<14} {ph['phase']}: {ph.get('status')}")
            continue
        mfu = "n/a" if ph["mfu"] is None else f"{100 * ph['mfu']:.1f}%"
        print(f"  {'train-7b':<14} {ph['phase']}: {ph['s_per_step']:.2f} s/step, {ph['tokens_per_s']:.0f} tokens/s, "
              f"peak {ph['peak_memory_gb']:.1f} GiB, MFU {mfu} ({t['device']})")
failed = [r[0] for r in rows if r[1] == "FAIL"]
print(f"\n{len(rows) - len(failed)}/{len(rows)} stages without failure; logs under {out}")
sys.exit(1 if failed else 0)
EOF
