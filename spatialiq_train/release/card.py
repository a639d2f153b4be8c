"""The model card (``README.md``) of a release: YAML front matter and body, a pure function of its inputs.

Inputs are plain data: the recipe as run and the shipped recipe it started from (dicts), the dataset facts
(:class:`DataFacts`), and the metrics file of ``spatialiq eval score`` (or None: "not evaluated").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from eval.stats import wilson_interval
from spatialiq_train.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.recipes import flatten
from spatialiq_train.tasks import build_prompt

TAGS = ["spatial-reasoning", "block-counting", "rlvr", "grpo", "dapo", "qwen2.5-vl", "spatial-iq",
        "image-text-to-text"]
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
    base_model: str
    license: str = "apache-2.0"
    datasets: tuple[str, ...] = ()
    data: DataFacts = field(default_factory=DataFacts)
    metrics: dict[str, Any] | None = None
    revision: str | None = None


def recipe_differences(run: dict[str, Any], base: dict[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """(key, base value, run value) for every dotted key whose value differs; all keys when there is no base."""
    a, b = flatten(run), flatten(base or {})
    skip = {"name", "description"}
    return [(k, b.get(k, "(absent)"), a.get(k, "(absent)")) for k in sorted(a.keys() | b.keys())
            if k not in skip and a.get(k, "(absent)") != b.get(k, "(absent)")]


def wilson(p: float, n: int) -> tuple[float, float]:
    """95% Wilson interval of a proportion ``p`` observed over ``n`` scenes (``(nan, nan)`` when n = 0)."""
    if n <= 0 or not math.isfinite(p):
        return math.nan, math.nan
    return wilson_interval(round(p * n), n)


def eval_rows(metrics: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(metric, value, n) for acc@1, maj@k, pass@k, selected@k and every hierarchy column present."""
    oc = metrics.get("object_counting") or {}
    k = metrics.get("k")
    scenes = int(metrics.get("scenes") or 0)
    rows: list[tuple[str, float, int]] = []
    if "acc@1" in oc:
        rows.append(("acc@1", float(oc["acc@1"]), int(oc.get("acc@1_n", scenes))))
    for label in (f"maj@{k}", f"pass@{k}"):
        if oc.get(label) is not None:
            rows.append((label, float(oc[label]), scenes))
    selected = sorted(key for key in oc if key.startswith(f"selected@{k}"))
    rows += [(key, float(oc[key]), scenes) for key in selected if oc[key] is not None]
    summary = metrics.get("summary") or {}
    for column in HIERARCHY_COLUMNS:
        value = summary.get(column)
        if value is not None and math.isfinite(float(value)):
            rows.append((column, float(value), scenes))
    return rows


def front_matter(inputs: CardInputs) -> dict[str, Any]:
    meta: dict[str, Any] = {"license": inputs.license, "base_model": inputs.base_model, "library_name": "transformers",
                            "pipeline_tag": "image-text-to-text", "tags": list(TAGS)}
    if inputs.datasets:
        meta["datasets"] = list(inputs.datasets)
    if inputs.metrics:
        metrics = [{"type": m, "name": m, "value": round(v, 6)} for m, v, _ in eval_rows(inputs.metrics)]
        meta["model-index"] = [{"name": inputs.name, "results": [{
            "task": {"type": "image-text-to-text", "name": "Stacked-block counting"},
            "dataset": {"type": "spatial-iq", "name": "Spatial-IQ benchmark split", "split": "benchmark"},
            "metrics": metrics}]}]
    return meta


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if not isinstance(value, str) else value


