"""SpatialChain (Sousa et al., ../shared/seeds/002): binary spatial VQA on GQA images with reference chains.

Data: the test split as CSV or parquet with the columns :data:`REQUIRED_COLUMNS` (``relation`` and ``spatial`` are
read when present); images ``IMAGEID.jpg`` in the GQA image folder the user names. Each item is asked with the
paper's inference system prompt (Appendix H) and the question as the user turn.

Answers (:func:`split_output`): the target format ``<think>…</think><answer>…</answer>`` and the prompt's
``Answer: <one short sentence>`` line; the label is the answer's first word, yes or no. Metrics (section 4, Appendix
I.1): accuracy over parsed answers (the paper's Table 2 rule) with the unparsed count, accuracy counting them
wrong, yes- and no-accuracy and their gap; the chain metrics of :mod:`eval.external.chains` on every item; ROUGE-1
and token F1 conditioned on correctness (two-sided Mann-Whitney U); style markers; the yes/no F1s, accuracy per
relation and per hop stratum of :mod:`eval.external.spatialchain_breakdown`.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

from eval.external import chains
from eval.external import spatialchain_breakdown as breakdown
from eval.external.base import BenchmarkLayoutError, Item, Scored, image_file
from eval.external.prompts import SPATIALCHAIN_JUDGE_FIELDS, SPATIALCHAIN_JUDGE_PROMPT, SPATIALCHAIN_SYSTEM_PROMPT

REQUIRED_COLUMNS: tuple[str, ...] = ("imageId", "question", "fullAnswer", "thinking", "scene_graph")
OPTIONAL_COLUMNS: tuple[str, ...] = ("relation", "spatial")

_THINK_OPEN, _THINK_CLOSE = re.compile(r"<think>", re.I), re.compile(r"</think>", re.I)
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.I | re.S)
_ANSWER_LINE = re.compile(r"answer\s*:", re.I)
_LABEL = re.compile(r"[a-z0-9]+")


def read_rows(path: Path) -> list[dict[str, str]]:
    """The split's rows as strings; a BenchmarkLayoutError names the file and the missing columns."""
    if not path.is_file():
        raise BenchmarkLayoutError(f"--data {path}: no such file (SpatialChain's test split as .csv or .parquet)")
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        columns = table.column_names
        rows = [{k: "" if v is None else str(v) for k, v in row.items()} for row in table.to_pylist()]
    else:
        csv.field_size_limit(sys.maxsize)  # scene graphs are long cells
        with path.open(newline="", encoding="utf-8-sig") as fh:  # a spreadsheet may write a BOM
            reader = csv.DictReader(fh)
            columns = list(reader.fieldnames or [])
            rows = [{k: v or "" for k, v in row.items() if k is not None} for row in reader]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise BenchmarkLayoutError(f"--data {path}: missing column(s) {', '.join(missing)}; SpatialChain's test split "
                                   f"has {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}")
    if not rows:
        raise BenchmarkLayoutError(f"--data {path}: no rows")
    return rows


def object_labels(scene_graph: str) -> list[str]:
    """The object names of a scene graph: GQA's JSON (``{"objects": {id: {"name": ...}}}``, an id-to-object map or a
    list of objects), the same as a Python literal (parsed with ``ast.literal_eval``, which evaluates nothing), or
    the released text rendering (``- name(id) ...`` lines). [] when none can be read."""
    graph: Any = None
    for parse in (json.loads, ast.literal_eval):
        try:
            graph = parse(scene_graph)
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if graph is None:
        return re.findall(r"^\s*-\s*([^(\n]+?)\s*\(", scene_graph, flags=re.M)
    if isinstance(graph, dict) and "objects" in graph:
        graph = graph["objects"]
    objects = graph.values() if isinstance(graph, dict) else graph if isinstance(graph, list) else []
    return [str(o["name"]) for o in objects if isinstance(o, dict) and isinstance(o.get("name"), str)]


def split_output(text: str) -> tuple[str, str | None]:
    """(reasoning chain, answer text or None) of one output.

    The chain is the ``<think>`` block when there is one (a lone ``</think>`` closes a block the chat template
    opened), else the text before the answer. The answer is the last ``<answer>`` tag's content, else what follows
    the last ``Answer:`` on its line (the next non-empty line when that is empty); None when there is neither."""
    text = text.replace("**", "").replace("__", "")
    chain, rest = None, text
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        head, rest = text[:closes[-1].start()], text[closes[-1].end():]
        opened = _THINK_OPEN.search(head)
        chain = head[opened.end():] if opened else head
    tags = _ANSWER_TAG.findall(rest)
    if tags:
        answer: str | None = tags[-1].strip()
        cut = rest.lower().rfind("<answer>")
    else:
        marks = list(_ANSWER_LINE.finditer(rest))
        cut = marks[-1].start() if marks else len(rest)
        answer = _answer_line(rest[marks[-1].end():]) if marks else None
    if chain is None:
        chain = rest[:cut]
    return _THINK_OPEN.sub("", chain).strip(), answer or None


