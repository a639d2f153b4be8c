"""The model card (``README.md``) of a release: YAML front matter and body, a pure function of its inputs.

Inputs are plain data: the recipe as run and the shipped recipe it started from (dicts), the dataset facts
(:class:`DataFacts`), the phases that ran and the trace kind they trained on, and the metrics file of
``spatialiq eval score`` (or None: "not evaluated").

Every n and interval is computed from the counts the metrics file carries (``object_counting.n`` and
``object_counting.correct``, ``per_task``, ``composition.n``), never rebuilt from a value and the scene count; a
column that is no single proportion (the conditional-accuracy bundles) is shown without n or interval.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from eval.stats import wilson_interval
from spatialiq_train.core.io import markdown_table
from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.core.recipes import flatten
from spatialiq_train.core.tasks import build_prompt
from spatialiq_train.release.paths import Source

TAGS = ["spatial-reasoning", "block-counting", "qwen2.5-vl", "spatial-iq", "image-text-to-text"]
RL_TAGS = ["rlvr", "grpo", "dapo"]
PHASES = ("sft", "rl")
RL_KEYS = ("rl", "vllm", "generation", "reward", "data.rl_split")
"""Recipe keys only the RL phase reads: an SFT-only card does not list them."""
SFT_KEYS = ("sft", "data.sft_split")
"""Recipe keys only the SFT phase reads: an RL-only card does not list them."""
PER_TASK_COLUMNS = {"object_count": "main", "visible_count": "task5", "hidden_count": "task8"}
"""Hierarchy columns that are one task's accuracy: n and successes come from ``per_task``."""
HIERARCHY_COLUMNS = ("object_count", "visible_count", "hidden_count", "referential_chain", "visible_support",
                     "hidden_support", "summation_mechanism", "mental_rotation_mean")


@dataclass(frozen=True)
class DataFacts:
    """What the card says about the training data (every field optional)."""

    generator_version: str | None = None
    seed: int | None = None
    structures: int | None = None
    views: int | None = None
    split_hashes: dict[str, str] = field(default_factory=dict)
    """split name -> sha256 of its sorted structure ids."""


@dataclass(frozen=True)
class CardInputs:
    name: str
    run_recipe: dict[str, Any]
    base_recipe: dict[str, Any] | None
    base_model: str | None
    """What the run started from (the recipe's model, or the checkpoint config's); None: not recorded."""
    license: str = "apache-2.0"
    datasets: tuple[str, ...] = ()
    data: DataFacts = field(default_factory=DataFacts)
    metrics: dict[str, Any] | None = None
    revision: str | None = None
    phases: tuple[str, ...] | None = None
    """The training phases that ran, in order (``("sft",)``, ``("rl",)``, ``("sft", "rl")``); None: not recorded."""
    trace_kind: str | None = None
    """``cot`` or ``plain``: the trace kind the model was trained on; None: not found."""
    recipe_file: str | None = None
    """The release's file holding the recipe as run; None when the run kept no recipe (none is written)."""
    init_from: str | None = None
    """The checkpoint the RL phase started from (``rl.init_from``), when it ran and one was set."""
    eval_caveat: str | None = None
    """Printed above the evaluation: metrics released on other weights than the checkpoint's (``release
    --allow-other-weights``)."""
    sources: tuple[Source, ...] = ()
    """The dataset, traces and checkpoints the run was made from, by folder name and digest (never a path)."""
    position: str | None = None
    """For an intermediate checkpoint, the line naming its phase and step (``release.run_facts.Position``)."""
    trained_on: tuple[str, ...] = ()
    """One line per dataset a phase of the run recorded when it trained (its ``data.json``)."""
    recorded_as: tuple[str, ...] = ()
    """For a recipe recorded by an earlier version, how its retired keys were read (``release.run_facts``)."""


def recipe_differences(run: dict[str, Any], base: dict[str, Any] | None,
                       phases: tuple[str, ...] | None = None) -> list[tuple[str, Any, Any]]:
    """(key, base value, run value) for every dotted key whose value differs; all keys when there is no base.
    With ``phases`` known, keys only a phase that did not run reads (:data:`RL_KEYS`, :data:`SFT_KEYS`) are left out."""
    a, b = flatten(run), flatten(base or {})
    skip = {"name", "description"}
    unread: tuple[str, ...] = ()
    if phases is not None:
        unread = (() if "rl" in phases else RL_KEYS) + (() if "sft" in phases else SFT_KEYS)

    def shown(key: str) -> bool:
        return key not in skip and not any(key == p or key.startswith(p + ".") for p in unread)

    return [(k, b.get(k, "(absent)"), a.get(k, "(absent)")) for k in sorted(a.keys() | b.keys())
            if shown(k) and a.get(k, "(absent)") != b.get(k, "(absent)")]


