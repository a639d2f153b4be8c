#!/usr/bin/env bash
# NeMo-RL checkpoint -> Hugging Face folder (weights, config, processor, chat template), on one node.
#
#   OUT=/lustre/runs/dapo_32b PHASE=sft RECIPE=dapo_tight_32b slurm/convert.sh   # warm-up -> OUT/nemo_rl/sft/hf
#   OUT=/lustre/runs/dapo_32b PHASE=rl RECIPE=dapo_tight_32b slurm/convert.sh    # final   -> OUT/nemo_rl/rl/hf
#   OUT=/lustre/runs/dapo_32b PHASE=rl RECIPE=dapo_tight_32b sbatch -A acct slurm/convert.sh   # the same, plain sbatch
#
# Runs `spatialiq nemo convert --checkpoint CKPT --out HF_OUT --recipe RECIPE` in the container. HF_OUT must not exist
# yet (the conversion refuses to overwrite), so each converted checkpoint has its own folder.
# Variables: RECIPE (required: the recipe the run used, for the processor's pixel budget), PHASE (sft|rl, default
# rl), CKPT (default: the newest OUT/nemo_rl/PHASE/checkpoints/step_N when the job starts), HF_OUT (default
# OUT/nemo_rl/PHASE/hf), GPUS_PER_NODE (1), TIME (02:00:00), ACCOUNT, PARTITION, IMAGE, OUT, HF_HOME, PYDEPS, MOUNTS,
# DRY_RUN=1; see slurm/nemo_common.sh.
#SBATCH --job-name=siq-convert
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --exclusive
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.log
set -euo pipefail
JOB_NAME=siq-convert NODES=1
: "${PHASE:=rl}" "${GPUS_PER_NODE:=1}" "${TIME:=02:00:00}"
: "${RECIPE:?set RECIPE (the recipe the checkpoint was trained with)}"
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
siq_defaults
[[ $PHASE == rl || $PHASE == sft ]] || siq_die "PHASE=$PHASE: expected rl or sft"

convert_job() {
  local run="$OUT/nemo_rl/$PHASE"
  local ckpt=${CKPT:-$(siq_newest_step "$run/checkpoints")}
  siq_step python -m spatialiq_train.cli nemo convert --checkpoint "$ckpt" --out "${HF_OUT:-$run/hf}" --recipe "$RECIPE"
}

siq_main convert.sh convert_job
