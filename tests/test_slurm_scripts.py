"""slurm/*.sh under fake sbatch/srun/scontrol: what they would submit and run, for 1 and 8 nodes (no Slurm needed)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
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
FAKE_SRUN = """#!/usr/bin/env bash
# Like Ray, a readiness probe succeeds only once the `ray start` steps it waits for have begun (1: head, 2: workers).
case "$*" in *"ray.nodes()"*)
  want=2; [[ "$*" == *"< 1)"* ]] && want=1
  for _ in $(seq 100); do (( $(grep -c 'ray start' "$FAKE_LOG" 2>/dev/null) >= want )) && break; sleep 0.05; done;;
esac
printf 'srun %s\\n' "$(printf '%q ' "$@")" >> "$FAKE_LOG"
case "$*" in *"spatialiq_train.cli nemo "*) exit "${FAKE_DRIVER_RC:-0}";; esac
exit 0
"""
FAKE_SBATCH = """#!/usr/bin/env bash
printf 'sbatch %s\\n' "$(printf '%q ' "$@")" >> "$FAKE_LOG"
echo 4242
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
[[ "$1 $2" == "show hostnames" ]] || exit 1
for ((i = 0; i < FAKE_NODES; i++)); do echo "gpu$i"; done
"""


@pytest.fixture()
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("sbatch", FAKE_SBATCH), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def run(script: str, tmp: Path, nodes: int, *, in_job: bool, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    log = tmp / "calls.log"
    log.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    base.update(PATH=f"{tmp / 'bin'}:{os.environ['PATH']}", FAKE_LOG=str(log), FAKE_NODES=str(nodes),
                NODES=str(nodes), DATA=str(tmp / "data"), OUT=str(tmp / "out"), ACCOUNT="acct", PARTITION="gpu")
    if in_job:
        base.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST=f"gpu[0-{nodes - 1}]", SIQ_PROJECT=str(ROOT))
    base.update(env)
    proc = subprocess.run(["bash", str(SLURM / script)], env=base, capture_output=True, text=True, timeout=60,
                          cwd=tmp)
    calls = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def plan(stdout: str) -> list[list[str]]:
    """The printed commands (lines starting with '+'), as argument lists."""
    return [shlex.split(line[2:].removesuffix(" &")) for line in stdout.splitlines() if line.startswith("+ ")]


def opt(cmd: list[str], name: str) -> str | None:
    hits = [a.split("=", 1)[1] for a in cmd if a.startswith(name + "=")]
    return hits[0] if hits else None


def check_job_plan(cmds: list[list[str]], tmp: Path, nodes: int, recipe: str, phase: str, traces: str) -> None:
    sruns = [c for c in cmds if c[0] == "srun"]
    for c in sruns:
        assert opt(c, "--container-image") == IMAGE
        mounts = opt(c, "--container-mounts").split(",")
        assert {f"{ROOT}:{ROOT}", f"{tmp}/data:{tmp}/data", f"{tmp}/out:{tmp}/out"} <= set(mounts)
        assert "--no-container-mount-home" in c and opt(c, "--container-workdir") == str(ROOT)
    cfg = f"{tmp}/out/nemo_rl/{phase}/config.yaml"
    gen = [c for c in sruns if "recipes" in c and "nemo-rl" in c]
    assert len(gen) == 1 and gen[0][gen[0].index("nemo-rl") + 1] == recipe
    g = gen[0]
    assert g[g.index("--nodes") + 1] == str(nodes) and g[g.index("--gpus-per-node") + 1] == "4"
    assert g[g.index("--out") + 1] == cfg and f"data.traces_dir={tmp}/data/traces/{traces}" in g
    heads = [c for c in sruns if "--head" in c]
    assert len(heads) == 1 and opt(heads[0], "--gres") == "gpu:4" and "--num-gpus=4" in heads[0]
    workers = [c for c in sruns if any(a.startswith("--address=") for a in c)]
    if nodes == 1:
        assert workers == []
    else:
        assert len(workers) == 1 and opt(workers[0], "--nodes") == str(nodes - 1)
        assert opt(workers[0], "--ntasks-per-node") == "1" and opt(workers[0], "--gres") == "gpu:4"
    drivers = [c for c in sruns if c[-5:] == ["spatialiq_train.cli", "nemo", phase, "--config", cfg]]
    assert len(drivers) == 1 and opt(drivers[0], "--nodes") == "1" and opt(drivers[0], "--ntasks") == "1"
    assert drivers[0][drivers[0].index("-m") - 1] == "python"  # the container's interpreter, project on PYTHONPATH
    head_node = opt(heads[0], "--nodelist")
    assert opt(drivers[0], "--nodelist") == head_node  # the driver runs once, on the head


@pytest.mark.parametrize("nodes", [1, 8])
@pytest.mark.parametrize("script", sorted(TRAINING))
def test_dry_run_from_login_node(fake_slurm, script, nodes):
    recipe, phase, traces = TRAINING[script]
    proc, calls = run(script, fake_slurm, nodes, in_job=False, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == []  # nothing submitted or run
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
    head = [c for c in cmds if "--head" in c][0]
    assert opt(head, "--nodelist") == "gpu0" and opt(head, "--container-name") == "siq-77"


@pytest.mark.parametrize("nodes", [1, 8])
def test_job_runs_srun_steps_and_returns_the_driver_status(fake_slurm, nodes):
    init = fake_slurm / "sft_hf"
    init.mkdir()
    (init / "config.json").write_text("{}")
    proc, calls = run("dapo_32b.sh", fake_slurm, nodes, in_job=True, INIT_FROM=str(init), FAKE_DRIVER_RC="3",
                      EXTRA_SETS="rl.max_steps=2 logging.save_steps=1")
    assert proc.returncode == 3 and "dynamic-sampling cap" in proc.stderr
    assert all(c[0] == "srun" for c in calls)
    check_job_plan([c for c in calls if "python" not in c or "-c" not in c], fake_slurm, nodes,
                   "dapo_tight_32b", "rl", "cot")
    gen = next(c for c in calls if "nemo-rl" in c)
    assert f"rl.init_from={init}" in gen and gen[-4:] == ["--set", "rl.max_steps=2", "--set", "logging.save_steps=1"]
    assert calls[-1][-4:] == ["nemo", "rl", "--config", f"{fake_slurm}/out/nemo_rl/rl/config.yaml"]
    starts = [i for i, c in enumerate(calls) if "ray" in c and "start" in c]
    assert len(starts) == (1 if nodes == 1 else 2) and max(starts) < len(calls) - 1  # Ray is up before the driver


def test_rl_refuses_a_missing_warm_up_checkpoint(fake_slurm):
    proc, calls = run("dapo_7b.sh", fake_slurm, 2, in_job=True)
    assert proc.returncode == 2 and "INIT_FROM" in proc.stderr and calls == []


def test_login_node_submits_once(fake_slurm):
    proc, calls = run("sft_cot_32b.sh", fake_slurm, 4, in_job=False, DEPENDENCY="afterok:11,singleton")
    assert proc.returncode == 0, proc.stderr
    assert opt(calls[0], "--dependency") == "afterok:11,singleton"
    assert len(calls) == 1 and calls[0][0] == "sbatch" and calls[0][-1] == str(SLURM / "sft_cot_32b.sh")
    assert (fake_slurm / "out" / "slurm").is_dir()


def test_eval_and_convert(fake_slurm):
    proc, _ = run("eval.sh", fake_slurm, 1, in_job=True, DRY_RUN="1", MODEL=str(fake_slurm / "hf"))
    assert proc.returncode == 0, proc.stderr
    sample, score = plan(proc.stdout)
    assert sample[sample.index("sample") - 2:sample.index("sample")] == ["spatialiq_train.cli", "eval"]
    assert opt(sample, "--container-mounts").endswith(f"{fake_slurm}/hf:{fake_slurm}/hf")
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


def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    scripts = sorted(str(p) for p in SLURM.glob("*.sh"))
    proc = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout
