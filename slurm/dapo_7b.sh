#!/usr/bin/env bash
# DAPO-tight, Qwen2.5-VL-7B, NeMo-RL v0.7.0 on NODES x 4-GPU nodes (recipe dapo_tight_7b).
#
#   PHASE=sft DATA=/lustre/siq OUT=/lustre/runs/dapo_7b ACCOUNT=acct slurm/dapo_7b.sh   # 1. warm-up SFT-CoT (10 %)
#   OUT=/lustre/runs/dapo_7b PHASE=sft RECIPE=dapo_tight_7b slurm/convert.sh            # 2. -> OUT/nemo_rl/sft/hf
#   DATA=/lustre/siq OUT=/lustre/runs/dapo_7b ACCOUNT=acct slurm/dapo_7b.sh             # 3. GRPO/DAPO on the 90 %
#
# Run the same command again to resume: NeMo-RL continues from the newest OUT/nemo_rl/<phase>/checkpoints/step_N.
# Variables: NODES (2), ACCOUNT, PARTITION, TIME, IMAGE, MOUNTS, DATA, OUT, PHASE (rl|sft), INIT_FROM (RL start and
# KL anchor: default OUT/nemo_rl/sft/hf; `none` = the base model), DRY_RUN=1; see slurm/nemo_common.sh.
set -euo pipefail
JOB_NAME=siq-dapo-7b TRACES=cot
: "${RECIPE:=dapo_tight_7b}"
: "${NODES:=2}" "${PHASE:=rl}"
# shellcheck source=slurm/nemo_common.sh
source "${SIQ_PROJECT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}/slurm/nemo_common.sh"
siq_train_main "${BASH_SOURCE[0]}"
