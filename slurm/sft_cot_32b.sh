#!/usr/bin/env bash
# SFT-CoT, Qwen2.5-VL-32B, NeMo-RL v0.7.0 on NODES x 4-GPU nodes (recipe sft_cot_32b; traces DATA/traces/cot).
#
#   DATA=/lustre/siq OUT=/lustre/runs/sft_cot_32b ACCOUNT=acct slurm/sft_cot_32b.sh
#   OUT=/lustre/runs/sft_cot_32b PHASE=sft RECIPE=sft_cot_32b slurm/convert.sh   # -> OUT/nemo_rl/sft/hf
#
# or, from the checkout's root, plain sbatch with the #SBATCH defaults below (options on the command line win):
#   DATA=/lustre/siq OUT=/lustre/runs/sft_cot_32b sbatch -A acct -p gpu slurm/sft_cot_32b.sh
#
# Beforehand, on the login node: `hf download Qwen/Qwen2.5-VL-32B-Instruct` into HF_HOME (compute nodes run offline).
# Run the same command again to resume from the newest checkpoint. Variables: NODES (4), ACCOUNT, PARTITION,
# TIME, IMAGE, DATA, OUT, HF_HOME, PYDEPS, MOUNTS, EXTRA_SETS, DRY_RUN=1; see slurm/nemo_common.sh.
#SBATCH --job-name=siq-sft-cot-32b
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --dependency=singleton
#SBATCH --output=%x-%j.log
set -euo pipefail
JOB_NAME=siq-sft-cot-32b TRACES=cot
: "${RECIPE:=sft_cot_32b}" "${PHASE:=sft}"
: "${NODES:=4}"
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
siq_train_main sft_cot_32b.sh
