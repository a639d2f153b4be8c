"""RL measurably learns on the CPU (issue 26, TRL half): after a short SFT warm-up, DAPO-tight RL under the recipe's
own reward beats a control whose weights cannot move, and the same run with the advantages' sign flipped does not.

All three runs go through `train.phase.run_phase` from the same SFT checkpoint with the same seed (one torch thread:
deterministic on the CPU). The control is the frozen trainer (`--control`: the same rollouts and rewards, no loss);
the sign-flipped run negates the weights of the recipe's reward terms, which negates every group-normalised
advantage and changes nothing else (the dynamic-sampling filter keeps the same groups). The data are synthetic
traces (random 56 px images, so what RL can learn is the answer format and the answer distribution, not counting):
the test proves the loop learns from its reward, not that the model sees.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _train_support import model_digest, one_thread, tiny_model_dir, tiny_recipe, write_traces

from spatialiq_train.core.learning import idle_rl_cause, learning_summary, total_reward_series
from spatialiq_train.core.metrics import read_metrics

one_thread()

SEED = 0
SETTING = ["sft.optimizer.max_steps=100", "sft.optimizer.learning_rate=2e-3", "rl.optimizer.max_steps=16",
           "logging.save_steps=1000"]
"""recipes/tiny_cpu.yaml's RL phase as shipped (learning rate 5e-4, 4 prompts x 8 completions, every DAPO knob) for
16 of its 48 steps, on synthetic data after a synthetic SFT warm-up (100 steps at 2e-3): the cheaper setting. The
lift it computes is the shipped RL's on this data; `bench/bench_learning_ci.py` measures its spread across seeds."""
MARGIN = 0.041
"""3 x the seed-to-seed standard deviation of this test's lift (3 x 0.0135 = 0.0404), rounded up. RL seeds 0-4 of
`SETTING`, each against its own control from the one warm-up, gave lifts 0.073, 0.065, 0.078, 0.067, 0.043 and
their sign-flipped runs -0.61, -0.63, -0.67, -0.55, -0.47 (bench/bench_learning_ci.py,
bench/results/learning_ci_tiny_cpu.json; measured before the one-algorithm change to the advantages' epsilon, and
the test passes after it). The RL run (seed 0: 0.073) must exceed it and the sign-flipped run must fall below minus
it. The shipped 48 steps on rendered views (bench/results/learning_tiny_cpu.json) are what the
benchmark measures; 16 steps on synthetic data are what CI can afford (about 2 minutes of CPU)."""


def warm_up(root: Path) -> tuple[Path, Path, Path]:
    """(traces root, traces dir, SFT checkpoint) under `root`: a warm-up split of random images with answers
    4..9, an RL split of other random images whose answer is always 8, and the tiny model after a short SFT warm-up
    (the answer format, numbers spread over 4..9): what RL can learn is to write the format reliably and to say 8."""
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    rng = np.random.default_rng(7)
    write_traces(root, "warmup", 32, rng, answer=lambda i: 4 + i % 6)
    traces = write_traces(root, "rl", 64, rng, answer=lambda i: 8)
    recipe = tiny_recipe([*SETTING, f"run.seed={SEED}"])
    init = run_phase(sft_phase(), recipe, root / "sft", model_path=tiny_model_dir(),
                     train_dataset=load_split(traces, "warmup", root, "sft"))
    return root, traces, init


def rl_series(warm: tuple[Path, Path, Path], out: Path, seed: int = SEED, frozen: bool = False,
              flip: bool = False) -> list[float]:
    """One RL phase of `SETTING` from the warm-up (seed `seed`; the frozen control, or the advantages' sign flipped);
    its per-step mean total reward."""
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.rl import RewardSetup, reward_setup, rl_phase

    root, traces, init = warm
    recipe = tiny_recipe([*SETTING, f"run.seed={seed}"])
    rewards = reward_setup(recipe)
    if flip:
        rewards = RewardSetup(rewards.funcs, [-w if f else w for w, f in zip(rewards.weights, rewards.filter_mask,
                                                                               strict=True)], rewards.filter_mask)
    run_phase(rl_phase(rewards=rewards, frozen=frozen), recipe, out, model_path=str(init),
              train_dataset=load_split(traces, "rl", root, "rl"))
    return total_reward_series(read_metrics(out / "metrics.jsonl"), recipe.reward.weights)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return warm_up(tmp_path_factory.mktemp("learning"))


@pytest.fixture(scope="module")
def control(warm, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], Path]:  # noqa: ANN001
    out = tmp_path_factory.mktemp("control") / "rl"
    return rl_series(warm, out, frozen=True), out


def test_the_frozen_control_scores_rollouts_and_keeps_the_weights(warm, control) -> None:  # noqa: ANN001
    from transformers import AutoModelForImageTextToText

    series, out = control
    rows = read_metrics(out / "metrics.jsonl")
    assert len(series) == 16 and all(0.0 <= r <= 1.0 for r in series) and max(series) > 0
    assert all(r["train/grad_norm"] == 0 for r in rows if "train/grad_norm" in r)
    before = model_digest(AutoModelForImageTextToText.from_pretrained(warm[2]))
    after = model_digest(AutoModelForImageTextToText.from_pretrained(out / "final"))
    assert after == before
    # the idle-phase diagnosis would name this run (no step moved the weights); run_phase does not warn for a control
    assert idle_rl_cause(rows, 24) is not None


def test_rl_beats_its_control_and_the_sign_flipped_run_does_not(warm, control, tmp_path: Path) -> None:  # noqa: ANN001
    rl = rl_series(warm, tmp_path / "rl")
    flipped = rl_series(warm, tmp_path / "flipped", flip=True)
    lift = learning_summary({SEED: rl}, {SEED: control[0]}).lift
    flipped_lift = learning_summary({SEED: flipped}, {SEED: control[0]}).lift
    detail = {"rl": [round(r, 3) for r in rl], "control": [round(r, 3) for r in control[0]],
              "flipped": [round(r, 3) for r in flipped]}
    assert lift > MARGIN, detail
    assert flipped_lift < -MARGIN, detail
    assert idle_rl_cause(read_metrics(tmp_path / "rl" / "metrics.jsonl"), 24) is None
