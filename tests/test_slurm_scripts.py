"""slurm/*.sh under fake sbatch/srun/scontrol/getent: what they would submit and run, for 1 and 8 nodes (no Slurm
needed)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "slurm"
IMAGE = "nvcr.io/nvidia/nemo-rl:v0.7.0"
TRAINING = {  # script -> (recipe, phase, traces kind)
    "dapo_32b.sh": ("dapo_tight_32b", "rl", "cot"),
    "dapo_7b.sh": ("dapo_tight_7b", "rl", "cot"),
    "sft_cot_32b.sh": ("sft_cot_32b", "sft", "cot"),
    "sft_plain_32b.sh": ("sft_plain_32b", "sft", "plain"),
}
ENV_SEEN = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PYTHONPATH", "RAY_ADDRESS")
FAKE_SRUN = """#!/usr/bin/env bash
# Like Ray, a readiness probe succeeds only once the `ray start` steps it waits for have begun (1: head, 2: workers).
case "$*" in *"ray.nodes()"*)
  [[ -n ${FAKE_PROBE_FAILS:-} ]] && { echo "ConnectionError: fake probe"; exit 1; }
  want=2; [[ "$*" == *"< 1)"* ]] && want=1
  for _ in $(seq 100); do (( $(grep -c 'siq-ray' "$FAKE_LOG" 2>/dev/null) >= want )) && break; sleep 0.05; done;;
esac
printf 'srun %s\\n' "$(printf '%q ' "$@")" >> "$FAKE_LOG"
line=env
for v in HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_HOME PYTHONPATH RAY_ADDRESS; do line+=" $v=${!v-UNSET}"; done
echo "$line" >> "$FAKE_LOG.env"
case "$*" in
  *"spatialiq_train.cli nemo "*) exit "${FAKE_DRIVER_RC:-0}";;
  *"siq-ray"*) [[ -n ${FAKE_PROBE_FAILS:-} ]] && exit 1; exec sleep 30 >/dev/null 2>&1 </dev/null;;  # a Ray node
esac
exit 0
"""
FAKE_SBATCH = """#!/usr/bin/env bash
printf 'sbatch %s\\n' "$(printf '%q ' "$@")" >> "$FAKE_LOG"
n=$(grep -c '^sbatch' "$FAKE_LOG")
echo "42$n"
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
[[ "$1 $2" == "show hostnames" ]] || exit 1
for ((i = 0; i < FAKE_NODES; i++)); do echo "gpu$i"; done
"""
FAKE_GETENT = """#!/usr/bin/env bash
[[ $1 == ahostsv4 && $2 == gpu* ]] || exit 2
echo "127.0.1.1       STREAM $2"
echo "10.0.0.${2#gpu}        STREAM $2"
"""


@pytest.fixture()
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("sbatch", FAKE_SBATCH), ("scontrol", FAKE_SCONTROL),
                       ("getent", FAKE_GETENT)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for kind in ("cot", "plain"):  # the traces the training scripts read (held-out parts: distinct structures)
        traces = tmp_path / "data" / "traces" / kind
        traces.mkdir(parents=True)
        for split in ("train", "warmup", "rl", "val"):
            (traces / f"{split}.jsonl").write_text(f'{{"structure_id": "{split}-0"}}\n')
    (tmp_path / "hf_home").mkdir()
    (tmp_path / "sft_ckpt").mkdir()  # the RL scripts' INIT_FROM unless a test sets another
    (tmp_path / "sft_ckpt" / "config.json").write_text("{}")
    return tmp_path


def run(script: str | Path, tmp: Path, nodes: int, *, in_job: bool, cwd: Path | None = None,
        **env: str) -> tuple[subprocess.CompletedProcess, list]:
    """Run a script (a name in slurm/, or a path) under the fakes; env values of None are removed."""
    log = tmp / "calls.log"
    log.unlink(missing_ok=True)
    Path(f"{log}.env").unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIQ_", "HF_", "RAY_"))}
    base.update(PATH=f"{tmp / 'bin'}:{os.environ['PATH']}", FAKE_LOG=str(log), FAKE_NODES=str(nodes),
                NODES=str(nodes), DATA=str(tmp / "data"), OUT=str(tmp / "out"), ACCOUNT="acct", PARTITION="gpu",
                HF_HOME=str(tmp / "hf_home"), SIQ_PYTHON=sys.executable, INIT_FROM=str(tmp / "sft_ckpt"))
    if in_job:
        base.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST=f"gpu[0-{nodes - 1}]", SLURM_JOB_NUM_NODES=str(nodes),
                    SIQ_PROJECT=str(ROOT))
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}
    path = script if isinstance(script, Path) else SLURM / script
    proc = subprocess.run(["bash", str(path)], env=base, capture_output=True, text=True, timeout=90, cwd=cwd or tmp)
    calls = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def seen_env(tmp: Path) -> list[dict[str, str]]:
    """The environment each fake srun call saw (the variables in ENV_SEEN; UNSET when absent)."""
    lines = Path(f"{tmp / 'calls.log'}.env").read_text().splitlines()
    return [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in lines]


def plan(stdout: str) -> list[list[str]]:
    """The printed commands (lines starting with '+'), as argument lists."""
    return [shlex.split(line[2:].removesuffix(" &")) for line in stdout.splitlines() if line.startswith("+ ")]


def printed(stdout: str, kind: str) -> list[str]:
    """DRY_RUN's '# mount X' / '# env X' lines."""
    return [line.split(" ", 2)[2] for line in stdout.splitlines() if line.startswith(f"# {kind} ")]