@dataclass(frozen=True)
class EvalRow:
    """One evaluation row: the value as the metrics file gives it, its n and successes (None: not a proportion)."""

    metric: str
    value: float
    n: int | None
    successes: int | None

    def interval(self) -> tuple[float, float]:
        """95% Wilson interval of successes / n; (nan, nan) without counts."""
        if self.n is None or self.successes is None or self.n <= 0:
            return math.nan, math.nan
        return wilson_interval(self.successes, self.n)


def successes_of(value: float, n: int) -> int | None:
    """The success count a proportion over ``n`` stands for, when ``value * n`` is a whole number; else None (the
    value is no proportion over these n: no interval is shown rather than a made-up one)."""
    if n <= 0 or not math.isfinite(value):
        return None
    count = round(value * n)
    return count if abs(value * n - count) < 1e-6 else None


def _decoding_row(oc: dict[str, Any], label: str, scenes: int) -> EvalRow:
    value = float(oc[label])
    ns, correct = oc.get("n") or {}, oc.get("correct") or {}
    n = ns.get(label, oc.get("acc@1_n", scenes) if label == "acc@1" else scenes)
    n = int(n) if n is not None else None
    hits = correct.get(label)
    hits = int(hits) if hits is not None else (successes_of(value, n) if n is not None else None)
    return EvalRow(label, value, n, hits)


def _hierarchy_row(metrics: dict[str, Any], column: str, value: float) -> EvalRow:
    task = PER_TASK_COLUMNS.get(column)
    counts = (metrics.get("per_task") or {}).get(task or "") or {}
    if task is not None and counts.get("n") is not None and counts.get("n_correct") is not None:
        return EvalRow(column, value, int(counts["n"]), int(counts["n_correct"]))
    composition = metrics.get("composition") or {}
    if column == "summation_mechanism" and composition.get("n"):
        n = int(composition["n"])
        return EvalRow(column, value, n, successes_of(value, n))
    return EvalRow(column, value, None, None)


def eval_rows(metrics: dict[str, Any]) -> list[EvalRow]:
    """acc@1, maj@k, pass@k, selected@k and every hierarchy column present, each with the n and successes the
    metrics file carries."""
    oc = metrics.get("object_counting") or {}
    k = metrics.get("k")
    scenes = int(metrics.get("scenes") or 0)
    labels = [label for label in ("acc@1", f"maj@{k}", f"pass@{k}") if oc.get(label) is not None]
    labels += sorted(key for key in oc if key.startswith(f"selected@{k}") and oc[key] is not None)
    rows = [_decoding_row(oc, label, scenes) for label in labels]
    summary = metrics.get("summary") or {}
    for column in HIERARCHY_COLUMNS:
        value = summary.get(column)
        if value is not None and math.isfinite(float(value)):
            rows.append(_hierarchy_row(metrics, column, float(value)))
    return rows


def front_matter(inputs: CardInputs) -> dict[str, Any]:
    meta: dict[str, Any] = {"license": inputs.license}
    if inputs.base_model is not None:
        meta["base_model"] = inputs.base_model
    meta.update({"library_name": "transformers", "pipeline_tag": "image-text-to-text",
                 "tags": TAGS[:2] + (RL_TAGS if "rl" in (inputs.phases or ()) else []) + TAGS[2:]})
    if inputs.datasets:
        meta["datasets"] = list(inputs.datasets)
    if inputs.metrics:
        metrics = [{"type": r.metric, "name": r.metric, "value": round(r.value, 6)} for r in eval_rows(inputs.metrics)]
        meta["model-index"] = [{"name": inputs.name, "results": [{
            "task": {"type": "image-text-to-text", "name": "Stacked-block counting"},
            "dataset": {"type": "spatial-iq", "name": "Spatial-IQ benchmark split", "split": "benchmark"},
            "metrics": metrics}]}]
    return meta


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if not isinstance(value, str) else value