def _answer_line(after: str) -> str:
    lines = [line.strip() for line in after.splitlines()]
    return next((line for line in lines if line), "")


def yes_no(answer: str | None) -> str | None:
    """``yes`` or ``no`` when the answer's first word is one of them (case and leading marks ignored), else None."""
    words = _LABEL.findall((answer or "").lower())
    return words[0] if words and words[0] in ("yes", "no") else None


class SpatialChain:
    """The SpatialChain adapter (:class:`eval.external.base.Adapter`)."""

    name = "spatialchain"
    max_images = 1

    def load(self, data: Path, images: Path | None) -> list[Item]:
        if images is None:
            raise BenchmarkLayoutError("spatialchain needs --images: the GQA image folder (IMAGEID.jpg files)")
        if not images.is_dir():
            raise BenchmarkLayoutError(f"--images {images}: not a folder (the GQA image folder, IMAGEID.jpg files)")
        items = []
        for i, row in enumerate(read_rows(data), start=1):
            for column in ("imageId", "question", "fullAnswer"):
                if not row[column].strip():
                    raise BenchmarkLayoutError(f"--data {data}: row {i}: empty {column!r}")
            image_id = row["imageId"].strip()
            image = image_file(images, image_id, f"--data {data}: row {i} (imageId {image_id})")
            truth = {key: row.get(key, "") for key in REQUIRED_COLUMNS + OPTIONAL_COLUMNS}
            items.append(Item(f"{i}:{image_id}", row["question"].strip(), SPATIALCHAIN_SYSTEM_PROMPT, (image,), truth))
        return items

    def score(self, items: list[Item], texts: dict[str, str]) -> Scored:
        scorer = chains._scorer()
        rows = [_score_item(item, texts.get(item.id, ""), scorer) for item in items]
        outputs = [texts.get(item.id, "") for item in items]
        chain_texts = [split_output(t)[0] for t in outputs]
        top, share = chains.opener_share(outputs)
        signals = {"opener": top, "opener_share": share,
                   "chain_words_mean": chains.mean_of(len(chains.tokens(c)) for c in chain_texts)}
        metrics = {**spatialchain_metrics(rows), **breakdown.breakdown_metrics(rows)}
        tables = {"relation": breakdown.per_relation(rows), "hops": breakdown.per_hop(rows)}
        return Scored("accuracy_all", metrics, signals, rows, dict(METRIC_NOTES), tables)

    def judge_prompts(self, items: list[Item], texts: dict[str, str]) -> dict[str, tuple[str, str]]:
        """(system, user) of each item's judge call: Appendix F's rubric and its input block, the chain without
        its think tags and the answer as parsed."""
        prompts = {}
        for item in items:
            chain, answer = split_output(texts.get(item.id, ""))
            user = SPATIALCHAIN_JUDGE_FIELDS.format(
                question=item.prompt, ground_truth=item.truth["fullAnswer"], scene_graph=item.truth["scene_graph"],
                candidate_answer=answer or "", candidate_reasoning=chain)
            prompts[item.id] = (SPATIALCHAIN_JUDGE_PROMPT, user)
        return prompts


def _score_item(item: Item, text: str, scorer: Any) -> dict[str, Any]:
    """One item's row: the parsed label, correctness (None for a non-binary truth) and the chain scores."""
    chain, answer = split_output(text)
    truth, pred = yes_no(item.truth["fullAnswer"]), yes_no(answer)
    reference = item.truth["thinking"]
    relation, source = breakdown.item_relation(item.truth.get("relation"), item.prompt)
    rouge1, rouge_l = chains.rouge(chain, reference, scorer)
    scores = {"rouge1": rouge1, "rougeL": rouge_l, "token_f1": chains.token_f1(chain, reference),
              "entity_overlap": chains.entity_overlap(chain, object_labels(item.truth["scene_graph"])),
              "length_ratio": chains.length_ratio(chain, reference), "step_markers": chains.step_markers(chain),
              "chain_words": len(chains.tokens(chain))}
    return {"id": item.id, "correct": None if truth is None else int(pred == truth), "truth": truth, "pred": pred,
            "answer": answer, "relation": relation, "relation_source": source,
            "relation_in_question": breakdown.first_relation(item.prompt), "hops": breakdown.hop_stratum(item.prompt),
            "scores": scores}


