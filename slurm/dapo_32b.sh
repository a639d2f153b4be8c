#!/usr/bin/env bash
# DAPO-tight, Qwen2.5-VL-32B, NeMo-RL v0.7.0 on NODES x 4-GPU nodes (recipe dapo_tight_32b; traces DATA/traces/cot).
#
#   PHASE=sft DATA=/lustre/siq OUT=/lustre/runs/dapo_32b ACCOUNT=acct slurm/dapo_32b.sh   # 1. warm-up SFT-CoT (10 %)
#   OUT=/lustre/runs/dapo_32b PHASE=sft RECIPE=dapo_tight_32b slurm/convert.sh   # 2. -> OUT/nemo_rl/sft/hf
#   DATA=/lustre/siq OUT=/lustre/runs/dapo_32b ACCOUNT=acct slurm/dapo_32b.sh   # 3. GRPO/DAPO on the 90 %
#
# or, from the checkout's root, plain sbatch with the #SBATCH defaults below (options on the command line win):
#   DATA=/lustre/siq OUT=/lustre/runs/dapo_32b sbatch -A acct -p gpu slurm/dapo_32b.sh
#
# Beforehand, on the login node: `hf download Qwen/Qwen2.5-VL-32B-Instruct` into HF_HOME (compute nodes run offline).
# Run the same command again to resume: NeMo-RL continues from the newest OUT/nemo_rl/<phase>/checkpoints/step_N.
# Variables: NODES (8), ACCOUNT, PARTITION, TIME, IMAGE, DATA, OUT, HF_HOME, PYDEPS, MOUNTS, PHASE (rl|sft),
# INIT_FROM (RL start and KL anchor: default OUT/nemo_rl/sft/hf; `none` = the base model), EXTRA_SETS, DRY_RUN=1;
# see slurm/nemo_common.sh.
#SBATCH --job-name=siq-dapo-32b
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --dependency=singleton
#SBATCH --output=%x-%j.log
set -euo pipefail
JOB_NAME=siq-dapo-32b TRACES=cot
: "${RECIPE:=dapo_tight_32b}" "${PHASE:=rl}"
: "${NODES:=8}"
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
siq_train_main dapo_32b.sh
