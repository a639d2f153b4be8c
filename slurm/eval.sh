#!/usr/bin/env bash
# Benchmark evaluation of one HF checkpoint on one node: k samples per scene with vLLM (tensor parallel), then scores.
#
#   MODEL=/lustre/runs/dapo_32b/nemo_rl/rl/hf BENCH=/lustre/siq/benchmark OUT=/lustre/runs/dapo_32b slurm/eval.sh
#
# Runs `spatialiq eval sample --engine vllm --tensor-parallel-size TP ...` then `spatialiq eval score ...`.
# The NeMo-RL image's vLLM (0.20) is older than the range the eval accepts (spatialiq_train/versions.py), so the
# default IMAGE is a vLLM image in that range. Variables: MODEL (required: HF folder or hub id), BENCH (default
# DATA/benchmark), SPLIT (benchmark), K (10), TP (GPUS_PER_NODE), NAME (MODEL's folder name), GPUS_PER_NODE (4),
# TIME (08:00:00), IMAGE (vllm/vllm-openai:v0.25.1), ACCOUNT, PARTITION, MOUNTS, DATA, OUT, PYDEPS, DRY_RUN=1.
set -euo pipefail
JOB_NAME=siq-eval NODES=1
: "${MODEL:?set MODEL (an HF checkpoint folder or hub id)}" "${TIME:=08:00:00}" "${IMAGE:=vllm/vllm-openai:v0.25.1}"
PROJECT=${SIQ_PROJECT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
: "${DATA:=$PROJECT/data}" "${OUT:=$PROJECT/runs/$JOB_NAME}" "${BENCH:=$DATA/benchmark}"
if [[ $MODEL == /* ]]; then : "${MOUNTS:=$PROJECT:$PROJECT,$DATA:$DATA,$OUT:$OUT,$BENCH:$BENCH,$MODEL:$MODEL}"; fi
# shellcheck source=slurm/nemo_common.sh
source "$PROJECT/slurm/nemo_common.sh"
siq_defaults
: "${SPLIT:=benchmark}" "${K:=10}" "${TP:=$GPUS_PER_NODE}" "${NAME:=$(basename "$MODEL")}"

eval_job() {
  local dir="$OUT/eval/$NAME"
  siq_step python3 -m spatialiq_train.cli eval sample --engine vllm --tensor-parallel-size "$TP" --model "$MODEL" \
    --data "$BENCH" --split "$SPLIT" --k "$K" --out "$dir/completions.jsonl"
  siq_step python3 -m spatialiq_train.cli eval score --completions "$dir/completions.jsonl" --data "$BENCH" \
    --split "$SPLIT" --out "$dir" --name "$NAME"
}

siq_main "$PROJECT/slurm/eval.sh" eval_job
