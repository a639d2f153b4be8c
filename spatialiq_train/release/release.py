"""``spatialiq release``: a run folder -> a verified Hugging Face release folder with a model card."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import yaml

from data_gen.trace_kind import record_kind
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_text, read_json, sha256_file
from spatialiq_train.core.weights import check_finite_weights
from spatialiq_train.hf_export import copy_weights, write_processor
from spatialiq_train.release import run_facts
from spatialiq_train.release.card import PHASES, CardInputs, DataFacts, model_card
from spatialiq_train.release.checkpoint import (
    ReleaseError,
    check_stock_processor,
    copy_configs,
    find_model_dir,
    find_recipe,
)
from spatialiq_train.release.checksums import SUMS_FILE, verify_sums, write_sums
from spatialiq_train.release.paths import (
    PATH_KEYS,
    Source,
    names_a_place,
    paths_found,
    public_recipe,
    public_value,
    source_comment,
    source_paths,
    sources,
)

log = logging.getLogger(__name__)

RECIPE_FILE = "training_recipe.yaml"


def _base_recipe(name: str | None) -> dict[str, Any] | None:
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe

    if not name or not (SHIPPED_RECIPES / f"{name}.yaml").is_file():
        return None
    return load_recipe(SHIPPED_RECIPES / f"{name}.yaml").model_dump(mode="json")


def split_hash(structure_ids: set[str]) -> str:
    """sha256 over a split's sorted structure ids, one per line: equal splits, equal hashes."""
    return hashlib.sha256("".join(f"{s}\n" for s in sorted(structure_ids)).encode()).hexdigest()


def run_path(value: str | None, run: Path) -> Path | None:
    """Where a path of the run's recipe is, whatever directory `release` runs from: an absolute path as is; a
    relative one (relative to where training ran) below the nearest folder holding the run that has it; else None."""
    if not value:
        return None
    path = Path(value)
    if path.is_absolute():
        return path
    for base in (run.resolve(), *run.resolve().parents):
        if (base / path).exists():
            return base / path
    return None


def data_facts(recipe: dict[str, Any] | None, data_root: Path | None, run: Path) -> DataFacts:
    """Generator version, seed and counts from the dataset manifest; split hashes from the run's trace files
    (the recipe's paths found by :func:`run_path`)."""
    data = (recipe or {}).get("data") or {}
    root = data_root or run_path(data.get("data_root"), run)
    manifest: dict[str, Any] = {}
    if root is not None and (root / "manifest.json").is_file():
        manifest = read_json(root / "manifest.json")
    args, counts = manifest.get("arguments") or {}, manifest.get("counts") or {}
    hashes: dict[str, str] = {}
    traces = run_path(data.get("traces_dir"), run)
    for key in ("sft_split", "rl_split", "eval_split"):
        split = data.get(key)
        path = traces / f"{split}.jsonl" if traces is not None and split else None
        if path is not None and path.is_file() and split not in hashes:
            ids = {json.loads(line).get("structure_id") for line in path.read_text(encoding="utf-8").splitlines()
                   if line.strip()}
            hashes[split] = split_hash({str(i) for i in ids if i})
    return DataFacts(generator_version=manifest.get("version"), seed=args.get("seed"),
                     structures=counts.get("structures"), views=counts.get("views"), split_hashes=hashes)


def _jsonl_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def run_phases(run: Path, model_dir: Path) -> tuple[str, ...] | None:
    """The training phases that ran, in order, from the ``phase`` of the metrics.jsonl rows the run folder holds
    (``RUN/sft``, ``RUN/rl``, RUN itself, the checkpoint's parent); None when no row records one."""
    seen: set[str] = set()
    for path in (run / "sft" / "metrics.jsonl", run / "rl" / "metrics.jsonl", run / "metrics.jsonl",
                 model_dir.parent / "metrics.jsonl"):
        if path.is_file():
            seen |= {str(row.get("phase")) for row in _jsonl_rows(path)}
    return tuple(p for p in PHASES if p in seen) or None