def opt(cmd: list[str], name: str) -> str | None:
    hits = [a.split("=", 1)[1] for a in cmd if a.startswith(name + "=")]
    return hits[0] if hits else None


def ray_starts(cmds: list[list[str]]) -> list[list[str]]:
    return [c for c in cmds if "siq-ray" in c]


def ray_args(cmd: list[str]) -> list[str]:
    """The `ray start` arguments of a Ray step (after the ulimit wrapper's name and RAY_NOFILE)."""
    return cmd[cmd.index("siq-ray") + 2:]


def check_job_plan(cmds: list[list[str]], tmp: Path, nodes: int, recipe: str, phase: str, traces: str) -> None:
    sruns = [c for c in cmds if c[0] == "srun"]
    for c in sruns:
        assert opt(c, "--container-image") == IMAGE
        mounts = opt(c, "--container-mounts").split(",")
        assert {f"{ROOT}:{ROOT}", f"{tmp}/data:{tmp}/data", f"{tmp}/out:{tmp}/out",
                f"{tmp}/hf_home:{tmp}/hf_home"} <= set(mounts)
        assert "--no-container-mount-home" in c and opt(c, "--container-workdir") == str(ROOT)
    cfg = f"{tmp}/out/nemo_rl/{phase}/config.yaml"
    gen = [c for c in sruns if "recipes" in c and "nemo-rl" in c]
    assert len(gen) == 1 and gen[0][gen[0].index("nemo-rl") + 1] == recipe
    g = gen[0]
    assert g[g.index("--nodes") + 1] == str(nodes) and g[g.index("--gpus-per-node") + 1] == "4"
    assert g[g.index("--out") + 1] == cfg and f"data.traces_dir={tmp}/data/traces/{traces}" in g
    heads = [c for c in ray_starts(sruns) if "--head" in c]
    assert len(heads) == 1 and opt(heads[0], "--gres") == "gpu:4" and "--num-gpus=4" in heads[0]
    workers = [c for c in ray_starts(sruns) if "--head" not in c]
    if nodes == 1:
        assert workers == []
    else:
        assert len(workers) == 1 and opt(workers[0], "--nodes") == str(nodes - 1)
        assert opt(workers[0], "--ntasks-per-node") == "1" and opt(workers[0], "--gres") == "gpu:4"
        assert opt(workers[0], "--exclude") == opt(heads[0], "--nodelist")
    drivers = [c for c in sruns if c[-5:] == ["spatialiq_train.cli", "nemo", phase, "--config", cfg]]
    assert len(drivers) == 1 and opt(drivers[0], "--nodes") == "1" and opt(drivers[0], "--ntasks") == "1"
    assert drivers[0][drivers[0].index("-m") - 1] == "python"  # the container's interpreter, project on PYTHONPATH
    head_node = opt(heads[0], "--nodelist")
    assert opt(drivers[0], "--nodelist") == head_node  # the driver runs once, on the head


