#!/usr/bin/env bash
# NeMo-RL checkpoint -> Hugging Face folder (weights, config, processor, chat template), on one node.
#
#   OUT=/lustre/runs/dapo_32b PHASE=sft RECIPE=dapo_tight_32b slurm/convert.sh   # warm-up -> OUT/nemo_rl/sft/hf
#   OUT=/lustre/runs/dapo_32b PHASE=rl RECIPE=dapo_tight_32b slurm/convert.sh    # final   -> OUT/nemo_rl/rl/hf
#
# Runs `spatialiq nemo convert --checkpoint CKPT --out HF_OUT --recipe RECIPE` in the container.
# Variables: RECIPE (required: the recipe the run used, for the processor's pixel budget), PHASE (sft|rl, default
# rl), CKPT (default: the newest OUT/nemo_rl/PHASE/checkpoints/step_N when the job starts), HF_OUT (default
# OUT/nemo_rl/PHASE/hf), GPUS_PER_NODE (1), TIME (02:00:00), ACCOUNT, PARTITION, IMAGE, MOUNTS, OUT, DRY_RUN=1.
set -euo pipefail
JOB_NAME=siq-convert NODES=1
: "${PHASE:=rl}" "${GPUS_PER_NODE:=1}" "${TIME:=02:00:00}" "${RECIPE:?set RECIPE (the recipe the checkpoint was trained with)}"
PROJECT=${SIQ_PROJECT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# shellcheck source=slurm/nemo_common.sh
source "$PROJECT/slurm/nemo_common.sh"
siq_defaults

convert_job() {
  local run="$OUT/nemo_rl/$PHASE"
  local ckpt=${CKPT:-$(siq_newest_step "$run/checkpoints")}
  siq_step python -m spatialiq_train.cli nemo convert --checkpoint "$ckpt" --out "${HF_OUT:-$run/hf}" --recipe "$RECIPE"
}

siq_main "$PROJECT/slurm/convert.sh" convert_job