def trace_kind(recipe: dict[str, Any] | None, phases: tuple[str, ...] | None, run: Path) -> str | None:
    """The trace kind of the split the run trained on (first record of the recipe's trace file, found by
    :func:`run_path`); None if unread."""
    data = (recipe or {}).get("data") or {}
    traces = run_path(data.get("traces_dir"), run)
    if traces is None:
        return None
    keys = [k for phase, k in (("sft", "sft_split"), ("rl", "rl_split")) if phase in (phases or PHASES)]
    for key in keys:
        path = traces / f"{data.get(key)}.jsonl"
        if data.get(key) and path.is_file():
            rows = _jsonl_rows(path)
            if rows:
                return record_kind(rows[0])
    return None


def base_model(recipe: dict[str, Any] | None, model_dir: Path) -> str | None:
    """What the run started from: the recipe's ``model.name_or_path`` (the tiny model named as such), else the
    checkpoint config's ``_name_or_path`` when it names one; None when neither records it."""
    model = (recipe or {}).get("model") or {}
    if model.get("tiny"):
        return "spatialiq-tiny (randomly initialised, offline)"
    if model.get("name_or_path"):
        return str(model["name_or_path"])
    config = read_json(model_dir / "config.json")
    named = config.get("_name_or_path") if isinstance(config, dict) else None
    return str(public_value(str(named))) if named else None


def run_sources(recipe: dict[str, Any] | None, data_root: Path | None, run: Path,
                phases: tuple[str, ...] | None) -> tuple[Source, ...]:
    """The dataset (``--data``, else the recipe's), traces, and the checkpoints the run started from (``rl.init_from``
    when the RL phase ran, a local ``model.name_or_path``), each by folder name and digest."""
    data = (recipe or {}).get("data") or {}
    model = (recipe or {}).get("model") or {}
    items: list[tuple[str, str | None, Path | None]] = [
        ("data.data_root", str(data_root) if data_root is not None else data.get("data_root"),
         Path(data_root) if data_root is not None else run_path(data.get("data_root"), run)),
        ("data.traces_dir", data.get("traces_dir"), run_path(data.get("traces_dir"), run))]
    init_from = ((recipe or {}).get("rl") or {}).get("init_from")
    if init_from and "rl" in (phases or ()):
        items.append(("rl.init_from", init_from, run_path(init_from, run)))
    items += [(key, value, run_path(value, run)) for key, value in source_paths(recipe)  # replay: each other source
              if value not in (data.get("traces_dir"), data.get("data_root"))]
    name = model.get("name_or_path")
    local = run_path(name, run) if name and not model.get("tiny") else None
    if name and not model.get("tiny") and (names_a_place(name) or local is not None):
        items.append(("model.name_or_path", name, local))
    return sources(items)


def _machine_paths(recipe: dict[str, Any] | None, *paths: Path | None) -> set[str]:
    """The absolute paths a release was made from (resolved and as given), which none of its files may hold."""
    found = {str(p) for p in paths if p is not None} | {str(Path(p).resolve()) for p in paths if p is not None}
    values = [value for _, value in source_paths(recipe)]  # each replay source's folders, and the path keys'
    for key in PATH_KEYS:
        *parents, leaf = key.split(".")
        section: Any = recipe or {}
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None
        values.append(section.get(leaf) if isinstance(section, dict) else None)
    for value in values:
        if names_a_place(value):
            found |= {str(value), str(Path(str(value)).expanduser().resolve())}
    return {p for p in found if Path(p).is_absolute()}


def _public_config(folder: Path) -> None:
    """A checkpoint config's ``_name_or_path`` (older writers keep the folder the model was loaded from) by its
    folder name."""
    path = folder / "config.json"
    config = read_json(path)
    if isinstance(config, dict) and names_a_place(config.get("_name_or_path")):
        atomic_write_text(path, json.dumps({**config, "_name_or_path": public_value(config["_name_or_path"])},
                                           indent=2, sort_keys=True) + "\n")