METRIC_NOTES: dict[str, str] = {
    "accuracy": "share correct among parsed yes/no answers to yes/no questions (the rule Table 2's caption states)",
    "accuracy_all": "share correct among all yes/no questions, an unparsed answer counted wrong (the rule Table 2's "
                    "numbers follow: each of its nine Acc values is correct / 895)",
    "unparsed": "yes/no questions whose answer has no yes/no first word (or no answer at all)",
    "yes_accuracy": "accuracy on parsed answers to questions whose truth is yes",
    "no_accuracy": "accuracy on parsed answers to questions whose truth is no",
    "yes_accuracy_all": "share correct of all questions whose truth is yes, unparsed counted wrong (Table 2's Yes)",
    "no_accuracy_all": "share correct of all questions whose truth is no, unparsed counted wrong (Table 2's No)",
    "polarity_gap": "yes_accuracy - no_accuracy (positive: a yes bias)",
    "rouge1": "mean ROUGE-1 F of the chain against the reference chain (rouge-score)",
    "rougeL": "mean ROUGE-L F (rouge-score)", "token_f1": "mean token F1, lower-cased, stop words removed",
    "entity_overlap": "mean share of the scene graph's object labels named in the chain",
    "length_ratio": "mean chain length over reference length, in tokens",
    "step_markers": "mean count of first/second/third/then/next/finally per chain",
    "f1_yes": "F1 of the yes class over parsed answers to yes/no questions (the value Table 2's F1 column holds)",
    "f1_no": "F1 of the no class over the same answers",
    "macro_f1": "(f1_yes + f1_no) / 2: the macro-F1 Table 2's caption names (its numbers are f1_yes)",
    "accuracy_single_hop": "accuracy on questions naming one relation (an unparsed answer counted wrong; Table 18)",
    "accuracy_multi_hop": "accuracy on questions chaining two or more relations (Table 18)",
    "accuracy_ambiguous_hop": "accuracy on questions whose hop count the text leaves open (the paper's 5, by hand)",
    "n_single_hop": "yes/no questions naming one relation", "n_multi_hop": "yes/no questions naming two or more",
    "n_ambiguous_hop": "yes/no questions naming none, or relations as alternatives ('or' between them)",
    "hop_delta": "accuracy_multi_hop - accuracy_single_hop (Table 18's delta)",
    "relation_from_column": "items labelled by the data's relation column (the rest: the question's first relation)",
    "relation_agreement": "share of those whose column label equals the question's first-occurrence label",
}


def spatialchain_metrics(rows: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """Accuracy family, chain means and the correctness-conditioned tests over the item rows."""
    binary = [r for r in rows if r["correct"] is not None]
    parsed = [r for r in binary if r["pred"] is not None]

    def acc(rs: list[dict[str, Any]]) -> float | None:
        return sum(r["correct"] for r in rs) / len(rs) if rs else None

    yes = acc([r for r in parsed if r["truth"] == "yes"])
    no = acc([r for r in parsed if r["truth"] == "no"])
    metrics: dict[str, float | int | None] = {
        "n_binary": len(binary), "unparsed": len(binary) - len(parsed), "accuracy": acc(parsed),
        "accuracy_all": acc(binary), "yes_accuracy": yes, "no_accuracy": no,
        "polarity_gap": None if yes is None or no is None else yes - no,
        "yes_accuracy_all": acc([r for r in binary if r["truth"] == "yes"]),
        "no_accuracy_all": acc([r for r in binary if r["truth"] == "no"])}
    for key in ("rouge1", "rougeL", "token_f1", "entity_overlap", "length_ratio", "step_markers"):
        metrics[key] = chains.mean_of(r["scores"][key] for r in rows)
    correct = [r["correct"] if r["pred"] is not None else None for r in rows]
    for key in ("rouge1", "token_f1"):
        test = chains.conditioned([r["scores"][key] for r in rows], correct)
        metrics.update({f"{key}_correct": test["mean_correct"], f"{key}_incorrect": test["mean_incorrect"],
                        f"{key}_delta": test["delta"], f"{key}_mannwhitney_p": test["p"]})
        metrics.update(n_correct=test["n_correct"], n_incorrect=test["n_incorrect"])
    return metrics
