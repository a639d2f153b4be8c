#!/usr/bin/env bash
# Benchmark evaluation of one HF checkpoint on one node: k samples per scene with vLLM (tensor parallel), then scores.
#
#   MODEL=/lustre/runs/dapo_32b/nemo_rl/sft/hf BENCH=/lustre/siq/benchmark OUT=/lustre/runs/dapo_32b slurm/eval.sh
#   MODEL=/lustre/runs/dapo_32b/nemo_rl/rl/hf BENCH=/lustre/siq/benchmark OUT=/lustre/runs/dapo_32b slurm/eval.sh
#   MODEL=... BENCH=... OUT=... sbatch -A acct slurm/eval.sh       # the same, plain sbatch from the checkout's root
#
# Runs `spatialiq eval sample --engine vllm --tensor-parallel-size TP ...` then `spatialiq eval score ...` into
# OUT/eval/NAME. NAME (the run name, also the model's name in the scores) is unique per checkpoint folder: by default
# MODEL's path below OUT (else its whole path or hub id) with '/' turned into '-', so the two commands above write
# OUT/eval/nemo_rl-sft-hf and OUT/eval/nemo_rl-rl-hf. OUT/eval/NAME/model.txt records MODEL, and a later job that
# would put another MODEL under the same NAME stops instead of resuming that folder's completions.
# The NeMo-RL image's vLLM (0.20) is older than the range the eval accepts (spatialiq_train/core/versions.py), so the
# default IMAGE is a vLLM image in that range. Variables: MODEL (required: HF folder or hub id; a hub id must be in
# HF_HOME already), BENCH (default DATA/benchmark), SPLIT (benchmark), K (10), TP (GPUS_PER_NODE), NAME, GPUS_PER_NODE
# (4), TIME (08:00:00), IMAGE (vllm/vllm-openai:v0.25.1), ACCOUNT, PARTITION, DATA, OUT, HF_HOME, PYDEPS, MOUNTS,
# DRY_RUN=1; see slurm/nemo_common.sh.
#SBATCH --job-name=siq-eval
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --time=08:00:00
#SBATCH --output=%x-%j.log
set -euo pipefail
JOB_NAME=siq-eval NODES=1
: "${MODEL:?set MODEL (an HF checkpoint folder or hub id)}" "${TIME:=08:00:00}" "${IMAGE:=vllm/vllm-openai:v0.25.1}"
MODEL=${MODEL%/}
# The checkout: SIQ_PROJECT, else this script's parent folder, else (plain sbatch runs a copy of the script from
# Slurm's spool folder) the folder sbatch was run in.
siq_p=("${SIQ_PROJECT:-$(dirname "${BASH_SOURCE[0]}")/..}") siq_w="SIQ_PROJECT=${SIQ_PROJECT:-}"
[[ -n ${SIQ_PROJECT:-} ]] || siq_p+=("${SLURM_SUBMIT_DIR:-}") siq_w="${siq_p[0]} nor in SLURM_SUBMIT_DIR=${SLURM_SUBMIT_DIR:-(unset)}"
for PROJECT in "${siq_p[@]}" ""; do [[ -f $PROJECT/slurm/nemo_common.sh ]] && break; done
[[ -n $PROJECT ]] || { echo "error: cannot find the spatialiq-train checkout: no slurm/nemo_common.sh in $siq_w:" \
  "run sbatch from the checkout's root, or set SIQ_PROJECT=/path/to/spatialiq-train" >&2; exit 2; }
PROJECT=$(cd "$PROJECT" && pwd)
# shellcheck source=slurm/nemo_common.sh
source "$PROJECT/slurm/nemo_common.sh"
: "${DATA:=$PROJECT/data}" "${OUT:=$PROJECT/runs/$JOB_NAME}" "${BENCH:=$DATA/benchmark}"
MOUNTS="${MOUNTS:+$MOUNTS,}$BENCH:$BENCH"
if [[ $MODEL == /* ]]; then MOUNTS+=",$MODEL:$MODEL"; fi
siq_defaults
: "${SPLIT:=benchmark}" "${K:=10}" "${TP:=$GPUS_PER_NODE}"

# The run name: NAME, else MODEL below OUT (or MODEL as given) with '/' -> '-' and any other character a run name
# cannot hold -> '_'. Either is checked here, when the job is planned, by the rule `eval score --name` applies
# (eval/score.py run_name_problem: ASCII letters, digits and . _ + -, not only dots).
eval_name() {
  local rel=$MODEL LC_ALL=C name
  if [[ -n ${NAME:-} ]]; then
    [[ $NAME != */* && $NAME != .* ]] || siq_die "NAME=$NAME: expected a folder name (no '/', not starting with '.')"
    name=$NAME
  else
    if [[ $rel == "$OUT"/* ]]; then rel=${rel#"$OUT"/}; fi
    rel=$(tr -s / <<<"${rel#/}")
    name=${rel//\//-}
    name=${name//[^A-Za-z0-9._+-]/_}
  fi
  if [[ ! $name =~ ^[A-Za-z0-9._+-]+$ || -z ${name//./} ]]; then
    siq_die "run name '$name': use ASCII letters, digits and . _ + - only, not only dots (\`eval score --name\`" \
      "refuses anything else, after the sampling): set NAME"
  fi
  echo "$name"
}

# Plan time (before sbatch, DRY_RUN too): the run name is one scoring accepts.
eval_check() {
  eval_name >/dev/null
}

eval_job() {
  local name dir
  name=$(eval_name)
  dir="$OUT/eval/$name"
  if [[ $DRY_RUN == 1 ]]; then
    echo "# run name $name: $dir (model.txt records MODEL=$MODEL)"
  else
    if [[ -f $dir/model.txt && $(<"$dir/model.txt") != "$MODEL" ]]; then
      siq_die "$dir holds the evaluation of $(<"$dir/model.txt"), not MODEL=$MODEL: set NAME to a new run name"
    fi
    mkdir -p "$dir"
    printf '%s\n' "$MODEL" >"$dir/model.txt"
  fi
  siq_step python3 -m spatialiq_train.cli eval sample --engine vllm --tensor-parallel-size "$TP" --model "$MODEL" \
    --data "$BENCH" --split "$SPLIT" --k "$K" --out "$dir/completions.jsonl"
  siq_step python3 -m spatialiq_train.cli eval score --completions "$dir/completions.jsonl" --data "$BENCH" \
    --split "$SPLIT" --out "$dir" --name "$name"
}

siq_main eval.sh eval_job eval_check