def make_public(folder: Path) -> None:
    """Released files 0644 and folders 0755 (training writes weights 0600 through its temp files)."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def _read_metrics(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    if not path.is_file():
        raise ReleaseError(f"--metrics {path}: no such file; give the metrics_<name>.json that `spatialiq eval score` "
                           "wrote, or leave --metrics out (the card then says 'not evaluated')")
    metrics = read_json(path)
    if not isinstance(metrics, dict) or "object_counting" not in metrics:
        raise ReleaseError(f"--metrics {path}: not a `spatialiq eval score` metrics file (no 'object_counting' key)")
    return metrics


def check_metrics_weights(metrics: dict[str, Any], metrics_path: Path, model_dir: Path, allow: bool) -> str | None:
    """None when ``metrics`` were scored on completions sampled from ``model_dir``'s weights (the ``model_digest``
    `eval score` carries from the completions' provenance equals the checkpoint's); else a ReleaseError, or with
    ``allow`` the caveat the card prints above its numbers."""
    from spatialiq_train.core.weights import checkpoint_digest

    recorded, digest = metrics.get("model_digest"), checkpoint_digest(model_dir)
    if recorded == digest:
        return None
    if recorded is None:
        what = ("does not say which weights its completions were sampled from (no model_digest: completions without "
                "a provenance record, a hub model not in the local cache, or --raw predictions)")
        caveat = "These numbers do not record which weights they were scored on; they may not be this checkpoint's."
    else:
        what = (f"was scored on completions sampled from other weights ({metrics.get('model')}, digest {recorded}) "
                f"than --run's checkpoint {model_dir} (digest {digest})")
        caveat = (f"These numbers were scored on other weights (digest `{recorded}`) than this checkpoint's "
                  f"(`{digest}`).")
    if not allow:
        raise ReleaseError(f"--metrics {metrics_path} {what}; the card would show another model's numbers: sample "
                           f"and score this checkpoint (`spatialiq eval sample --model {model_dir} ...`, then `eval "
                           "score`), or pass --allow-other-weights to release them anyway (the card then says so)")
    return caveat


def _pixel_budget(recipe: dict[str, Any] | None) -> tuple[int | None, int | None]:
    model = (recipe or {}).get("model") or {}
    return model.get("min_pixels"), model.get("max_pixels")


def _generation(recipe: dict[str, Any] | None) -> dict[str, Any] | None:
    ev = (recipe or {}).get("eval")
    if not ev:
        return None
    return {"temperature": ev["temperature"], "top_p": ev["top_p"], "max_new_tokens": ev["max_new_tokens"]}


def check_release_out(out: Path, overwrite: bool) -> None:
    """``--out`` refused where it enters: the current folder or one holding it, and (with ``--overwrite``) an
    existing folder that is not a release (a file a release does not list in its SHA256SUMS, or no SHA256SUMS at
    all): replacing it would delete files that are no part of a release."""
    from spatialiq_train.release.checksums import release_files

    full, here = out.resolve(), Path.cwd().resolve()
    if full == here or full in here.parents:
        raise ReleaseError(f"--out {out} is the current folder{' or holds it' if full != here else ''}; a release "
                           "is written aside and replaces --out whole: give a new folder, e.g. --out release/NAME")
    if not out.exists():
        return
    if not overwrite:
        raise ReleaseError(f"{out} exists; pick a new --out or pass --overwrite to replace it")
    if not out.is_dir():
        raise ReleaseError(f"--out {out} is a file, not a release folder; pick another --out")
    sums = out / SUMS_FILE
    listed = {line.partition("  ")[2] for line in sums.read_text(encoding="utf-8").splitlines()} \
        if sums.is_file() else set()
    foreign = [p.relative_to(out).as_posix() for p in release_files(out) if p.relative_to(out).as_posix() not in listed]
    if not sums.is_file() or foreign:
        what = f"holds {foreign[0]}, which its {SUMS_FILE} does not list" if sums.is_file() and foreign else \
            f"has no {SUMS_FILE}"
        raise ReleaseError(f"--out {out} {what}: it is not a release folder written by spatialiq release, and "
                           "--overwrite would delete files that are no part of a release; pick another --out (or "
                           "move those files away)")


def release(run: Path, out: Path, *, metrics: Path | None = None, data_root: Path | None = None,
            license: str = "apache-2.0", datasets: tuple[str, ...] = (), name: str | None = None,
            overwrite: bool = False, allow_other_weights: bool = False) -> Path:
    """Write the release of ``run`` into ``out`` (built in ``out.partial``, renamed when complete)."""
    run, out = Path(run), Path(out)
    where = run_facts.position(run)
    run_facts.refuse_out_inside(out, where.root)
    check_release_out(out, overwrite)
    run_facts.refuse_stepless(where.root)
    if data_root is not None and not (Path(data_root) / "manifest.json").is_file():
        raise ReleaseError(f"--data {data_root}: no manifest.json; give the dataset root `spatialiq gen` wrote "
                           "(or leave --data out to use the recipe's data.data_root)")
    model_dir = find_model_dir(run)
    check_finite_weights(model_dir, "--run checkpoint")
    recipe_path = find_recipe(run, model_dir)
    recipe, recorded_as = run_facts.recorded_recipe(recipe_path, where.root)
    metrics_data = _read_metrics(metrics)
    caveat = check_metrics_weights(metrics_data, metrics, model_dir, allow_other_weights) \
        if metrics_data is not None and metrics is not None else None
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copy_weights(model_dir, tmp)
    copy_configs(model_dir, tmp, _generation(recipe))
    _public_config(tmp)
    write_processor(model_dir, tmp, *_pixel_budget(recipe))
    phases = run_facts.phases_up_to(run_phases(where.root, model_dir) or run_facts.recorded_phases(where.root),
                                    where)
    init_from = ((recipe or {}).get("rl") or {}).get("init_from") if "rl" in (phases or ()) else None
    found = run_sources(recipe, data_root, run, phases)
    public = public_recipe(recipe) if recipe is not None else None
    if public is not None:
        atomic_write_text(tmp / RECIPE_FILE, source_comment(found) + yaml.safe_dump(public, sort_keys=False))
    inputs = CardInputs(name=name or out.name, run_recipe=public or {}, base_recipe=_base_recipe((recipe or {})
                        .get("name")), base_model=base_model(public, model_dir), license=license, datasets=datasets,
                        data=data_facts(recipe, data_root, run), metrics=metrics_data, phases=phases,
                        trace_kind=trace_kind(recipe, phases, run), recipe_file=RECIPE_FILE if recipe_path else None,
                        init_from=((public or {}).get("rl") or {}).get("init_from") if "rl" in (phases or ()) else
                        None, eval_caveat=caveat, sources=found, position=where.sentence(phases),
                        trained_on=run_facts.trained_on(where.root, phases, run_path(init_from, run)),
                        recorded_as=recorded_as)
    atomic_write_text(tmp / "README.md", model_card(inputs))
    leaks = paths_found(tmp, _machine_paths(recipe, run, model_dir, out, data_root, metrics))
    if leaks:
        shutil.rmtree(tmp, ignore_errors=True)
        file, path = leaks[0]
        raise ReleaseError(f"{out}: the release's {file} would hold {path}, a path of this machine; a release names "
                           "its data by folder name and digest: remove the path from the recipe's free text (name, "
                           "description) or the metrics file's note, and release again")
    write_sums(tmp)
    make_public(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    log.info("released %s -> %s", model_dir, out)
    return out


def revision_tag(folder: Path) -> str:
    """A tag naming the release's exact content: ``release-`` + 12 hex of the SHA256SUMS file's sha256."""
    digest = sha256_file(folder / SUMS_FILE)
    return f"release-{digest[:12]}"


def verify_release(folder: Path, notes: list[str] | None = None) -> list[str]:
    """Problems with a release folder: checksums, a loadable config, a processor that STOCK transformers
    ``AutoProcessor`` loads and that yields ``pixel_values`` (see :func:`check_stock_processor`), a card with front
    matter. What was and was not checked is appended to ``notes``."""
    folder = Path(folder)
    notes = [] if notes is None else notes
    problems = verify_sums(folder)
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        problems.append(f"{folder / 'config.json'}: does not load ({exc})")
    try:
        problems += check_stock_processor(folder, notes)
    except (OSError, ValueError, TypeError, AttributeError, UserError) as exc:
        problems.append(f"{folder}: processor does not load ({type(exc).__name__}: {exc})")
    readme = folder / "README.md"
    if not readme.is_file():
        problems.append(f"{readme}: missing model card")
    else:
        text = readme.read_text(encoding="utf-8")
        head, sep, _ = text[4:].partition("\n---\n")
        if not text.startswith("---\n") or not sep or not isinstance(yaml.safe_load(head), dict):
            problems.append(f"{readme}: no YAML front matter between '---' lines")
    return problems
