"""`spatialiq` commands for the train area: `train sft`, `train rl`, `run dapo-tight`, `recipes validate|show|nemo-rl`.

Trailing KEY.PATH=VALUE arguments override recipe keys (values parsed with yaml.safe_load), e.g.
`spatialiq train rl --recipe recipes/dapo_tight_7b.yaml rl.optimizer.learning_rate=1e-6
rl.init_from=runs/sft_cot/final`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import typer

OVERRIDES = typer.Argument(None, help="Recipe overrides KEY.PATH=VALUE, e.g. rl.optimizer.learning_rate=1e-6.")
RECIPE = typer.Option(..., "--recipe", "-r", help="Recipe YAML (recipes/*.yaml).")
OUT = typer.Option(None, "--out", "-o", help="Output folder (default: the recipe's run.output_dir).")
EXTEND = typer.Option(False, "--extend", help="Train a finished run on to a larger step budget (else a finished run "
                      "is complete and a rerun changes nothing).")


def load_checked(recipe: Path, overrides: list[str] | None = None, import_rewards: bool = True):  # noqa: ANN201
    """Load a recipe and check what the core cannot: every reward name it uses exists in reward.registry (a dotted
    `pkg.module:function` path is imported only with `import_rewards`; training always imports it)."""
    from reward.registry import check_reward_names
    from spatialiq_train.core.recipes import load_recipe

    rec = load_recipe(recipe, list(overrides or []))
    check_reward_names(rec.reward.weights, str(recipe), import_modules=import_rewards)
    return rec


def _out(recipe, out: Path | None, leaf: str) -> Path:  # noqa: ANN001
    return out if out is not None else Path(recipe.run.output_dir) / leaf


@contextlib.contextmanager
def _writing(run_dir: Path, recipe=None) -> Iterator[None]:  # noqa: ANN001
    """Settings this machine cannot run refused first; then the lock of a run folder (one writer per output,
    docs/trust.md), what Ctrl-C keeps, and nothing left by a command that fails before training wrote anything.
    Under a distributed launch the job is the writer: global rank 0 holds the lock, the other ranks take none; on
    success every rank ends its process group (`train.distributed.end_process_group`)."""
    from spatialiq_train.cli.steps import on_interrupt
    from spatialiq_train.core.lock import output_lock
    from spatialiq_train.train.distributed import end_process_group
    from spatialiq_train.train.refusals import check_before_work, nothing_left_if_refused

    if recipe is not None:
        check_before_work(recipe)
    on_interrupt(f"the complete checkpoints under {run_dir} are kept (one cut off mid-save is set aside at the next "
                 "run); rerun the same command to resume from the newest complete one")
    if os.environ.get("RANK", "0") != "0":  # a launcher's other ranks (accelerate, torchrun): one job, one writer
        yield
    else:
        with output_lock(run_dir, "run folder"), nothing_left_if_refused(Path(run_dir)):
            yield
    end_process_group()  # a launched job's ranks end their group: a live gloo group can abort the exit


def sft_cmd(recipe: Path = RECIPE, out: Path | None = OUT, overrides: list[str] | None = OVERRIDES,
            extend: bool = EXTEND) -> None:
    """Supervised fine-tuning (SFT-plain or SFT-CoT) on the recipe's data.sft_split; loss on assistant tokens."""
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    rec = load_checked(recipe, overrides)
    with _writing(run_dir := _out(rec, out, "sft"), rec):
        final = run_phase(sft_phase(), rec, run_dir, extend=extend)
    typer.echo(f"SFT finished: {final}")


def _learned_nothing_note(rec, rl_dir: Path) -> None:  # noqa: ANN001
    """The summary's warning when no RL step updated the weights (cause and knobs), on stderr."""
    from spatialiq_train.train.rl import rl_learned_nothing

    if cause := rl_learned_nothing(rl_dir):
        typer.secho(f"WARNING: {cause}", err=True, bold=True)


def rl_cmd(recipe: Path = RECIPE, out: Path | None = OUT, overrides: list[str] | None = OVERRIDES,
           extend: bool = EXTEND,
           control: bool = typer.Option(False, "--control", help="The control of a learning curve: generate and "
                                        "score as RL does, at the unchanged weights (no loss, no update).")) -> None:
    """GRPO under the DAPO recipe on data.rl_split, starting from (and KL-anchored to) rl.init_from."""
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.rl import rl_phase

    rec = load_checked(recipe, overrides)
    if rec.rl.init_from is None and not rec.model.tiny:
        typer.echo("note: rl.init_from is not set; starting from (and anchoring to) model.name_or_path", err=True)
    rl_dir = _out(rec, out, "rl")
    with _writing(rl_dir, rec):
        final = run_phase(rl_phase(frozen=control), rec, rl_dir, extend=extend)
    typer.echo(f"RL {'control ' if control else ''}finished: {final}")
    if not control:
        _learned_nothing_note(rec, rl_dir)


