# shellcheck shell=bash
# Shared by slurm/{dapo_32b,dapo_7b,sft_cot_32b,sft_plain_32b,eval,convert}.sh; sourced, never run.
#
# Each script is run twice: on the login node it submits itself with sbatch (the job gets
# SIQ_PROJECT and every variable below through --export=ALL); inside the allocation it brings up
# Ray with srun (head on the first node, one worker per other node, all in the NeMo-RL container
# with the project on PYTHONPATH through the mounts: nothing is pip-installed into the container),
# generates the NeMo-RL config from the recipe (`recipes nemo-rl`), and runs the driver once on the head node on
# that file as written (`nemo rl|sft --config`; the config records the recipe and its --set overrides).
#
# Variables (environment, with defaults):
#   NODES, GPUS_PER_NODE (4), ACCOUNT, PARTITION, TIME (24:00:00)
#   IMAGE      nvcr.io/nvidia/nemo-rl:v0.7.0 (a pyxis/enroot image or .sqsh file)
#   DATA       data folder: DATA/scenes (spatialiq gen output), DATA/traces/{cot,plain} (spatialiq traces)
#   OUT        run folder (NeMo-RL config, checkpoints, logs; a resubmission resumes from it)
#   MOUNTS     container mounts, default PROJECT, DATA and OUT at the same paths (comma-separated src:dst)
#   PYDEPS     optional folder of extra pure-Python packages (pip install --target), put on PYTHONPATH
#   WANDB_MODE offline (default) or online; HF_HOME, HF_TOKEN, WANDB_API_KEY pass through when set
#   DEPENDENCY sbatch dependency, default singleton (one job per name at a time); e.g. afterok:123,singleton
#   EXTRA_SETS extra recipe overrides for the training scripts, space-separated KEY=VALUE (e.g. rl.max_steps=2)
#   DRY_RUN=1  print every command (sbatch, srun, container, mounts, driver) and exit 0
#   RAY_PORT (6379), RAY_WAIT_TRIES (60, 5 s apart)

SIQ_EXIT_DYNAMIC_SAMPLING_CAP=3  # spatialiq_train/nemo/driver.py EXIT_DYNAMIC_SAMPLING_CAP

siq_defaults() {
  : "${GPUS_PER_NODE:=4}" "${TIME:=24:00:00}" "${IMAGE:=nvcr.io/nvidia/nemo-rl:v0.7.0}"
  : "${DATA:=$PROJECT/data}" "${OUT:=$PROJECT/runs/$JOB_NAME}" "${DRY_RUN:=0}" "${WANDB_MODE:=offline}"
  : "${MOUNTS:=$PROJECT:$PROJECT,$DATA:$DATA,$OUT:$OUT}" "${RAY_PORT:=6379}" "${RAY_WAIT_TRIES:=60}"
  export GPUS_PER_NODE TIME IMAGE DATA OUT MOUNTS DRY_RUN WANDB_MODE RAY_PORT RAY_WAIT_TRIES NODES
  export PYTHONPATH="$PROJECT${PYDEPS:+:$PYDEPS}"
}

# Print (DRY_RUN=1) or run one command; `siq_run --bg cmd...` runs it in the background.
siq_run() {
  local bg=0
  if [[ $1 == --bg ]]; then bg=1; shift; fi
  if [[ $DRY_RUN == 1 ]]; then
    printf '+'; printf ' %q' "$@"; if ((bg)); then printf ' &'; fi; printf '\n'
    return 0
  fi
  if ((bg)); then "$@" & else "$@"; fi
}

# The allocation's node names (placeholders when printing a plan from the login node).
siq_nodes() {
  if [[ -n ${SLURM_JOB_NODELIST:-} ]]; then
    scontrol show hostnames "$SLURM_JOB_NODELIST"
  else
    local i
    for ((i = 0; i < NODES; i++)); do echo "NODE$i"; done
  fi
}

# srun options that put a step in the container (one named container per job and node, so the
# driver step shares the head's Ray session files).
siq_ctr() {
  SIQ_CTR=(--container-image="$IMAGE" --container-mounts="$MOUNTS" --no-container-mount-home
    --container-workdir="$PROJECT" --container-name="siq-${SLURM_JOB_ID:-JOBID}")
}

siq_submit() {  # $1: this script's path inside PROJECT
  local args=(--job-name="$JOB_NAME" --nodes="$NODES" --ntasks-per-node=1 --gres="gpu:$GPUS_PER_NODE"
    --exclusive --time="$TIME" --dependency="${DEPENDENCY:-singleton}" --output="$OUT/slurm/%x-%j.log"
    --export="ALL,SIQ_PROJECT=$PROJECT")
  [[ -n ${ACCOUNT:-} ]] && args+=(--account="$ACCOUNT")
  [[ -n ${PARTITION:-} ]] && args+=(--partition="$PARTITION")
  siq_run mkdir -p "$OUT/slurm"
  siq_run sbatch "${args[@]}" "$1"
  if [[ $DRY_RUN == 1 ]]; then
    echo "# inside the allocation ($NODES nodes x $GPUS_PER_NODE GPUs) the job runs:"
    "$SIQ_JOB_FN"
  fi
}

# Entry point of every script: submit from the login node, run the job body inside an allocation.
siq_main() {  # $1: script path, $2: job body function
  SIQ_JOB_FN=$2
  if [[ -n ${SLURM_JOB_ID:-} ]]; then "$SIQ_JOB_FN"; else siq_submit "$1"; fi
}

