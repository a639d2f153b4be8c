#!/usr/bin/env bash
# A recipe sweep as a Slurm array: one array task per variant of SWEEP (written by `spatialiq sweep plan`).
#
# Run on a login node, from the directory the sweep was planned in (recipe and data paths are relative to it):
#   slurm/sweep.sh SWEEP
#   DRY_RUN=1 slurm/sweep.sh SWEEP      # print the sbatch command and each task's command, submit nothing
#
# Array task I runs `spatialiq sweep run SWEEP --only <variant I>` (train with `run dapo-tight`, sample, score).
# A failed or requeued task resumes: a finished variant (runs/<name>/done.json) is skipped and every step resumes,
# so resubmitting is safe. Afterwards: `spatialiq sweep report SWEEP --out SWEEP/report`.
#
# Environment: SIQ_ACCOUNT / SIQ_PARTITION (optional), SIQ_GPUS (GPUs per task, default 1), SIQ_CPUS (default 16),
# SIQ_TIME (per task, default 24:00:00), SIQ_ENV (a script to source first, e.g. a venv activate).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
sweep=$1
mapfile -t names < <(spatialiq sweep list "$sweep")
if [[ ${#names[@]} -eq 0 ]]; then
  echo "error: $sweep lists no variants" >&2
  exit 2
fi

if [[ -n ${SLURM_ARRAY_TASK_ID:-} ]]; then  # inside one array task: run its variant
  exec spatialiq sweep run "$sweep" --only "${names[$SLURM_ARRAY_TASK_ID]}"
fi

# Slurm runs --wrap with /bin/sh (dash on Debian/Ubuntu): POSIX single quotes (sq), never bash's $'...' (printf %q).
sq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
setup=
if [[ -n ${SIQ_ENV:-} ]]; then setup=". $(sq "$SIQ_ENV") && "; fi
opts=(--parsable --job-name=siq-sweep --array="0-$((${#names[@]} - 1))" --gpus="${SIQ_GPUS:-1}"
  --cpus-per-task="${SIQ_CPUS:-16}" --time="${SIQ_TIME:-24:00:00}" --output="$sweep/slurm/%x-%A_%a.log")
[[ -n ${SIQ_ACCOUNT:-} ]] && opts+=(--account="$SIQ_ACCOUNT")
[[ -n ${SIQ_PARTITION:-} ]] && opts+=(--partition="$SIQ_PARTITION")
wrap="${setup}$(sq "$0") $(sq "$sweep")"

if [[ -n ${DRY_RUN:-} && ${DRY_RUN} != 0 ]]; then
  printf 'sbatch'
  printf ' %q' "${opts[@]}" "--wrap=$wrap"
  printf '\n'
  for i in "${!names[@]}"; do
    printf 'task %d: spatialiq sweep run %q --only %q\n' "$i" "$sweep" "${names[$i]}"
  done
  exit 0
fi

mkdir -p "$sweep/slurm"
job=$(sbatch "${opts[@]}" --wrap="$wrap")
echo "array job $job: ${#names[@]} variants of $sweep"