def replay_line(recipe: dict[str, Any]) -> str | None:
    """For a run with replay (the recipe's ``data.sources``), the card's line naming every source by folder with its
    weight and its share of every global batch (weight / sum of weights); None without replay."""
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    entries = [e for e in data.get("sources") or () if isinstance(e, dict)]
    weights = [float(e.get("weight") or 0) for e in entries]
    if not entries or not all(math.isfinite(w) and w > 0 for w in weights):
        return None
    named = [f"`{e.get('traces_dir')}` (`data.sources[{i}]`, weight {_fmt(e.get('weight'))}, "
             f"{100 * w / sum(weights):.4g} %)" for i, (e, w) in enumerate(zip(entries, weights, strict=True))]
    return f"- Replay: every global batch mixed from {len(entries)} trace sources by weight: {', '.join(named)}."


def _training_section(inputs: CardInputs) -> list[str]:
    if inputs.recipe_file is not None:
        recipe = (f"- Recipe: `{inputs.run_recipe.get('name', '?')}` (the full recipe as run is "
                  f"`{inputs.recipe_file}` in this folder).")
    else:
        recipe = "- Recipe: not recorded with the run (no recipe was kept beside its checkpoint)."
    base = f"`{inputs.base_model}`" if inputs.base_model is not None else "not recorded with the run"
    lines = ["## What was trained", "", recipe, *inputs.recorded_as, f"- Base model: {base}.",
             *filter(None, [inputs.position])]
    if inputs.init_from:
        lines.append(f"- The RL phase started from `{inputs.init_from}` (`rl.init_from`).")
    d = inputs.data
    facts = [("generator version", d.generator_version), ("generator seed", d.seed),
             ("structures", d.structures), ("views", d.views)]
    lines += [f"- Data {label}: {value}" for label, value in facts if value is not None]
    lines += [f"- `{s.key}`: folder `{s.name}`, "
              + (f"{s.digest_of} `{s.digest}`" if s.digest else "not found when released") for s in inputs.sources]
    lines += [f"- Split `{s}`: structure-id sha256 `{h}`" for s, h in sorted(d.split_hashes.items())]
    lines += [*filter(None, [replay_line(inputs.run_recipe)]), *inputs.trained_on]
    diffs = recipe_differences(inputs.run_recipe, inputs.base_recipe, inputs.phases)
    base = "the shipped recipe of the same name" if inputs.base_recipe is not None else "nothing (no shipped base)"
    unread = "" if inputs.phases is None or set(PHASES) <= set(inputs.phases) else \
        f" (keys read only by a phase that did not run are left out; the run's phases: {', '.join(inputs.phases)})"
    lines += ["", f"Hyperparameters that differ from {base}{unread}:", ""]
    if diffs:
        lines.append(markdown_table(["key", "base", "this run"], [(f"`{k}`", _fmt(b), _fmt(r)) for k, b, r in diffs]))
    else:
        lines.append("none.")
    return lines


def _prompt_lines(trace_kind: str | None) -> list[str]:
    prompt = build_prompt("task_main", "training")
    user = ["User prompt:", "", "```text", prompt, "```"]
    if trace_kind == "cot":
        return ["The model answers the benchmark's Object Counting question with the hierarchical chain of thought. "
                "Send the CoT system prompt and one user turn holding the view image then the prompt, exactly:", "",
                "System prompt:", "", "```text", COT_SYSTEM_PROMPT, "```", "", *user]
    if trace_kind == "plain":
        return ["The model answers the benchmark's Object Counting question with the total alone, as "
                "`<answer>N</answer>` (plain traces: no system prompt, no chain of thought). Send one user turn "
                "holding the view image then the prompt, exactly:", "", *user]
    return ["The trace kind this model was trained on could not be read from the run (its trace files were not "
            "found): send the user turn of its training traces (and a system turn only if those traces had one). "
            "The benchmark's Object Counting prompt is:", "", *user]


