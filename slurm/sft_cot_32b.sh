#!/usr/bin/env bash
# SFT-CoT, Qwen2.5-VL-32B, NeMo-RL v0.7.0 on NODES x 4-GPU nodes (recipe sft_cot_32b; traces DATA/traces/cot).
#
#   DATA=/lustre/siq OUT=/lustre/runs/sft_cot_32b ACCOUNT=acct slurm/sft_cot_32b.sh
#   OUT=/lustre/runs/sft_cot_32b PHASE=sft RECIPE=sft_cot_32b slurm/convert.sh     # -> OUT/nemo_rl/sft/hf
#
# Run the same command again to resume from the newest checkpoint. Variables: NODES (4), ACCOUNT, PARTITION, TIME,
# IMAGE, MOUNTS, DATA, OUT, DRY_RUN=1; see slurm/nemo_common.sh.
set -euo pipefail
JOB_NAME=siq-sft-cot-32b TRACES=cot
: "${RECIPE:=sft_cot_32b}" "${PHASE:=sft}"
: "${NODES:=4}"
# shellcheck source=slurm/nemo_common.sh
source "${SIQ_PROJECT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}/slurm/nemo_common.sh"
siq_train_main "${BASH_SOURCE[0]}"