def _training_section(inputs: CardInputs) -> list[str]:
    recipe_name = inputs.run_recipe.get("name", "?")
    lines = ["## What was trained", "",
             f"- Recipe: `{recipe_name}` (the full recipe as run is `training_recipe.yaml` in this folder).",
             f"- Base model: `{inputs.base_model}`."]
    d = inputs.data
    facts = [("generator version", d.generator_version), ("generator seed", d.seed),
             ("structures", d.structures), ("views", d.views)]
    lines += [f"- Data {label}: {value}" for label, value in facts if value is not None]
    lines += [f"- Split `{s}`: structure-id sha256 `{h}`" for s, h in sorted(d.split_hashes.items())]
    diffs = recipe_differences(inputs.run_recipe, inputs.base_recipe)
    base = "the shipped recipe of the same name" if inputs.base_recipe is not None else "nothing (no shipped base)"
    lines += ["", f"Hyperparameters that differ from {base}:", ""]
    if diffs:
        lines += ["| key | base | this run |", "| --- | --- | --- |"]
        lines += [f"| `{k}` | {_fmt(b)} | {_fmt(r)} |" for k, b, r in diffs]
    else:
        lines.append("none.")
    return lines


def _usage_section(repo: str) -> list[str]:
    prompt = build_prompt("task_main", "training")
    return ["## How to use", "",
            "The model answers the benchmark's Object Counting question with the hierarchical chain of thought. "
            "Send the CoT system prompt and one user turn holding the view image then the prompt, exactly:", "",
            "System prompt:", "", "```text", COT_SYSTEM_PROMPT, "```", "", "User prompt:", "", "```text", prompt, "```",
            "", "With transformers (the processor needs `torchvision`: without it `AutoProcessor` returns a bare "
            "tokenizer and the image would be dropped, hence the check):", "", "```python",
            "from PIL import Image",
            "from transformers import AutoModelForImageTextToText, AutoProcessor",
            "",
            "SYSTEM_PROMPT, PROMPT = ...  # the two prompts above, verbatim",
            'image = Image.open("view.png").convert("RGB")',
            f'model = AutoModelForImageTextToText.from_pretrained("{repo}")',
            f'processor = AutoProcessor.from_pretrained("{repo}")',
            "messages = [",
            '    {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},',
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


def _eval_section(metrics: dict[str, Any] | None) -> list[str]:
    lines = ["## Evaluation", ""]
    if not metrics:
        return [*lines, "Not evaluated: this release was made without a `spatialiq eval score` metrics file."]
    if metrics.get("note"):
        lines += [f"> **Note:** {metrics['note']}", ""]
    lines += [f"Responder `{metrics.get('name', '?')}`, mode `{metrics.get('mode', '?')}`, k = {metrics.get('k')}, "
              f"n = {metrics.get('scenes')} scenes, hierarchy convention `{metrics.get('convention', '?')}`. "
              "Intervals are 95% Wilson intervals over n.", "",
              "| metric | value | n | 95% Wilson |", "| --- | --- | --- | --- |"]
    for metric, value, n in eval_rows(metrics):
        lo, hi = wilson(value, n)
        lines.append(f"| {metric} | {value:.4f} | {n} | [{lo:.4f}, {hi:.4f}] |")
    return lines


LIMITATIONS = [
    "## Limitations", "",
    "- Trained on procedurally generated cube-only scenes (4x4x4 height maps); other objects, clutter and real "
    "photographs are out of distribution.",
    "- Scores are for the Spatial-IQ benchmark prompts and CoT template; other phrasings can score lower.",
    "- A correct final count does not imply a faithful chain of thought: check the trace audit in the metrics.",
]


def model_card(inputs: CardInputs) -> str:
    """The whole README.md text."""
    meta = yaml.safe_dump(front_matter(inputs), sort_keys=False, allow_unicode=True)
    repo = inputs.name
    body = [f"# {inputs.name}", "",
            "A Qwen2.5-VL policy trained with spatialiq-train (SFT then GRPO/DAPO under the gated "
            "integer-distance reward) to count stacked 3D blocks through the Spatial-IQ hierarchy of sub-tasks.", ""]
    if inputs.revision:
        body += [f"Revision: `{inputs.revision}`.", ""]
    body += [*_training_section(inputs), "", *_usage_section(repo), "", *_eval_section(inputs.metrics), "",
             *LIMITATIONS]
    return f"---\n{meta}---\n\n" + "\n".join(body) + "\n"
