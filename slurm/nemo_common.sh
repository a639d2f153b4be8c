# shellcheck shell=bash
# Shared by slurm/{dapo_32b,dapo_7b,sft_cot_32b,sft_plain_32b,eval,convert}.sh; sourced, never run.
#
# Each script runs in one of two places:
#   - on the login node (no SLURM_JOB_ID): it checks its settings and submits itself with sbatch (the job gets
#     SIQ_PROJECT and every variable below through --export=ALL);
#   - inside an allocation, either the one it submitted itself or a plain `sbatch slurm/<script>.sh` run from the
#     checkout's root (the #SBATCH lines give the defaults; Slurm runs a copy of the script from its spool folder, so
#     the script finds the checkout through SIQ_PROJECT or SLURM_SUBMIT_DIR). There it brings up Ray with srun (head
#     on the first node, one worker per other node, all in the NeMo-RL container with the project on PYTHONPATH
#     through the mounts: nothing is pip-installed into the container), generates the NeMo-RL config from the recipe
#     (`recipes nemo-rl`), and runs the driver once on the head node on that file as written (`nemo rl|sft --config`;
#     the config records the recipe and its --set overrides).
#
# Variables (environment, with defaults):
#   NODES, GPUS_PER_NODE (4), ACCOUNT, PARTITION, TIME (24:00:00); inside an allocation the node count is the
#              allocation's (SLURM_JOB_NUM_NODES) and GPUS_PER_NODE defaults to SLURM_GPUS_ON_NODE
#   IMAGE      nvcr.io/nvidia/nemo-rl:v0.7.0 (a pyxis/enroot image or .sqsh file)
#   DATA       data folder: DATA/scenes (spatialiq gen output), DATA/traces/{cot,plain} (spatialiq traces)
#   OUT        run folder (NeMo-RL config, checkpoints, logs; a resubmission resumes from it)
#   HF_HOME    the Hugging Face cache, filled on the login node beforehand (`hf download MODEL`); default
#              ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface, Hugging Face's own default. Mounted at the same path.
#   SIQ_HF_OFFLINE  1 (default): jobs run with HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 (no downloads on compute
#              nodes); 0 leaves both unset, for clusters whose compute nodes reach the Hub
#   PYDEPS     optional folder of extra pure-Python packages (pip install --target); mounted, put on PYTHONPATH
#   MOUNTS     extra container mounts (comma-separated src:dst) besides PROJECT, DATA, OUT, HF_HOME and PYDEPS,
#              which are always mounted at the same paths
#   WANDB_MODE offline (default) or online; HF_TOKEN, WANDB_API_KEY pass through when set
#   DEPENDENCY sbatch dependency, default singleton (one job per name at a time); e.g. afterok:123,singleton
#   EXTRA_SETS extra recipe overrides for the training scripts, space-separated KEY=VALUE (e.g. rl.optimizer.max_steps=2),
#              or one per line when a value holds spaces; each reaches --set as written (no globbing)
#   DRY_RUN=1  check the settings (training scripts: NODES, GPUS_PER_NODE, PHASE and RECIPE through
#              `spatialiq recipes nemo-rl` itself, run with SIQ_PYTHON, default python3, into a temporary file),
#              print the container environment and mounts and every command (sbatch, srun, container, driver),
#              and exit 0; nothing is created or submitted. A bad value exits 2 with the reason. A real submission
#              runs the same checks first (the recipe check when SIQ_PYTHON can import the project), and the
#              training scripts check that DATA, its traces folder and (PHASE=rl) INIT_FROM exist.
#   Ray: HEAD_IP (default: the head node's IPv4 address from getent), RAY_NOFILE (65535: `ulimit -n` of every Ray
#   process), RAY_WAIT_S (1800: how long to wait for all Ray nodes, first image pulls included; polled every
#   RAY_POLL_S, 10, seconds), and the ports, all
#   below Linux's ephemeral range (32768-60999) and clear of the ranges NeMo-RL v0.7.0 itself uses (11001-28000):
#   RAY_PORT (GCS, 6379), RAY_CLIENT_SERVER_PORT (10001), RAY_DASHBOARD_PORT (8265; the dashboard is off, but its
#   minimal head process still takes the port), RAY_MIN_WORKER_PORT/RAY_MAX_WORKER_PORT (10002/11000),
#   RAY_NODE_MANAGER_PORT (29001), RAY_OBJECT_MANAGER_PORT (29002), RAY_RUNTIME_ENV_AGENT_PORT (29003),
#   RAY_DASHBOARD_AGENT_GRPC_PORT (29004), RAY_DASHBOARD_AGENT_LISTEN_PORT (29005), RAY_METRICS_EXPORT_PORT (29006).

