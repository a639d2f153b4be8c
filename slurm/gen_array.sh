#!/usr/bin/env bash
# Dataset generation as a Slurm array: one shard per array task, then a merge job.
#
# Run on a login node (it submits three jobs; nothing heavy runs here):
#   slurm/gen_array.sh OUT STRUCTURES SEED SPLIT NUM_SHARDS [extra spatialiq gen options...]
# e.g.
#   slurm/gen_array.sh /data/siq_train 100000 0 train 400 --renderer mitsuba
#
# 1. plan:  `spatialiq gen ... --plan-only` writes OUT/plan.json once (which structures, in order).
# 2. array: task I runs `spatialiq gen ... --shard I --num-shards NUM_SHARDS`; a failed or requeued
#           task resumes: complete shards (their .done.json) are skipped, so resubmitting is safe.
# 3. merge: `spatialiq gen-merge --out OUT` (afterok) verifies every shard's sha256 and writes
#           OUT/manifest.json. The bytes equal those of one `spatialiq gen --num-shards NUM_SHARDS` run.
#           Ground truth and parquet rows are identical on any machine; images only on nodes of the same
#           render identity (variant, and GPU/driver/CUDA or CPU/LLVM), which every shard records and the
#           merge checks (docs/rendering.md). Pin one node type, e.g. SIQ_EXTRA="--constraint=h100".
#
# Environment: SIQ_ACCOUNT / SIQ_PARTITION (optional), SIQ_CPUS (cores per task, default 8),
# SIQ_TIME (per task, default 04:00:00), SIQ_ENV (a POSIX sh script to source first, e.g. a venv's bin/activate),
# SIQ_EXTRA (more sbatch options for every job, e.g. --constraint=h100), DRY_RUN=1 (print the mkdir and the
# three sbatch commands, with PLAN_JOB / ARRAY_JOB for the job ids, and create or submit nothing).
set -euo pipefail

if [[ $# -lt 5 ]]; then
  sed -n '2,21p' "$0" >&2
  exit 2
fi
out=$1 structures=$2 seed=$3 split=$4 shards=$5
shift 5
extra=("$@")
cpus=${SIQ_CPUS:-8}
dry=${DRY_RUN:-0}
die() { echo "error: $*" >&2; exit 2; }
if [[ $dry != 0 && $dry != 1 ]]; then die "DRY_RUN=$dry: expected 1 (print the plan) or 0"; fi

# The arguments, checked before anything is created or submitted (DRY_RUN too), as spatialiq gen would check them.
count() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 $2: expected a whole number >= 1"; }
[[ -n $out ]] || die "OUT is empty: expected the dataset folder"
count STRUCTURES "$structures"
[[ $seed =~ ^[0-9]+$ ]] || die "SEED $seed: expected a whole number >= 0"
[[ $split == train || $split == benchmark ]] || die "SPLIT $split: expected train or benchmark"
count NUM_SHARDS "$shards"
count SIQ_CPUS "$cpus"
for ((i = 0; i < ${#extra[@]}; i++)); do
  name=${extra[i]%%=*} value=
  if [[ ${extra[i]} == *=* ]]; then value=${extra[i]#*=}; else value=${extra[i + 1]:-}; fi
  case $name in
    --renderer) [[ $value =~ ^(none|mitsuba|isaacsim)$ ]] || die "--renderer '$value': expected none, mitsuba or isaacsim";;
    --object-type) [[ $value =~ ^(cube|can)$ ]] || die "--object-type '$value': expected cube or can";;
    --resolution) count --resolution "$value";;
    --out | --structures | --seed | --split | --num-shards | --shard | --workers | --plan-only | --verify)
      die "$name: set by this script (OUT STRUCTURES SEED SPLIT NUM_SHARDS; --workers is SIQ_CPUS); leave it out";;
  esac
done
# Slurm runs each --wrap command with /bin/sh (dash on Debian/Ubuntu): the wraps are POSIX sh, with every value in
# POSIX single quotes (sq), never bash's $'...' (printf %q) nor `source`.
sq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
setup=
if [[ -n ${SIQ_ENV:-} ]]; then setup=". $(sq "$SIQ_ENV") && "; fi

common=(--parsable --cpus-per-task="$cpus" --time="${SIQ_TIME:-04:00:00}" --output="$out/slurm/%x-%A_%a.log")
[[ -n ${SIQ_ACCOUNT:-} ]] && common+=(--account="$SIQ_ACCOUNT")
if [[ -n ${SIQ_EXTRA:-} ]]; then read -r -a siq_extra <<<"$SIQ_EXTRA"; common+=("${siq_extra[@]}"); fi
[[ -n ${SIQ_PARTITION:-} ]] && common+=(--partition="$SIQ_PARTITION")

# Print (DRY_RUN=1) or run one command.
run() {
  if [[ $dry == 1 ]]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}

# sbatch ARGS..., its job id in job; under DRY_RUN the command is printed and job is the placeholder $1.
submit() {
  local placeholder=$1
  shift
  if [[ $dry == 1 ]]; then run sbatch "$@"; job=$placeholder; else job=$(sbatch "$@"); fi
}

run mkdir -p "$out/slurm"

args=(--out "$out" --structures "$structures" --seed "$seed" --split "$split" --num-shards "$shards" --quiet)
quoted=
for a in "${args[@]}" "${extra[@]}"; do quoted+=" $(sq "$a")"; done

submit PLAN_JOB "${common[@]}" --job-name=siq-plan \
  --wrap="${setup}spatialiq gen${quoted} --workers $cpus --plan-only"
plan=$job
submit ARRAY_JOB "${common[@]}" --job-name=siq-gen --dependency="afterok:$plan" --array="0-$((shards - 1))" \
  --wrap="${setup}spatialiq gen${quoted} --workers $cpus --shard \$SLURM_ARRAY_TASK_ID"
array=$job
submit MERGE_JOB "${common[@]}" --job-name=siq-merge --cpus-per-task=1 --dependency="afterok:$array" \
  --wrap="${setup}spatialiq gen-merge --out $(sq "$out")"
merge=$job
if [[ $dry == 1 ]]; then
  echo "# DRY_RUN=1: nothing created or submitted"
else
  echo "plan job $plan, array job $array ($shards tasks), merge job $merge"
fi