def _usage_section(repo: str, trace_kind: str | None) -> list[str]:
    cot = trace_kind == "cot"
    system = ['    {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},'] if cot else []
    return ["## How to use", "", *_prompt_lines(trace_kind),
            "", "With transformers (the processor needs `torchvision`: without it `AutoProcessor` returns a bare "
            "tokenizer and the image would be dropped, hence the check):", "", "```python",
            "from PIL import Image",
            "from transformers import AutoModelForImageTextToText, AutoProcessor",
            "",
            *(["SYSTEM_PROMPT, PROMPT = ...  # the two prompts above, verbatim"] if cot else
              ["PROMPT = ...  # the user prompt above, verbatim"]),
            'image = Image.open("view.png").convert("RGB")',
            f'model = AutoModelForImageTextToText.from_pretrained("{repo}")',
            f'processor = AutoProcessor.from_pretrained("{repo}")',
            "messages = [", *system,
            '    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]},',
            "]",
            "text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)",
            'inputs = processor(text=[text], images=[image], return_tensors="pt")',
            'assert "pixel_values" in inputs, "the processor dropped the image: pip install torchvision"',
            "out = model.generate(**inputs, max_new_tokens=1024, do_sample=False)",
            "print(processor.batch_decode(out[:, inputs.input_ids.shape[1]:], skip_special_tokens=True)[0])",
            "```", "", "With vLLM:", "", "```python",
            "from vllm import LLM, SamplingParams",
            "",
            f'llm = LLM(model="{repo}", max_model_len=2048, limit_mm_per_prompt={{"image": 1}})',
            "params = SamplingParams(n=10, temperature=1.0, top_p=1.0, max_tokens=1024)",
            'outputs = llm.generate([{"prompt": text, "multi_modal_data": {"image": [image]}}], params)',
            "```", "",
            "Or score it on a benchmark split with `spatialiq eval sample --model <this folder> ...` and "
            "`spatialiq eval score`."]


def _eval_cells(row: EvalRow) -> tuple[str, str, str, str]:
    if row.n is None or row.successes is None:
        why = "a mean of conditional accuracies, no single n" if row.n is None else "not a proportion over n"
        return row.metric, f"{row.value:.4f}", str(row.n if row.n is not None else "—"), f"— ({why})"
    lo, hi = row.interval()
    return row.metric, f"{row.value:.4f}", str(row.n), f"[{lo:.4f}, {hi:.4f}]"


def _eval_section(metrics: dict[str, Any] | None, caveat: str | None = None) -> list[str]:
    lines = ["## Evaluation", ""]
    if not metrics:
        return [*lines, "Not evaluated: this release was made without a `spatialiq eval score` metrics file."]
    if caveat:
        lines += [f"> **Caveat:** {caveat}", ""]
    if metrics.get("note"):
        lines += [f"> **Note:** {metrics['note']}", ""]
    lines += [f"Responder `{metrics.get('name', '?')}`, mode `{metrics.get('mode', '?')}`, k = {metrics.get('k')}, "
              f"{metrics.get('scenes')} scenes, hierarchy convention `{metrics.get('convention', '?')}`. "
              "n is each metric's own denominator as the metrics file counts it; intervals are 95% Wilson intervals "
              "of the success count over that n.", "",
              markdown_table(["metric", "value", "n", "95% Wilson"], [_eval_cells(row) for row in eval_rows(metrics)])]
    return lines


def summary_sentence(phases: tuple[str, ...] | None, trace_kind: str | None) -> str:
    """What the card's first paragraph says was done, from the phases that ran and the trace kind."""
    traces = {"cot": "chain-of-thought traces", "plain": "plain answer traces"}.get(trace_kind or "", "traces")
    how = {("sft",): f"supervised fine-tuning (SFT) on {traces}",
           ("rl",): "GRPO/DAPO under the gated integer-distance reward",
           ("sft", "rl"): f"SFT on {traces} then GRPO/DAPO under the gated integer-distance reward"}
    done = how.get(tuple(phases or ()), "training phases not recorded with the run")
    return (f"A Qwen2.5-VL policy trained with spatialiq-train ({done}) to count stacked 3D blocks through the "
            "Spatial-IQ hierarchy of sub-tasks.")


LIMITATIONS = [
    "## Limitations", "",
    "- Trained on procedurally generated cube-only scenes (4x4x4 height maps); other objects, clutter and real "
    "photographs are out of distribution.",
    "- Scores are for the Spatial-IQ benchmark prompts (and, for a CoT model, its template); other phrasings can "
    "score lower.",
    "- A correct final count does not imply a faithful chain of thought: check the trace audit in the metrics.",
]


def model_card(inputs: CardInputs) -> str:
    """The whole README.md text."""
    meta = yaml.safe_dump(front_matter(inputs), sort_keys=False, allow_unicode=True)
    repo = inputs.name
    body = [f"# {inputs.name}", "",
            summary_sentence(inputs.phases, inputs.trace_kind), ""]
    if inputs.revision:
        body += [f"Revision: `{inputs.revision}`.", ""]
    body += [*_training_section(inputs), "", *_usage_section(repo, inputs.trace_kind), "",
             *_eval_section(inputs.metrics, inputs.eval_caveat), "", *LIMITATIONS]
    return f"---\n{meta}---\n\n" + "\n".join(body) + "\n"
