"""Recipe sweeps: plan resolved variants of one recipe, run them one after another (resumable), list them.

A sweep folder holds::

    SWEEP/sweep.yaml                 the index (yaml.safe_dump; read with yaml.safe_load only)
    SWEEP/variants/<name>.yaml       one resolved recipe per variant (validated by spatialiq_train.core.recipes)
    SWEEP/runs/<name>/               the variant's `run dapo-tight` folder (sft/, rl/, final/, recipe.yaml)
    SWEEP/runs/<name>/eval/          its sampled completions, metrics_<name>.json and eval_raw_<name>_text.csv
    SWEEP/runs/<name>/done.json      written when every step finished: a rerun skips the variant

With ``--eval-limit N`` a variant is sampled *and scored* on the first N views, so every metric of the report is
over one scene set. ``sweep run`` checks the evaluation options and data before the first variant trains. A
folder may be planned again (after a failure) as long as no run of the old plan is orphaned and no finished
variant would be re-evaluated differently (:func:`check_replan`).

Each ``--vary KEY=LIST`` gives a key path and a YAML list of values; several ``--vary`` span their product, in
the order given (the last varies fastest). A value replaces the key's whole value (``reward.weights`` is replaced,
not merged). A variant is named ``<hash>-<label>``: the first 8 hex digits of the SHA-256 of its resolved recipe
(``run.output_dir`` left out) and a readable label of its values.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json, atomic_write_text
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.recipes import load_recipe, recipe_from_dict, recipe_to_yaml, set_key

SWEEP_FILE = "sweep.yaml"
DONE_FILE = "done.json"
LABEL_CHARS = 48
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class EvalSettings:
    """How every variant is evaluated after training (sample settings k, temperature ... come from its recipe).

    :func:`plan_sweep` fills ``data`` and ``split`` left None from the base recipe: ``data.data_root``, and
    ``data.eval_split`` else ``benchmark``."""

    data: str | None = None
    split: str | None = None
    engine: str = "auto"
    limit: int | None = None
    min_coverage: float = 0.9


def check_settings(settings: EvalSettings) -> None:
    """The evaluation options ``eval sample`` and ``eval score`` would refuse, refused at plan time (not after a
    variant has trained); the UserError names the ``sweep plan`` option."""
    from typing import get_args

    from eval.engines import EngineName

    engines = get_args(EngineName)
    if settings.engine not in engines:
        raise UserError(f"--engine {settings.engine!r}: valid: {', '.join(engines)}")
    if settings.limit is not None and settings.limit < 1:
        raise UserError(f"--eval-limit {settings.limit}: give 1 or more views (or leave it out to use every view)")
    if not 0.0 <= settings.min_coverage <= 1.0:
        raise UserError(f"--min-coverage {settings.min_coverage}: give a share between 0 and 1")


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    values: dict[str, Any] = field(default_factory=dict)
    """Key path -> the value this variant gives it."""

    @property
    def recipe_file(self) -> str:
        return f"variants/{self.name}.yaml"


@dataclass(frozen=True)
class Sweep:
    root: Path
    recipe: str
    varied: list[str]
    variants: list[Variant]
    eval: EvalSettings

    def run_dir(self, variant: Variant) -> Path:
        return self.root / "runs" / variant.name

    def is_done(self, variant: Variant) -> bool:
        return (self.run_dir(variant) / DONE_FILE).is_file()

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise UserError(f"--only {name!r}: no such variant in {self.root / SWEEP_FILE}; "
                        f"valid: {', '.join(v.name for v in self.variants)}")


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``KEY.PATH=[v1, v2]`` -> (key path, values); a UserError names a missing ``=``, bad YAML or a non-list."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not p for p in key.split(".")):
        raise UserError(f"--vary {text!r}: expected KEY.PATH=LIST, "
                        "e.g. --vary 'rl.optimizer.learning_rate=[1e-6, 3e-6]'")
    try:
        values = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise UserError(f"--vary {key}: the value is not valid YAML ({exc})") from None
    if not isinstance(values, list) or not values:
        raise UserError(f"--vary {key}: expected a non-empty YAML list of values, got {raw!r}")
    return key, values


def get_key(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted ``key`` of nested mappings (None where absent)."""
    node: Any = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(f"{k}{_compact(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "-".join(_compact(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def label_of(values: dict[str, Any]) -> str:
    """A readable, file-name-safe label: a mapping value compacted (``format0.1-integer_distance0.9``), a scalar
    after its key's last part (``learning_rate1e-06``), joined by ``_`` and cut to :data:`LABEL_CHARS`."""
    parts = [_compact(v) if isinstance(v, dict) else f"{k.rsplit('.', 1)[-1]}{_compact(v)}" for k, v in values.items()]
    return _UNSAFE.sub("", "_".join(parts))[:LABEL_CHARS].strip("._-") or "variant"


def recipe_hash(recipe: Recipe) -> str:
    """The first 8 hex digits of the SHA-256 of the resolved recipe, ``run.output_dir`` left out."""
    data = recipe.model_dump(mode="json")
    data["run"].pop("output_dir", None)
    return hashlib.sha256(yaml.safe_dump(data, sort_keys=True).encode()).hexdigest()[:8]


def resolve_variants(base: dict[str, Any], varies: list[tuple[str, list[Any]]], source: str
                     ) -> list[tuple[Variant, Recipe]]:
    """Every combination of the varied values as a validated recipe and its name (pure apart from the registry)."""
    from reward.registry import check_reward_names

    keys = [k for k, _ in varies]
    if len(set(keys)) != len(keys):
        raise UserError(f"--vary: a key is varied twice ({', '.join(keys)})")
    out: list[tuple[Variant, Recipe]] = []
    for combo in itertools.product(*(vals for _, vals in varies)):
        values = dict(zip(keys, combo, strict=True))
        data = copy.deepcopy(base)
        for key, value in values.items():  # the whole value replaced, as an override sets it
            set_key(data, key.split("."), value, f"--vary {key}")
        where = f"{source} with " + ", ".join(f"{k}={v!r}" for k, v in values.items())
        recipe = recipe_from_dict(data, source=where)
        check_reward_names(recipe.reward.weights, where, import_modules=True)  # as `spatialiq run` checks them
        dumped = recipe.model_dump(mode="json")
        values = {k: get_key(dumped, k) for k in keys}  # as validated ('1e-6' -> 1e-06)
        label = label_of(values)
        variant = Variant(f"{recipe_hash(recipe)}-{label}", label, values)
        same = next((v for v, _ in out if v.name.split("-", 1)[0] == variant.name.split("-", 1)[0]), None)
        if same is not None:  # by the canonical form (the hash of the sorted dump): key order does not hide it
            also = "" if same.name == variant.name else f" and {variant.name}, the same values in another key order"
            raise UserError(f"--vary: two variants resolve to the same recipe ({same.name}{also}); drop the repeat")
        out.append((variant, recipe))
    return out


def plan_sweep(recipe_path: str, overrides: list[str], varies: list[tuple[str, list[Any]]], out: Path,
               settings: EvalSettings) -> Sweep:
    """Write SWEEP/variants/*.yaml and SWEEP/sweep.yaml; refuse to overwrite a different plan."""
    check_settings(settings)
    base = load_recipe(recipe_path, overrides)
    settings = replace(settings, data=settings.data or base.data.data_root,
                       split=settings.split or base.data.eval_split or "benchmark")
    resolved = resolve_variants(base.model_dump(mode="json"), varies, recipe_path)
    sweep = Sweep(out, str(recipe_path), [k for k, _ in varies], [v for v, _ in resolved], settings)
    index = sweep_yaml(sweep)
    path = out / SWEEP_FILE
    if path.is_file() and path.read_text(encoding="utf-8") != index:
        check_replan(load_sweep(out), sweep)
    for variant, recipe in resolved:
        recipe.run.output_dir = str(sweep.run_dir(variant))
        atomic_write_text(out / variant.recipe_file, recipe_to_yaml(recipe))
    atomic_write_text(path, index)
    return sweep


def check_replan(old: Sweep, new: Sweep) -> None:
    """A folder may be planned again (after a failed run, say) unless that would orphan or re-score work: refused
    when a variant of the old plan has a run folder but is not in the new plan (names are recipe hashes, so a kept
    name is the same recipe), or when a finished variant would be evaluated with other settings."""
    names = {v.name for v in new.variants}
    orphaned = [v.name for v in old.variants if old.run_dir(v).exists() and v.name not in names]
    if orphaned:
        raise UserError(f"{old.root / SWEEP_FILE} holds another plan whose variant {orphaned[0]} has a run folder "
                        f"the new plan would not use; plan into a new --out, or delete {old.root / 'runs'} first")
    finished = [v.name for v in old.variants if old.is_done(v)]
    if finished and old.eval != new.eval:
        raise UserError(f"{old.root / SWEEP_FILE}: variant {finished[0]} finished under the evaluation settings "
                        f"{asdict(old.eval)}; a plan with {asdict(new.eval)} would mix two evaluations in one "
                        "report: plan into a new --out")
    for v in old.variants:
        if v.name not in names:
            (old.root / v.recipe_file).unlink(missing_ok=True)


def check_eval_inputs(sweep: Sweep) -> int:
    """The evaluation options and data, checked before any variant trains (``sweep run``): the settings as at plan
    time, and a readable, non-empty eval split; returns the number of views every variant is scored on."""
    from eval.scenes import find_scenes

    check_settings(sweep.eval)
    try:
        scenes = find_scenes(sweep.eval.data, sweep.eval.split)
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise UserError(f"{sweep.root / SWEEP_FILE}: eval data {sweep.eval.data} split {sweep.eval.split}: {exc}; "
                        "fix it (or plan again with --eval-data/--eval-split) before anything trains") from None
    if not scenes:
        raise UserError(f"{sweep.root / SWEEP_FILE}: eval data {sweep.eval.data} split {sweep.eval.split} holds no "
                        "view; plan again with --eval-data/--eval-split")
    return min(len(scenes), sweep.eval.limit or len(scenes))


def sweep_yaml(sweep: Sweep) -> str:
    return yaml.safe_dump({"recipe": sweep.recipe, "varied": sweep.varied, "eval": asdict(sweep.eval),
                           "variants": [asdict(v) for v in sweep.variants]}, sort_keys=False)


def load_sweep(root: str | Path) -> Sweep:
    """Read SWEEP/sweep.yaml (yaml.safe_load); a UserError names a missing or malformed index."""
    root = Path(root)
    path = root / SWEEP_FILE
    if not path.is_file():
        raise UserError(f"{root}: no {SWEEP_FILE} (write one with `spatialiq sweep plan --out {root}`)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        variants = [Variant(v["name"], v["label"], dict(v.get("values") or {})) for v in data["variants"]]
        return Sweep(root, str(data["recipe"]), list(data["varied"]), variants, EvalSettings(**data["eval"]))
    except (yaml.YAMLError, KeyError, TypeError) as exc:
        why = f"lacks the key {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
        raise UserError(f"{path}: not a sweep index written by `spatialiq sweep plan` ({why})") from None


def variant_steps(sweep: Sweep, variant: Variant) -> list[list[str]]:
    """The variant's `spatialiq` commands: train (`run dapo-tight`), sample and score (pure)."""
    recipe = load_recipe(sweep.root / variant.recipe_file)
    run, ev, e = sweep.run_dir(variant), sweep.run_dir(variant) / "eval", sweep.eval
    data = ["--data", e.data, "--split", e.split]
    sample = ["eval", "sample", "--model", str(run / "final"), *data, "--out", str(ev / "completions.jsonl"),
              "--k", str(recipe.eval.k), "--temperature", str(recipe.eval.temperature), "--top-p",
              str(recipe.eval.top_p), "--max-new-tokens", str(recipe.eval.max_new_tokens), "--engine", e.engine,
              "--seed", str(recipe.run.seed)]
    if e.limit is not None:
        sample += ["--limit", str(e.limit)]
    return [
        ["run", "dapo-tight", "--recipe", str(sweep.root / variant.recipe_file), "--out", str(run)],
        sample,
        ["eval", "score", "--completions", str(ev / "completions.jsonl"), *data, "--out", str(ev), "--name",
         variant.name, "--min-coverage", str(e.min_coverage), *(["--limit", str(e.limit)] if e.limit else [])],
    ]


def mark_done(sweep: Sweep, variant: Variant, steps: list[list[str]]) -> None:
    import time

    atomic_write_json(sweep.run_dir(variant) / DONE_FILE,
                      {"name": variant.name, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": steps})