SIQ_EXIT_DYNAMIC_SAMPLING_CAP=3  # spatialiq_train/nemo/driver.py EXIT_DYNAMIC_SAMPLING_CAP
SIQ_RAY_PORT_VARS=(RAY_PORT RAY_CLIENT_SERVER_PORT RAY_DASHBOARD_PORT RAY_MIN_WORKER_PORT RAY_MAX_WORKER_PORT
  RAY_NODE_MANAGER_PORT RAY_OBJECT_MANAGER_PORT RAY_RUNTIME_ENV_AGENT_PORT RAY_DASHBOARD_AGENT_GRPC_PORT
  RAY_DASHBOARD_AGENT_LISTEN_PORT RAY_METRICS_EXPORT_PORT)

siq_die() {  # print an error and stop the script (status 2: bad settings)
  echo "error: $*" >&2
  exit 2
}

# $1: variable name; its value must be a whole number >= 1.
siq_check_count() {
  [[ ${!1} =~ ^[1-9][0-9]*$ ]] || siq_die "$1=${!1}: expected a whole number >= 1"
}

siq_defaults() {
  if [[ -n ${SLURM_JOB_ID:-} ]]; then
    NODES=${SLURM_JOB_NUM_NODES:-${NODES:-1}}
    : "${GPUS_PER_NODE:=${SLURM_GPUS_ON_NODE:-4}}"
  fi
  : "${GPUS_PER_NODE:=4}" "${TIME:=24:00:00}" "${IMAGE:=nvcr.io/nvidia/nemo-rl:v0.7.0}" "${DRY_RUN:=0}"
  : "${DATA:=$PROJECT/data}" "${OUT:=$PROJECT/runs/$JOB_NAME}" "${WANDB_MODE:=offline}"
  : "${HF_HOME:=${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}" "${SIQ_HF_OFFLINE:=1}"
  : "${RAY_NOFILE:=65535}" "${RAY_WAIT_S:=1800}" "${RAY_POLL_S:=10}" "${RAY_PORT:=6379}"
  : "${RAY_CLIENT_SERVER_PORT:=10001}" "${RAY_DASHBOARD_PORT:=8265}"
  : "${RAY_MIN_WORKER_PORT:=10002}" "${RAY_MAX_WORKER_PORT:=11000}" "${RAY_NODE_MANAGER_PORT:=29001}"
  : "${RAY_OBJECT_MANAGER_PORT:=29002}" "${RAY_RUNTIME_ENV_AGENT_PORT:=29003}"
  : "${RAY_DASHBOARD_AGENT_GRPC_PORT:=29004}" "${RAY_DASHBOARD_AGENT_LISTEN_PORT:=29005}"
  : "${RAY_METRICS_EXPORT_PORT:=29006}"
  [[ $DRY_RUN == 0 || $DRY_RUN == 1 ]] || siq_die "DRY_RUN=$DRY_RUN: expected 1 (print the plan) or 0"
  [[ $SIQ_HF_OFFLINE == 0 || $SIQ_HF_OFFLINE == 1 ]] || siq_die "SIQ_HF_OFFLINE=$SIQ_HF_OFFLINE: expected 1 or 0"
  siq_check_count NODES
  siq_check_count GPUS_PER_NODE
  siq_check_count RAY_NOFILE
  siq_check_count RAY_WAIT_S
  siq_check_count RAY_POLL_S
  local v
  for v in "${SIQ_RAY_PORT_VARS[@]}"; do
    siq_check_count "$v"
    ((${!v} >= 1024 && ${!v} < 32768)) ||
      siq_die "$v=${!v}: expected a port in 1024-32767 (below Linux's ephemeral range 32768-60999)"
  done
  ((RAY_MIN_WORKER_PORT < RAY_MAX_WORKER_PORT)) ||
    siq_die "RAY_MIN_WORKER_PORT=$RAY_MIN_WORKER_PORT must be below RAY_MAX_WORKER_PORT=$RAY_MAX_WORKER_PORT"
  # The environment every container step gets: srun passes the job's exported variables into the container, where
  # pyxis lets an image's own ENV win; the v0.7.0 image (docker/Dockerfile) sets none of these.
  SIQ_CTR_ENV=("PYTHONPATH=$PROJECT${PYDEPS:+:$PYDEPS}" "HF_HOME=$HF_HOME" "WANDB_MODE=$WANDB_MODE")
  if [[ $SIQ_HF_OFFLINE == 1 ]]; then SIQ_CTR_ENV+=(HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1); fi
  local kv
  for kv in "${SIQ_CTR_ENV[@]}"; do export "${kv?}"; done
  # Mounts: the fixed ones, then MOUNTS; each source at the same path, duplicates dropped.
  local m seen=,
  SIQ_MOUNTS=()
  local srcs=("$PROJECT:$PROJECT" "$DATA:$DATA" "$OUT:$OUT" "$HF_HOME:$HF_HOME") extra
  if [[ -n ${PYDEPS:-} ]]; then srcs+=("$PYDEPS:$PYDEPS"); fi
  if [[ -n ${MOUNTS:-} ]]; then IFS=, read -r -a extra <<<"$MOUNTS"; srcs+=("${extra[@]}"); fi
  for m in "${srcs[@]}"; do
    [[ -z $m || $seen == *",$m,"* ]] && continue
    [[ $m == /* ]] || siq_die "container mount $m: expected an absolute path (DATA, OUT, HF_HOME, PYDEPS, BENCH and" \
      "the sources in MOUNTS are mounted at the same path in the container)"
    SIQ_MOUNTS+=("$m")
    seen+="$m,"
  done
  export GPUS_PER_NODE TIME IMAGE DATA OUT DRY_RUN NODES SIQ_HF_OFFLINE RAY_NOFILE RAY_WAIT_S RAY_POLL_S \
    "${SIQ_RAY_PORT_VARS[@]}"
}

# DRY_RUN: what every container step gets.
siq_print_container() {
  local m kv
  echo "# container image: $IMAGE"
  for m in "${SIQ_MOUNTS[@]}"; do echo "# mount $m"; done
  for kv in "${SIQ_CTR_ENV[@]}"; do echo "# env $kv"; done
  if [[ ! -d $HF_HOME ]]; then
    echo "# warning: HF_HOME=$HF_HOME does not exist yet: fill it on the login node first (docs/cluster.md)"
  fi
}

# Before submitting: the model cache and PYDEPS exist. Inside the allocation: OUT is created and every mount source
# exists (pyxis refuses a missing one with a less helpful message).
siq_check_mounts() {
  if [[ ! -d $HF_HOME ]]; then
    siq_die "HF_HOME=$HF_HOME does not exist: download the model into it on the login node first, e.g." \
      "\`HF_HOME=$HF_HOME hf download MODEL\` for the recipe's model.name_or_path (docs/cluster.md), or set HF_HOME"
  fi
  if [[ -n ${PYDEPS:-} && ! -d $PYDEPS ]]; then
    siq_die "PYDEPS=$PYDEPS is not a folder (pip install --target PYDEPS PACKAGE, or unset it)"
  fi
  [[ -n ${SLURM_JOB_ID:-} ]] || return 0
  mkdir -p "$OUT/slurm"
  local m
  for m in "${SIQ_MOUNTS[@]}"; do
    [[ -e ${m%%:*} ]] || siq_die "container mount source ${m%%:*} does not exist (mounts: PROJECT, DATA, OUT," \
      "HF_HOME, PYDEPS, MOUNTS)"
  done
}

# Print (DRY_RUN=1) or run one command; `siq_run --bg cmd...` runs it in the background (its pid: SIQ_BG_PID).
siq_run() {
  local bg=0
  if [[ $1 == --bg ]]; then bg=1; shift; fi
  if [[ $DRY_RUN == 1 ]]; then
    printf '+'; printf ' %q' "$@"; if ((bg)); then printf ' &'; fi; printf '\n'
    return 0
  fi
  if ((bg)); then "$@" & SIQ_BG_PID=$!; else "$@"; fi
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

# The head node's address for Ray: HEAD_IP, else its first non-loopback IPv4 address (getent).
siq_node_ip() {  # $1: node name
  if [[ -n ${HEAD_IP:-} ]]; then echo "$HEAD_IP"; return 0; fi
  local ip
  ip=$(getent ahostsv4 "$1" 2>/dev/null | awk '$1 !~ /^127\./ {print $1; exit}') || true
  if [[ -n $ip ]]; then echo "$ip"; return 0; fi
  if [[ $DRY_RUN == 1 && -z ${SLURM_JOB_ID:-} ]]; then echo "IP_OF_$1"; return 0; fi
  echo "error: no IPv4 address for the head node $1 (getent ahostsv4 $1): set HEAD_IP to its address" >&2
  return 2
}

# srun options that put a step in the container (one named container per job and node, so the
# driver step shares the head's Ray session files).
siq_ctr() {
  local IFS=,
  SIQ_CTR=(--container-image="$IMAGE" --container-mounts="${SIQ_MOUNTS[*]}" --no-container-mount-home
    --container-workdir="$PROJECT" --container-name="siq-${SLURM_JOB_ID:-JOBID}")
}

siq_submit() {  # $1: this script's file name in PROJECT/slurm
  local args=(--job-name="$JOB_NAME" --nodes="$NODES" --ntasks-per-node=1 --gres="gpu:$GPUS_PER_NODE"
    --exclusive --time="$TIME" --dependency="${DEPENDENCY:-singleton}" --output="$OUT/slurm/%x-%j.log"
    --export="ALL,SIQ_PROJECT=$PROJECT")
  [[ -n ${ACCOUNT:-} ]] && args+=(--account="$ACCOUNT")
  [[ -n ${PARTITION:-} ]] && args+=(--partition="$PARTITION")
  siq_run mkdir -p "$OUT/slurm"
  siq_run sbatch "${args[@]}" "$PROJECT/slurm/$1"
  if [[ $DRY_RUN == 1 ]]; then
    echo "# inside the allocation ($NODES nodes x $GPUS_PER_NODE GPUs) the job runs:"
    "$SIQ_JOB_FN"
  fi
}

# Entry point of every script: check, then submit from the login node or run the job body inside an allocation.
siq_main() {  # $1: the script's file name in PROJECT/slurm, $2: job body function, $3: optional check function
  SIQ_JOB_FN=$2
  if [[ -n ${3:-} ]]; then "$3"; fi
  if [[ $DRY_RUN == 1 ]]; then
    siq_print_container
  else
    siq_check_mounts
  fi
  if [[ -n ${SLURM_JOB_ID:-} ]]; then "$SIQ_JOB_FN"; else siq_submit "$1"; fi
}

# The readiness probe: succeeds once Ray on the head reports at least $2 live nodes.
siq_probe_cmd() {  # $1: head node, $2: node count
  local live="sum(n['Alive'] for n in ray.nodes())"
  SIQ_PROBE=(srun --overlap --nodes=1 --ntasks=1 --nodelist="$1" "${SIQ_CTR[@]}" python -c
    "import ray,sys; ray.init(address='auto', logging_level='ERROR'); sys.exit($live < $2)")
}

siq_wait_ray() {  # $1: head node, $2: node count, rest: pids of the background Ray steps
  local head=$1 want=$2
  shift 2
  siq_probe_cmd "$head" "$want"
  if [[ $DRY_RUN == 1 ]]; then
    siq_run "${SIQ_PROBE[@]}"
    echo "# (repeated every $RAY_POLL_S s for at most RAY_WAIT_S=$RAY_WAIT_S s, until $want Ray nodes are up)"
    return 0
  fi
  local deadline=$((SECONDS + RAY_WAIT_S)) pid out=
  while ((SECONDS < deadline)); do
    if out=$("${SIQ_PROBE[@]}" 2>&1); then return 0; fi
    for pid in "$@"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "error: a Ray start step (srun pid $pid) ended before Ray reached $want nodes (see $OUT/slurm);" \
          "the last probe said:" >&2
        tail -n 5 <<<"$out" >&2
        return 1
      fi
    done
    sleep "$RAY_POLL_S"
  done
  echo "error: Ray did not reach $want nodes within RAY_WAIT_S=$RAY_WAIT_S s (see $OUT/slurm); the last probe said:" >&2
  tail -n 5 <<<"$out" >&2
  return 1
}

# `ray start ARGS...` in the container with the soft limit on open files raised to RAY_NOFILE (or the hard limit).
# shellcheck disable=SC2016  # the script is expanded by the inner bash
siq_ray_start_cmd() {
  local script='want=$1; shift; hard=$(ulimit -Hn); if [[ $hard != unlimited ]] && ((hard < want)); then '
  script+='echo "warning: ulimit -n: hard limit $hard is below $want; Ray may run out of file descriptors" >&2; '
  script+='want=$hard; fi; ulimit -Sn "$want" && exec ray start "$@"'
  SIQ_RAY_START=(bash -c "$script" siq-ray "$RAY_NOFILE" "$@")
}

# Ray head + workers, the NeMo-RL config, then the driver once on the head. $1: rl|sft, rest: --set overrides.
siq_ray_job() {
  local phase=$1; shift
  local nodes head head_ip cfg="$OUT/nemo_rl/$phase/config.yaml" rc=0 pids=()
  mapfile -t nodes < <(siq_nodes)
  if ((${#nodes[@]} == 0)); then echo "error: no nodes in SLURM_JOB_NODELIST=${SLURM_JOB_NODELIST:-}" >&2; return 1; fi
  head=${nodes[0]}
  head_ip=$(siq_node_ip "$head") || return 2
  siq_ctr
  local on_head=(srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" "${SIQ_CTR[@]}")
  local ray_opts=(--num-gpus="$GPUS_PER_NODE" --disable-usage-stats
    --min-worker-port="$RAY_MIN_WORKER_PORT" --max-worker-port="$RAY_MAX_WORKER_PORT"
    --node-manager-port="$RAY_NODE_MANAGER_PORT" --object-manager-port="$RAY_OBJECT_MANAGER_PORT"
    --runtime-env-agent-port="$RAY_RUNTIME_ENV_AGENT_PORT" --dashboard-agent-grpc-port="$RAY_DASHBOARD_AGENT_GRPC_PORT"
    --dashboard-agent-listen-port="$RAY_DASHBOARD_AGENT_LISTEN_PORT" --metrics-export-port="$RAY_METRICS_EXPORT_PORT"
    --block)
  siq_run "${on_head[@]}" python -m spatialiq_train.cli recipes nemo-rl "$RECIPE" --phase "$phase" --out "$cfg" \
    --nodes "${#nodes[@]}" --gpus-per-node "$GPUS_PER_NODE" "$@"
  siq_ray_start_cmd --head --node-ip-address="$head_ip" --port="$RAY_PORT" \
    --ray-client-server-port="$RAY_CLIENT_SERVER_PORT" --include-dashboard=false \
    --dashboard-port="$RAY_DASHBOARD_PORT" "${ray_opts[@]}"
  siq_run --bg srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" --gres="gpu:$GPUS_PER_NODE" "${SIQ_CTR[@]}" \
    "${SIQ_RAY_START[@]}"
  [[ $DRY_RUN == 1 ]] || pids+=("$SIQ_BG_PID")
  siq_wait_ray "$head" 1 "${pids[@]}" || rc=$?
  if ((rc == 0 && ${#nodes[@]} > 1)); then
    siq_ray_start_cmd --address="$head_ip:$RAY_PORT" "${ray_opts[@]}"
    siq_run --bg srun --overlap --nodes=$((${#nodes[@]} - 1)) --ntasks-per-node=1 --exclude="$head" \
      --gres="gpu:$GPUS_PER_NODE" "${SIQ_CTR[@]}" "${SIQ_RAY_START[@]}"
    [[ $DRY_RUN == 1 ]] || pids+=("$SIQ_BG_PID")
    siq_wait_ray "$head" "${#nodes[@]}" "${pids[@]}" || rc=$?
  fi
  if ((rc == 0)); then
    export RAY_ADDRESS="$head_ip:$RAY_PORT"
    siq_run "${on_head[@]}" python -m spatialiq_train.cli nemo "$phase" --config "$cfg" || rc=$?
  fi
  if [[ $DRY_RUN != 1 ]] && ((${#pids[@]})); then kill "${pids[@]}" 2>/dev/null || true; fi
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

# The training scripts' recipe overrides (into SIQ_SETS): data and run folders, INIT_FROM for RL, EXTRA_SETS.
siq_train_sets() {
  SIQ_SETS=(--set "data.traces_dir=${TRACES_DIR:-$DATA/traces/$TRACES}" --set "data.data_root=${DATASET:-$DATA/scenes}"
    --set "run.output_dir=$OUT")
  if [[ ${PHASE:?} == rl && ${INIT_FROM:-none} != none ]]; then SIQ_SETS+=(--set "rl.init_from=$INIT_FROM"); fi
  # EXTRA_SETS: space-separated KEY=VALUE, or one per line when a value holds spaces; never globbed
  local extra sets=()
  if [[ ${EXTRA_SETS:-} == *$'\n'* ]]; then mapfile -t sets <<<"$EXTRA_SETS"; else read -r -a sets <<<"${EXTRA_SETS:-}"; fi
  for extra in "${sets[@]}"; do [[ -z $extra ]] || SIQ_SETS+=(--set "$extra"); done
}

# NODES, GPUS_PER_NODE, PHASE and RECIPE go through `spatialiq recipes nemo-rl` itself (the job's first step), with
# the job's --set overrides, written to a temporary folder that is removed again. Needs the project's Python on this
# node (SIQ_PYTHON): a DRY_RUN on the login node requires it; a real submission, and a DRY_RUN inside an allocation
# (whose node may not have it outside the container), run the check when that Python can import the project and
# otherwise say that the job's first step checks. Inside a real job the first step is the check.
siq_train_check() {
  local py=${SIQ_PYTHON:-python3} tmp rc=0
  if [[ $DRY_RUN != 1 && -n ${SLURM_JOB_ID:-} ]]; then return 0; fi
  if [[ $DRY_RUN != 1 || -n ${SLURM_JOB_ID:-} ]] && ! "$py" -c 'import spatialiq_train.cli' >/dev/null 2>&1; then
    echo "note: recipe check skipped: $py cannot import spatialiq_train here (set SIQ_PYTHON to the project's" \
      "Python); the job's first step checks instead" >&2
    return 0
  fi
  siq_train_sets
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/siq-check.XXXXXX")
  "$py" -m spatialiq_train.cli recipes nemo-rl "$RECIPE" --phase "$PHASE" --out "$tmp/config.yaml" \
    --nodes "$NODES" --gpus-per-node "$GPUS_PER_NODE" "${SIQ_SETS[@]}" >"$tmp/log" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$tmp/log" >&2
    rm -rf "$tmp"
    siq_die "RECIPE=$RECIPE PHASE=$PHASE NODES=$NODES GPUS_PER_NODE=$GPUS_PER_NODE: refused by" \
      "\`spatialiq recipes nemo-rl\` (above; run with SIQ_PYTHON=$py and PYTHONPATH=$PYTHONPATH)"
  fi
  echo "# check: \`spatialiq recipes nemo-rl\` accepts RECIPE=$RECIPE PHASE=$PHASE on $NODES x $GPUS_PER_NODE GPUs"
  grep -v '^wrote ' "$tmp/log" | sed 's/^/# check: /' || true
  rm -rf "$tmp"
}

# What the job reads exists, checked before sbatch (DRY_RUN too) and again inside the job: DATA, its traces folder
# and, for PHASE=rl, INIT_FROM (unless none). A submission waiting on another job (DEPENDENCY with after...) may name
# an INIT_FROM that job writes: a note says so, and the job checks it when it starts.
siq_train_inputs() {
  [[ -d $DATA ]] || siq_die "DATA=$DATA does not exist: set DATA to the folder holding scenes/ (spatialiq gen)" \
    "and traces/ (spatialiq traces); docs/cluster.md"
  local traces=${TRACES_DIR:-$DATA/traces/$TRACES}
  [[ -d $traces ]] || siq_die "traces folder $traces does not exist: write it with \`spatialiq traces\`" \
    "(docs/cluster.md), or set TRACES_DIR"
  [[ $PHASE == rl && ${INIT_FROM:-none} != none && ! -f $INIT_FROM/config.json ]] || return 0
  if [[ -z ${SLURM_JOB_ID:-} && ${DEPENDENCY:-} == *after* ]]; then
    echo "note: INIT_FROM=$INIT_FROM holds no checkpoint yet; with DEPENDENCY=$DEPENDENCY the job checks it" \
      "when it starts" >&2
    return 0
  fi
  siq_die "INIT_FROM=$INIT_FROM holds no HF checkpoint (config.json); run the SFT warm-up (PHASE=sft) and" \
    "slurm/convert.sh first, or set INIT_FROM=none to start from the base model"
}

# The training scripts' checks: the recipe (`recipes nemo-rl`), then the inputs.
siq_train_checks() {
  siq_train_check
  siq_train_inputs
}

# Body of the training scripts: $PHASE (rl|sft) of $RECIPE on the data under $DATA, run folder $OUT.
siq_train_job() {
  siq_train_sets
  siq_ray_job "$PHASE" "${SIQ_SETS[@]}"
}

# The settings every training script shares; the script sets PROJECT, JOB_NAME, RECIPE, NODES, TRACES, PHASE first.
siq_train_main() {  # $1: the script's file name in PROJECT/slurm
  siq_defaults
  [[ $PHASE == rl || $PHASE == sft ]] || siq_die "PHASE=$PHASE: expected rl or sft"
  [[ -n ${RECIPE:-} ]] || siq_die "RECIPE is empty: expected a shipped recipe name or a recipe YAML path"
  : "${INIT_FROM:=$OUT/nemo_rl/sft/hf}"
  siq_main "$1" siq_train_job siq_train_checks
}