# -- login node and allocation plans ------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 8])
@pytest.mark.parametrize("script", sorted(TRAINING))
def test_dry_run_from_login_node(fake_slurm, script, nodes):
    recipe, phase, traces = TRAINING[script]
    proc, calls = run(script, fake_slurm, nodes, in_job=False, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == []  # nothing submitted or run
    assert not (fake_slurm / "out").exists()  # nothing created
    assert f"accepts RECIPE={recipe} PHASE={phase} on {nodes} x 4 GPUs" in proc.stdout  # the recipes nemo-rl check
    cmds = plan(proc.stdout)
    sb = [c for c in cmds if c[0] == "sbatch"]
    assert len(sb) == 1
    assert opt(sb[0], "--nodes") == str(nodes) and opt(sb[0], "--gres") == "gpu:4"
    assert opt(sb[0], "--account") == "acct" and opt(sb[0], "--partition") == "gpu"
    assert opt(sb[0], "--export") == f"ALL,SIQ_PROJECT={ROOT}" and sb[0][-1] == str(SLURM / script)
    assert opt(sb[0], "--dependency") == "singleton"  # a resubmission waits, then resumes from the checkpoints
    check_job_plan(cmds, fake_slurm, nodes, recipe, phase, traces)


@pytest.mark.parametrize("nodes", [1, 8])
@pytest.mark.parametrize("script", sorted(TRAINING))
def test_dry_run_inside_allocation_uses_slurm_node_names(fake_slurm, script, nodes):
    recipe, phase, traces = TRAINING[script]
    proc, calls = run(script, fake_slurm, nodes, in_job=True, DRY_RUN="1", INIT_FROM="none")
    assert proc.returncode == 0, proc.stderr
    assert calls == []
    cmds = plan(proc.stdout)
    assert not any(c[0] == "sbatch" for c in cmds)
    check_job_plan(cmds, fake_slurm, nodes, recipe, phase, traces)
    head = [c for c in ray_starts(cmds) if "--head" in c][0]
    assert opt(head, "--nodelist") == "gpu0" and opt(head, "--container-name") == "siq-77"
    assert "--node-ip-address=10.0.0.0" in head  # getent's non-loopback address of gpu0


def test_inside_an_allocation_its_node_and_gpu_counts_win(fake_slurm):
    """`sbatch -N 2 --gres=gpu:8 slurm/dapo_32b.sh`: the script's defaults (8 nodes, 4 GPUs) give way."""
    proc, _ = run("dapo_32b.sh", fake_slurm, 2, in_job=True, DRY_RUN="1", NODES=None, SLURM_GPUS_ON_NODE="8")
    assert proc.returncode == 0, proc.stderr
    assert "accepts RECIPE=dapo_tight_32b PHASE=rl on 2 x 8 GPUs" in proc.stdout
    gen = next(c for c in plan(proc.stdout) if "nemo-rl" in c)
    assert gen[gen.index("--nodes") + 1] == "2" and gen[gen.index("--gpus-per-node") + 1] == "8"
    assert all("--num-gpus=8" in c for c in ray_starts(plan(proc.stdout)))


@pytest.mark.parametrize("script", sorted(TRAINING))
def test_sbatch_lines_give_the_defaults_before_the_first_command(script):
    lines = (SLURM / script).read_text().splitlines()
    first_cmd = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    directives = [line.split(None, 1)[1] for line in lines if line.startswith("#SBATCH")]
    assert all(i < first_cmd for i, line in enumerate(lines) if line.startswith("#SBATCH"))  # sbatch stops there
    got = dict(d.split("=", 1) if "=" in d else (d, "") for d in directives)
    job_name = re.search(r"^JOB_NAME=(\S+)", (SLURM / script).read_text(), re.M).group(1)
    default_nodes = re.search(r'^: "\$\{NODES:=(\d+)\}"', (SLURM / script).read_text(), re.M).group(1)
    assert got["--job-name"] == job_name and got["--nodes"] == default_nodes and got["--gres"] == "gpu:4"
    assert "--exclusive" in got and got["--ntasks-per-node"] == "1" and got["--time"] == "24:00:00"
    assert got["--output"] == "%x-%j.log" and got["--dependency"] == "singleton"


def spool_copy(tmp: Path, script: str) -> Path:
    """Where Slurm runs a plainly sbatch'ed script: a copy named slurm_script in its spool folder."""
    spool = tmp / "spool" / "job77"
    spool.mkdir(parents=True, exist_ok=True)
    shutil.copy(SLURM / script, spool / "slurm_script")
    return spool / "slurm_script"


@pytest.mark.parametrize("script", ["dapo_32b.sh", "sft_plain_32b.sh"])
def test_plain_sbatch_runs_from_the_spool_copy(fake_slurm, script):
    recipe, phase, traces = TRAINING[script]
    copy = spool_copy(fake_slurm, script)
    proc, calls = run(copy, fake_slurm, 2, in_job=True, cwd=copy.parent, SIQ_PROJECT=None, SLURM_SUBMIT_DIR=str(ROOT),
                      INIT_FROM="none", NODES=None)
    assert proc.returncode == 0, proc.stderr
    assert all(c[0] == "srun" for c in calls)
    check_job_plan([c for c in calls if "-c" not in c or "siq-ray" in c], fake_slurm, 2, recipe, phase, traces)
    assert (fake_slurm / "out" / "slurm").is_dir()  # OUT is created before the first container step mounts it


def test_plain_sbatch_outside_the_checkout_says_how_to_find_it(fake_slurm):
    copy = spool_copy(fake_slurm, "dapo_7b.sh")
    proc, calls = run(copy, fake_slurm, 2, in_job=True, cwd=copy.parent, SIQ_PROJECT=None,
                      SLURM_SUBMIT_DIR=str(fake_slurm))
    assert proc.returncode == 2 and calls == []
    assert f"SLURM_SUBMIT_DIR={fake_slurm}" in proc.stderr and "SIQ_PROJECT" in proc.stderr
    proc, calls = run(copy, fake_slurm, 2, in_job=True, SIQ_PROJECT=str(fake_slurm / "nowhere"))
    assert proc.returncode == 2 and calls == [] and f"{fake_slurm}/nowhere" in proc.stderr


# -- mounts, container environment, offline Hub ---------------------------------------------------------------------


def test_mounts_and_container_environment_are_printed(fake_slurm):
    pydeps = fake_slurm / "pydeps"
    pydeps.mkdir()
    proc, _ = run("dapo_32b.sh", fake_slurm, 2, in_job=False, DRY_RUN="1", PYDEPS=str(pydeps),
                  MOUNTS=f"/scratch:/scratch,{fake_slurm}/data:{fake_slurm}/data")
    assert proc.returncode == 0, proc.stderr
    mounts = printed(proc.stdout, "mount")
    assert mounts == [f"{ROOT}:{ROOT}", f"{fake_slurm}/data:{fake_slurm}/data", f"{fake_slurm}/out:{fake_slurm}/out",
                      f"{fake_slurm}/hf_home:{fake_slurm}/hf_home", f"{pydeps}:{pydeps}", "/scratch:/scratch"]
    env = dict(kv.split("=", 1) for kv in printed(proc.stdout, "env"))
    assert env["PYTHONPATH"] == f"{ROOT}:{pydeps}" and env["HF_HOME"] == f"{fake_slurm}/hf_home"
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    for c in plan(proc.stdout):
        if c[0] == "srun":
            assert opt(c, "--container-mounts").split(",") == mounts


def test_hf_home_defaults_to_the_hub_cache_of_the_user(fake_slurm):
    home = fake_slurm / "home"
    proc, _ = run("dapo_7b.sh", fake_slurm, 2, in_job=False, DRY_RUN="1", HF_HOME=None, HOME=str(home),
                  XDG_CACHE_HOME=None)
    assert proc.returncode == 0, proc.stderr
    assert f"{home}/.cache/huggingface:{home}/.cache/huggingface" in printed(proc.stdout, "mount")
    assert "does not exist yet" in proc.stdout  # the pre-download step has not run


@pytest.mark.parametrize("nodes", [1, 2])
def test_compute_nodes_run_offline_with_the_cache_and_pydeps(fake_slurm, nodes):
    pydeps = fake_slurm / "pydeps"
    pydeps.mkdir()
    proc, calls = run("sft_cot_32b.sh", fake_slurm, nodes, in_job=True, PYDEPS=str(pydeps))
    assert proc.returncode == 0, proc.stderr
    envs = seen_env(fake_slurm)
    assert len(envs) == len(calls) > 0
    for call, env in zip(calls, envs, strict=True):
        assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1", call
        assert env["HF_HOME"] == f"{fake_slurm}/hf_home" and env["PYTHONPATH"] == f"{ROOT}:{pydeps}"
        assert f"{pydeps}:{pydeps}" in opt(call, "--container-mounts").split(",")
    driver = envs[[i for i, c in enumerate(calls) if c[-4:-2] == ["nemo", "sft"]][0]]
    assert driver["RAY_ADDRESS"] == "10.0.0.0:6379"  # the driver attaches to the head by its address
    proc, _ = run("sft_cot_32b.sh", fake_slurm, 1, in_job=True, SIQ_HF_OFFLINE="0")
    assert proc.returncode == 0, proc.stderr
    assert {e["HF_HUB_OFFLINE"] for e in seen_env(fake_slurm)} == {"UNSET"}


def test_submission_refuses_a_missing_model_cache_or_pydeps(fake_slurm):
    proc, calls = run("dapo_32b.sh", fake_slurm, 8, in_job=False, HF_HOME=str(fake_slurm / "nocache"))
    assert proc.returncode == 2 and calls == [] and not (fake_slurm / "out").exists()
    assert f"HF_HOME={fake_slurm}/nocache does not exist" in proc.stderr and "hf download" in proc.stderr
    proc, calls = run("dapo_32b.sh", fake_slurm, 8, in_job=False, PYDEPS=str(fake_slurm / "nodeps"))
    assert proc.returncode == 2 and calls == [] and f"PYDEPS={fake_slurm}/nodeps" in proc.stderr


@pytest.mark.parametrize("var", ["DATA", "OUT", "HF_HOME", "PYDEPS"])
def test_relative_mount_paths_are_refused(fake_slurm, var):
    proc, calls = run("sft_plain_32b.sh", fake_slurm, 4, in_job=False, DRY_RUN="1", **{var: "rel/dir"})
    assert proc.returncode == 2 and calls == []
    assert "container mount rel/dir:rel/dir: expected an absolute" in proc.stderr


def test_job_refuses_a_missing_mount_source(fake_slurm):
    missing = fake_slurm / "nodata"  # (a missing DATA is refused earlier, by name: see the inputs test)
    proc, calls = run("sft_cot_32b.sh", fake_slurm, 1, in_job=True, MOUNTS=f"{missing}:{missing}")
    assert proc.returncode == 2 and calls == [] and f"mount source {missing}" in proc.stderr


# -- Ray ------------------------------------------------------------------------------------------------------------


def test_ray_addresses_ports_and_wait(fake_slurm):
    proc, _ = run("dapo_32b.sh", fake_slurm, 8, in_job=True, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    cmds = plan(proc.stdout)
    (head,) = [ray_args(c) for c in ray_starts(cmds) if "--head" in c]
    (worker,) = [ray_args(c) for c in ray_starts(cmds) if "--head" not in c]
    assert head[:1] == ["--head"] and "--node-ip-address=10.0.0.0" in head and "--port=6379" in head
    assert "--dashboard-port=8265" in head and "--include-dashboard=false" in head
    assert "--address=10.0.0.0:6379" in worker and "--block" in head and "--block" in worker
    for args in (head, worker):
        ports = {a.split("=")[0]: int(a.split("=")[1]) for a in args if re.fullmatch(r"--[a-z-]*port=\d+", a)}
        assert {"--min-worker-port", "--max-worker-port", "--node-manager-port", "--object-manager-port",
                "--runtime-env-agent-port", "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
                "--metrics-export-port"} <= set(ports)
        assert all(1024 <= p < 32768 for p in ports.values())  # below Linux's ephemeral range
        assert not any(11001 <= p <= 28000 for p in ports.values())  # NeMo-RL's own vLLM/Gym/rendezvous ranges
        assert ports["--min-worker-port"] < ports["--max-worker-port"]
    assert "at most RAY_WAIT_S=1800 s" in proc.stdout  # long enough for first image pulls on every node
    proc, _ = run("dapo_32b.sh", fake_slurm, 8, in_job=True, DRY_RUN="1", HEAD_IP="192.168.7.7")
    assert "--node-ip-address=192.168.7.7" in [a for c in ray_starts(plan(proc.stdout)) for a in c]


@pytest.mark.parametrize(("var", "value"), [("RAY_PORT", "40000"), ("RAY_MIN_WORKER_PORT", "50000"),
                                            ("RAY_MAX_WORKER_PORT", "9000"), ("RAY_NOFILE", "0")])
def test_ray_settings_are_checked(fake_slurm, var, value):
    proc, calls = run("dapo_7b.sh", fake_slurm, 2, in_job=False, DRY_RUN="1", **{var: value})
    assert proc.returncode == 2 and calls == [] and f"{var}={value}" in proc.stderr


@pytest.mark.parametrize(("want", "soft"), [(512, 512), (10**9, None)])
def test_ray_processes_start_with_the_raised_open_file_limit(fake_slurm, want, soft):
    """Run the printed head step's wrapper here, with a `ray` that reports its own limit."""
    proc, _ = run("dapo_32b.sh", fake_slurm, 1, in_job=True, DRY_RUN="1", RAY_NOFILE=str(want))
    (head,) = ray_starts(plan(proc.stdout))
    wrapper = head[head.index("bash"):]
    (fake_slurm / "bin" / "ray").write_text('#!/usr/bin/env bash\necho "nofile=$(ulimit -Sn) args=$*"\n')
    (fake_slurm / "bin" / "ray").chmod(0o755)
    hard = subprocess.run(["bash", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
    if soft is None and hard == "unlimited":
        pytest.skip("no hard limit on open files here to stay below")
    path = f"{fake_slurm / 'bin'}:{os.environ['PATH']}"
    out = subprocess.run(wrapper, capture_output=True, text=True, env={**os.environ, "PATH": path})
    assert out.returncode == 0, out.stderr
    expect = soft if soft is not None else int(hard)
    assert out.stdout.startswith(f"nofile={expect} args=start --head")
    if soft is None and hard != "unlimited":
        assert f"hard limit {hard} is below {want}" in out.stderr


def test_a_ray_step_that_dies_ends_the_wait(fake_slurm):
    """The head's `ray start` step fails at once: the job stops at the next poll, not after RAY_WAIT_S."""
    proc, calls = run("dapo_32b.sh", fake_slurm, 1, in_job=True, INIT_FROM="none", FAKE_PROBE_FAILS="1",
                      RAY_POLL_S="1")
    assert proc.returncode == 1 and "ended before Ray reached 1 nodes" in proc.stderr
    assert "the last probe said:\nConnectionError: fake probe" in proc.stderr
    assert not any("nemo" in c and "rl" in c and "--config" in c for c in calls)  # no driver without Ray


def test_every_ray_start_flag_is_one_ray_knows(fake_slurm):
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        pytest.skip("Ray is not installed here")
    known = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", subprocess.run(
        [ray, "start", "--help"], capture_output=True, text=True, timeout=120).stdout, re.M))
    assert {"--head", "--address", "--block"} <= known
    proc, _ = run("dapo_32b.sh", fake_slurm, 2, in_job=True, DRY_RUN="1")
    flags = {a.split("=")[0] for c in ray_starts(plan(proc.stdout)) for a in ray_args(c) if a.startswith("--")}
    assert len(flags) >= 15 and flags <= known, sorted(flags - known)


# -- DRY_RUN checks: the same as `spatialiq recipes nemo-rl` ------------------------------------------------------


@pytest.mark.parametrize(("env", "message"), [
    ({"NODES": "0"}, "NODES=0: expected a whole number >= 1"),
    ({"NODES": "two"}, "NODES=two: expected a whole number >= 1"),
    ({"NODES": "3"}, "must divide evenly"),  # 3 data-parallel ranks and a GRPO batch of 64: the CLI's own check
    ({"GPUS_PER_NODE": "0"}, "GPUS_PER_NODE=0: expected a whole number >= 1"),
    ({"GPUS_PER_NODE": "four"}, "GPUS_PER_NODE=four"),
    ({"PHASE": "grpo"}, "PHASE=grpo: expected rl or sft"),
    ({"RECIPE": "dapo_tight_64b"}, "recipe file dapo_tight_64b does not exist"),
    ({"DRY_RUN": "yes"}, "DRY_RUN=yes: expected 1"),
])
@pytest.mark.parametrize("in_job", [False, True])
def test_dry_run_refuses_bad_settings(fake_slurm, env, message, in_job):
    settings = {"DRY_RUN": "1", **env}
    if in_job and "NODES" in env:
        settings["SLURM_JOB_NUM_NODES"] = env["NODES"]  # inside an allocation the count is the allocation's
    proc, calls = run("dapo_32b.sh", fake_slurm, 8, in_job=in_job, **settings)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and calls == [] and "+ " not in proc.stdout
    assert not (fake_slurm / "out").exists()


def test_submission_runs_the_same_check_first(fake_slurm):
    proc, calls = run("dapo_32b.sh", fake_slurm, 3, in_job=False)
    assert proc.returncode == 2 and "must divide evenly" in proc.stderr
    assert calls == [] and not (fake_slurm / "out").exists()  # refused before anything is created or submitted
    # without the project's Python on the login node the job's first step is left to check, and says so
    proc, calls = run("dapo_32b.sh", fake_slurm, 3, in_job=False, SIQ_PYTHON="no-such-python")
    assert proc.returncode == 0, proc.stderr
    assert "recipe check skipped: no-such-python cannot import spatialiq_train" in proc.stderr
    assert [c[0] for c in calls] == ["sbatch"]


def test_dry_run_check_without_the_project_python_says_so(fake_slurm):
    proc, calls = run("sft_cot_32b.sh", fake_slurm, 4, in_job=False, DRY_RUN="1", SIQ_PYTHON="no-such-python")
    assert proc.returncode == 2 and calls == [] and "SIQ_PYTHON=no-such-python" in proc.stderr
    # inside an allocation the node may have no project Python outside the container: the plan is still printed
    proc, calls = run("sft_cot_32b.sh", fake_slurm, 4, in_job=True, DRY_RUN="1", SIQ_PYTHON="no-such-python")
    assert proc.returncode == 0 and calls == [] and "recipe check skipped" in proc.stderr
    assert any("nemo-rl" in c for c in plan(proc.stdout))


# -- real runs under the fakes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 8])
def test_job_runs_srun_steps_and_returns_the_driver_status(fake_slurm, nodes):
    init = fake_slurm / "sft_hf"
    init.mkdir()
    (init / "config.json").write_text("{}")
    proc, calls = run("dapo_32b.sh", fake_slurm, nodes, in_job=True, INIT_FROM=str(init), FAKE_DRIVER_RC="3",
                      EXTRA_SETS="rl.optimizer.max_steps=2 logging.save_steps=1")
    assert proc.returncode == 3 and "dynamic-sampling cap" in proc.stderr
    assert all(c[0] == "srun" for c in calls)
    check_job_plan([c for c in calls if "-c" not in c or "siq-ray" in c], fake_slurm, nodes,
                   "dapo_tight_32b", "rl", "cot")
    gen = next(c for c in calls if "nemo-rl" in c)
    assert f"rl.init_from={init}" in gen and gen[-4:] == ["--set", "rl.optimizer.max_steps=2", "--set",
                                                          "logging.save_steps=1"]
    assert calls[-1][-4:] == ["nemo", "rl", "--config", f"{fake_slurm}/out/nemo_rl/rl/config.yaml"]
    starts = [i for i, c in enumerate(calls) if "siq-ray" in c]
    assert len(starts) == (1 if nodes == 1 else 2) and max(starts) < len(calls) - 1  # Ray is up before the driver


def test_rl_refuses_a_missing_warm_up_checkpoint(fake_slurm):
    proc, calls = run("dapo_7b.sh", fake_slurm, 2, in_job=True, INIT_FROM=None)
    assert proc.returncode == 2 and "INIT_FROM" in proc.stderr and calls == []


@pytest.mark.parametrize("dry_run", ["0", "1"])
def test_submission_refuses_missing_data_or_warm_up_checkpoint_before_sbatch(fake_slurm, dry_run):
    """A login-node submission (and its DRY_RUN) checks DATA, the traces folder and, for RL, INIT_FROM first."""
    cases = [
        ("dapo_32b.sh", {"DATA": str(fake_slurm / "no_such_data")}, f"DATA={fake_slurm}/no_such_data does not exist"),
        ("sft_plain_32b.sh", {"TRACES_DIR": str(fake_slurm / "data" / "traces" / "nope")},
         "traces/nope does not exist"),
        ("dapo_32b.sh", {"INIT_FROM": None}, f"INIT_FROM={fake_slurm}/out/nemo_rl/sft/hf holds no HF checkpoint"),
        ("dapo_7b.sh", {"INIT_FROM": str(fake_slurm / "data")}, "holds no HF checkpoint (config.json)"),
        # what the NeMo-RL driver would refuse inside the allocation, `recipes nemo-rl` refuses here
        ("dapo_7b.sh", {"EXTRA_SETS": "data.eval_split=rl"}, "data.eval_split 'rl' is also a training split"),
    ]
    for script, env, message in cases:
        proc, calls = run(script, fake_slurm, 1, in_job=False, DRY_RUN=dry_run, **env)
        assert proc.returncode == 2 and message in proc.stderr, (script, env, proc.stderr)
        assert calls == [] and "+ sbatch" not in proc.stdout and not (fake_slurm / "out").exists()
    # an RL job chained after the warm-up (DEPENDENCY) may name the checkpoint that job writes
    proc, calls = run("dapo_32b.sh", fake_slurm, 1, in_job=False, DRY_RUN="1", INIT_FROM=None,
                      DEPENDENCY="afterok:11,singleton")
    assert proc.returncode == 0 and "the job checks it when it starts" in proc.stderr, proc.stderr


def test_login_node_submits_once(fake_slurm):
    proc, calls = run("sft_cot_32b.sh", fake_slurm, 4, in_job=False, DEPENDENCY="afterok:11,singleton")
    assert proc.returncode == 0, proc.stderr
    assert opt(calls[0], "--dependency") == "afterok:11,singleton"
    assert len(calls) == 1 and calls[0][0] == "sbatch" and calls[0][-1] == str(SLURM / "sft_cot_32b.sh")
    assert (fake_slurm / "out" / "slurm").is_dir()


# -- eval, convert, gen_array ---------------------------------------------------------------------------------------


def eval_plan(tmp: Path, model: str, **env: str) -> tuple[list[str], list[str]]:
    proc, _ = run("eval.sh", tmp, 1, in_job=True, DRY_RUN="1", MODEL=model, **env)
    assert proc.returncode == 0, proc.stderr
    sample, score = plan(proc.stdout)
    return sample, score


def test_eval_and_convert(fake_slurm):
    sample, score = eval_plan(fake_slurm, str(fake_slurm / "hf"))
    assert sample[sample.index("sample") - 2:sample.index("sample")] == ["spatialiq_train.cli", "eval"]
    assert f"{fake_slurm}/hf:{fake_slurm}/hf" in opt(sample, "--container-mounts").split(",")
    assert f"{fake_slurm}/hf_home:{fake_slurm}/hf_home" in opt(sample, "--container-mounts").split(",")
    assert sample[sample.index("--engine") + 1] == "vllm" and sample[sample.index("--tensor-parallel-size") + 1] == "4"
    assert "score" in score and score[score.index("--completions") + 1] == sample[sample.index("--out") + 1]
    ckpts = fake_slurm / "out" / "nemo_rl" / "sft" / "checkpoints"
    for n in (20, 100, 40):
        (ckpts / f"step_{n}").mkdir(parents=True)
    proc, _ = run("convert.sh", fake_slurm, 1, in_job=True, DRY_RUN="1", RECIPE="dapo_tight_32b", PHASE="sft")
    assert proc.returncode == 0, proc.stderr
    (cmd,) = plan(proc.stdout)
    assert cmd[cmd.index("-m") + 1:] == ["spatialiq_train.cli", "nemo", "convert", "--checkpoint", f"{ckpts}/step_100",
                                         "--out", f"{fake_slurm}/out/nemo_rl/sft/hf", "--recipe", "dapo_tight_32b"]
    assert opt(cmd, "--container-image") == IMAGE
    proc, _ = run("convert.sh", fake_slurm, 1, in_job=False, DRY_RUN="1")
    assert proc.returncode != 0 and "RECIPE" in proc.stderr
    proc, _ = run("convert.sh", fake_slurm, 1, in_job=False, DRY_RUN="1", RECIPE="dapo_tight_32b", PHASE="warmup")
    assert proc.returncode == 2 and "PHASE=warmup" in proc.stderr


def test_eval_gives_sft_and_rl_checkpoints_distinct_run_names(fake_slurm):
    out = fake_slurm / "out"
    runs = {}
    for phase in ("sft", "rl"):
        sample, score = eval_plan(fake_slurm, f"{out}/nemo_rl/{phase}/hf/")
        completions = sample[sample.index("--out") + 1]
        runs[phase] = (completions, score[score.index("--name") + 1], score[score.index("--out") + 1])
        assert completions == f"{out}/eval/nemo_rl-{phase}-hf/completions.jsonl"
    assert len({r[0] for r in runs.values()}) == len({r[1] for r in runs.values()}) == 2
    assert runs["sft"][2] != runs["rl"][2]
    # a checkpoint outside OUT and a hub id get their whole path as the name; NAME wins
    _, score = eval_plan(fake_slurm, "/lustre/u/other/nemo_rl/rl/hf")
    assert score[score.index("--name") + 1] == "lustre-u-other-nemo_rl-rl-hf"
    _, score = eval_plan(fake_slurm, "Qwen/Qwen2.5-VL-7B-Instruct")
    assert score[score.index("--name") + 1] == "Qwen-Qwen2.5-VL-7B-Instruct"
    _, score = eval_plan(fake_slurm, f"{out}/nemo_rl/rl/hf", NAME="dapo32-step340")
    assert score[score.index("--out") + 1] == f"{out}/eval/dapo32-step340"
    proc, _ = run("eval.sh", fake_slurm, 1, in_job=True, DRY_RUN="1", MODEL=str(out), NAME="a/b")
    assert proc.returncode == 2 and "NAME=a/b" in proc.stderr


def test_eval_refuses_to_resume_another_models_completions(fake_slurm):
    out = fake_slurm / "out"
    (out / "m1").mkdir(parents=True)
    (out / "m2").mkdir()
    bench = fake_slurm / "data" / "benchmark"
    bench.mkdir()
    proc, calls = run("eval.sh", fake_slurm, 1, in_job=True, MODEL=str(out / "m1"), NAME="shared")
    assert proc.returncode == 0, proc.stderr
    assert (out / "eval" / "shared" / "model.txt").read_text() == f"{out}/m1\n" and len(calls) == 2
    proc, calls = run("eval.sh", fake_slurm, 1, in_job=True, MODEL=str(out / "m1"), NAME="shared")  # resume: fine
    assert proc.returncode == 0, proc.stderr
    proc, calls = run("eval.sh", fake_slurm, 1, in_job=True, MODEL=str(out / "m2"), NAME="shared")
    assert proc.returncode == 2 and calls == [] and f"{out}/m1, not MODEL={out}/m2" in proc.stderr


def run_gen_array(tmp: Path, args: tuple[str, ...] = ("1000", "0", "train", "4", "--renderer", "none"),
                  **env: str) -> tuple[subprocess.CompletedProcess, list]:
    log = tmp / "calls.log"
    log.unlink(missing_ok=True)
    base = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIQ_"))},
            "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}", "FAKE_LOG": str(log), "SIQ_ACCOUNT": "acct", **env}
    proc = subprocess.run(["bash", str(SLURM / "gen_array.sh"), str(tmp / "gen"), *args], env=base,
                          capture_output=True, text=True, timeout=60, cwd=tmp)
    calls = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def test_gen_array_dry_run_creates_and_submits_nothing(fake_slurm):
    proc, calls = run_gen_array(fake_slurm, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == [] and not (fake_slurm / "gen").exists()
    cmds = plan(proc.stdout)
    assert [c[0] for c in cmds] == ["mkdir", "sbatch", "sbatch", "sbatch"]
    assert [opt(c, "--job-name") for c in cmds[1:]] == ["siq-plan", "siq-gen", "siq-merge"]
    assert opt(cmds[2], "--dependency") == "afterok:PLAN_JOB" and opt(cmds[3], "--dependency") == "afterok:ARRAY_JOB"
    assert opt(cmds[2], "--array") == "0-3" and opt(cmds[1], "--account") == "acct"
    proc, calls = run_gen_array(fake_slurm, DRY_RUN="true")
    assert proc.returncode == 2 and "DRY_RUN=true" in proc.stderr and calls == []


@pytest.mark.parametrize(("args", "message"), [
    (("-3", "0", "val", "0", "--renderer", "nonsense"), "STRUCTURES -3: expected a whole number >= 1"),
    (("100", "-1", "train", "4"), "SEED -1: expected a whole number >= 0"),
    (("100", "0", "val", "4"), "SPLIT val: expected train or benchmark"),
    (("100", "0", "train", "0"), "NUM_SHARDS 0: expected a whole number >= 1"),
    (("100", "0", "train", "4", "--renderer", "nonsense"), "--renderer 'nonsense': expected none, mitsuba"),
    (("100", "0", "train", "4", "--renderer=blender"), "--renderer 'blender'"),
    (("100", "0", "train", "4", "--object-type", "sphere"), "--object-type 'sphere': expected cube or can"),
    (("100", "0", "train", "4", "--shard", "2"), "--shard: set by this script"),
])
@pytest.mark.parametrize("dry_run", ["0", "1"])
def test_gen_array_refuses_bad_arguments_before_anything(fake_slurm, args, message, dry_run):
    proc, calls = run_gen_array(fake_slurm, args, DRY_RUN=dry_run)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert calls == [] and proc.stdout == "" and not (fake_slurm / "gen").exists()


def test_gen_array_submits_three_chained_jobs(fake_slurm):
    proc, calls = run_gen_array(fake_slurm)
    assert proc.returncode == 0, proc.stderr
    assert [c[0] for c in calls] == ["sbatch"] * 3 and (fake_slurm / "gen" / "slurm").is_dir()
    assert opt(calls[1], "--dependency") == "afterok:421" and opt(calls[2], "--dependency") == "afterok:422"
    assert "plan job 421, array job 422 (4 tasks), merge job 423" in proc.stdout


def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    scripts = sorted(str(p) for p in SLURM.glob("*.sh"))
    proc = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout


# -- docs/cluster.md matches the scripts ------------------------------------------------------------------------------

DOCS = ROOT / "docs" / "cluster.md"


def test_the_documented_smoke_test_passes_the_dry_run_check(fake_slurm):
    text = DOCS.read_text(encoding="utf-8")
    smoke = text[text.index("**First-job smoke test.**"):]
    extra = re.search(r'EXTRA_SETS="([^"]+)"', smoke).group(1)
    assert "rl.optimizer.max_steps=2" in extra
    proc, calls = run("dapo_7b.sh", fake_slurm, 1, in_job=False, DRY_RUN="1", INIT_FROM="none", EXTRA_SETS=extra)
    assert proc.returncode == 0, proc.stderr
    gen = next(c for c in plan(proc.stdout) if "nemo-rl" in c)
    assert [gen[i + 1] for i, a in enumerate(gen) if a == "--set"][-4:] == extra.split()
    # the same short run without the lowered validation periods is refused before anything is submitted
    proc, calls = run("dapo_7b.sh", fake_slurm, 1, in_job=False, DRY_RUN="1", INIT_FROM="none",
                      EXTRA_SETS="rl.optimizer.max_steps=2 logging.save_steps=2")
    assert proc.returncode == 2 and "save_steps" in proc.stderr and calls == []


def test_documented_ray_port_defaults_are_the_scripts():
    common = (SLURM / "nemo_common.sh").read_text(encoding="utf-8")
    defaults = dict(re.findall(r'"\$\{(RAY_[A-Z_]*PORT):=(\d+)\}"', common))
    assert len(defaults) == 11
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("|") and "RAY_" in line]
    for var, value in defaults.items():
        (row,) = [r for r in rows if f"`{var}`" in r]
        assert value in row, (var, value, row)