def dapo_tight_cmd(recipe: Path = RECIPE, out: Path | None = OUT, overrides: list[str] | None = OVERRIDES,
                   extend: bool = EXTEND) -> None:
    """Both DAPO-tight phases under one run folder: SFT warm-up, then RL; rerun to resume."""
    from spatialiq_train.train.run import run_dapo_tight

    rec = load_checked(recipe, overrides)
    run_dir = out if out is not None else Path(rec.run.output_dir)
    with _writing(run_dir, rec):
        final = run_dapo_tight(rec, run_dir, extend=extend)
    typer.echo(f"DAPO-tight finished: {final}")
    _learned_nothing_note(rec, run_dir / "rl")


def validate_cmd(
    files: list[Path] = typer.Argument(..., help="Recipe YAML files."),
    overrides: list[str] | None = typer.Option(None, "--set", help="Override KEY.PATH=VALUE (repeatable)."),
    import_rewards: bool = typer.Option(False, "--import-rewards",
                                        help="Import the modules of dotted reward paths (pkg.module:function) to "
                                             "check them; importing runs their code."),
) -> None:
    """Validate recipes; exits non-zero when any is invalid."""
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.recipes import RecipeError

    bad = []
    for f in files:
        try:
            load_checked(f, overrides, import_rewards)
            typer.echo(f"ok: {f}")
        except RecipeError as exc:
            bad.append(str(f))
            typer.echo(str(exc), err=True)
    if bad:
        raise UserError(f"{len(bad)} of {len(files)} recipe(s) invalid (reasons above): {', '.join(bad)}")


def show_cmd(recipe: Path = typer.Argument(..., help="Recipe YAML."), overrides: list[str] | None = OVERRIDES) -> None:
    """Print the fully resolved recipe (defaults filled in, overrides applied); keys a recipe may not set (the RL
    global batch, which is rl.prompts_per_step x rl.num_generations) are left out."""
    import yaml

    shown = load_checked(recipe, overrides).model_dump(mode="json")
    shown["rl"]["optimizer"].pop("global_batch_size", None)
    typer.echo(yaml.safe_dump(shown, sort_keys=False), nl=False)


def nemo_rl_cmd(
    recipe: Path = typer.Argument(..., help="Recipe YAML or shipped recipe name."),
    out: Path = typer.Option(..., "--out", "-o", help="NeMo-RL config YAML to write."),
    nodes: int = typer.Option(1, "--nodes", help="Slurm nodes (cluster.num_nodes)."),
    gpus_per_node: int = typer.Option(4, "--gpus-per-node", help="GPUs per node (cluster.gpus_per_node)."),
    phase: str = typer.Option("rl", "--phase", help="rl (GRPO/DAPO) or sft."),
    overrides: list[str] | None = typer.Option(None, "--set", help="Override KEY.PATH=VALUE (repeatable)."),
) -> None:
    """Write the complete NeMo-RL v0.7.0 config for a recipe, checked against NeMo-RL's key list; `spatialiq nemo
    rl|sft --config OUT` runs it as written (its `spatialiq` section records the recipe and these overrides)."""
    from spatialiq_train.nemo.export import write_nemo_config

    built = write_nemo_config(recipe, out, phase=phase, nodes=nodes, gpus_per_node=gpus_per_node,  # type: ignore[arg-type]
                              overrides=list(overrides or []))
    for note in built.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {out} (NeMo-RL {built.algorithm} config, {nodes} x {gpus_per_node} GPUs)")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    train_app = typer.Typer(help="Train Qwen2.5-VL: SFT and GRPO/DAPO with TRL.", no_args_is_help=True)
    train_app.command("sft")(sft_cmd)
    train_app.command("rl")(rl_cmd)
    run_app = typer.Typer(help="Multi-phase training runs.", no_args_is_help=True)
    run_app.command("dapo-tight")(dapo_tight_cmd)
    recipes_app = typer.Typer(help="Inspect and validate training recipes.", no_args_is_help=True)
    recipes_app.command("validate")(validate_cmd)
    recipes_app.command("show")(show_cmd)
    recipes_app.command("nemo-rl")(nemo_rl_cmd)
    app.add_typer(train_app, name="train")
    app.add_typer(run_app, name="run")
    app.add_typer(recipes_app, name="recipes")