siq_wait_ray() {  # $1: head node, $2: node count
  local probe=(srun --overlap --nodes=1 --ntasks=1 --nodelist="$1" "${SIQ_CTR[@]}" python -c
    "import ray,sys; ray.init(address='auto', logging_level='ERROR'); sys.exit(sum(n['Alive'] for n in ray.nodes()) < $2)")
  if [[ $DRY_RUN == 1 ]]; then
    siq_run "${probe[@]}"; echo "# (repeated every 5 s, at most $RAY_WAIT_TRIES times, until $2 Ray nodes are up)"
    return 0
  fi
  local i
  for ((i = 0; i < RAY_WAIT_TRIES; i++)); do
    if "${probe[@]}" >/dev/null 2>&1; then return 0; fi
    sleep 5
  done
  echo "error: Ray did not reach $2 nodes after $RAY_WAIT_TRIES tries (see $OUT/slurm)" >&2
  return 1
}

# Ray head + workers, the NeMo-RL config, then the driver once on the head. $1: rl|sft, rest: --set overrides.
siq_ray_job() {
  local phase=$1; shift
  local nodes head cfg="$OUT/nemo_rl/$phase/config.yaml" rc=0
  mapfile -t nodes < <(siq_nodes)
  if ((${#nodes[@]} == 0)); then echo "error: no nodes in SLURM_JOB_NODELIST=${SLURM_JOB_NODELIST:-}" >&2; return 1; fi
  head=${nodes[0]}
  siq_ctr
  local on_head=(srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" "${SIQ_CTR[@]}")
  local ray_opts=(--num-gpus="$GPUS_PER_NODE" --disable-usage-stats --min-worker-port=2000 --max-worker-port=2999
    --block)
  siq_run "${on_head[@]}" python -m spatialiq_train.cli recipes nemo-rl "$RECIPE" --phase "$phase" --out "$cfg" \
    --nodes "${#nodes[@]}" --gpus-per-node "$GPUS_PER_NODE" "$@"
  siq_run --bg srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" --gres="gpu:$GPUS_PER_NODE" "${SIQ_CTR[@]}" \
    ray start --head --port="$RAY_PORT" --include-dashboard=false "${ray_opts[@]}"
  siq_wait_ray "$head" 1
  if ((${#nodes[@]} > 1)); then
    siq_run --bg srun --overlap --nodes=$((${#nodes[@]} - 1)) --ntasks-per-node=1 --exclude="$head" \
      --gres="gpu:$GPUS_PER_NODE" "${SIQ_CTR[@]}" ray start --address="$head:$RAY_PORT" "${ray_opts[@]}"
    siq_wait_ray "$head" "${#nodes[@]}"
  fi
  export RAY_ADDRESS="$head:$RAY_PORT"
  siq_run "${on_head[@]}" python -m spatialiq_train.cli nemo "$phase" --config "$cfg" || rc=$?
  [[ $DRY_RUN == 1 ]] || jobs -p | xargs -r kill 2>/dev/null || true
  if ((rc == SIQ_EXIT_DYNAMIC_SAMPLING_CAP)); then
    echo "stopped at the dynamic-sampling cap (exit $rc): resubmitting would stop again; see docs/cluster.md" >&2
  fi
  return "$rc"
}

# One single-node step in the container on the allocation's node (eval, convert).
siq_step() {
  siq_ctr
  siq_run srun --nodes=1 --ntasks=1 "${SIQ_CTR[@]}" "$@"
}

# Newest step_N checkpoint folder under $1 (a placeholder when printing a plan before it exists).
siq_newest_step() {
  local found
  found=$(find "$1" -maxdepth 1 -name 'step_*' -type d 2>/dev/null | sort -V | tail -n 1)
  echo "${found:-$1/step_NEWEST}"
}

# Body of the training scripts: $PHASE (rl|sft) of $RECIPE on the data under $DATA, run folder $OUT.
siq_train_job() {
  local phase=${PHASE:?PHASE must be rl or sft}
  local sets=(--set "data.traces_dir=${TRACES_DIR:-$DATA/traces/$TRACES}" --set "data.data_root=${DATASET:-$DATA/scenes}"
    --set "run.output_dir=$OUT")
  if [[ $phase == rl && ${INIT_FROM:-none} != none ]]; then
    if [[ $DRY_RUN != 1 && ! -f $INIT_FROM/config.json ]]; then
      echo "error: INIT_FROM=$INIT_FROM holds no HF checkpoint (config.json); run the SFT warm-up" \
        "(PHASE=sft) and slurm/convert.sh first, or set INIT_FROM=none to start from the base model" >&2
      return 2
    fi
    sets+=(--set "rl.init_from=$INIT_FROM")
  fi
  local extra
  for extra in ${EXTRA_SETS:-}; do sets+=(--set "$extra"); done
  siq_ray_job "$phase" "${sets[@]}"
}

# The settings every training script shares; the script sets JOB_NAME, RECIPE, NODES, TRACES, PHASE first.
siq_train_main() {  # $1: the script's path
  PROJECT=${SIQ_PROJECT:-$(cd "$(dirname "$1")/.." && pwd)}
  siq_defaults
  : "${INIT_FROM:=$OUT/nemo_rl/sft/hf}"
  siq_main "$PROJECT/slurm/$(basename "$1")" siq_train_job
}
