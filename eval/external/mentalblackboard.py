"""MentalBlackboard (../shared/seeds/003): paper folding and hole punching, the release's prediction records.

Data: a JSON list of records in the release's schema (``PFHP_Prediction_Data.json``: ``id``, ``foldingTypes``,
``initialHoles``, ``resultHoles``, ``unfoldingTypes``), read with the folding task family's record reader
(:mod:`spatialiq_train.core.folding_records`). Two modes:

* ``2d`` (``--images DIR``): DIR is the folder the release's ``img_text_map.py`` writes
  (``ID/img/ID_fold_0_initial.png``, ``ID_fold_N_FOLDTYPE.png`` per step, ``ID_punching_holes.png``); the records it
  holds images for are asked with those images in order and the release's prediction prompt verbatim
  (:data:`eval.external.prompts.MENTALBLACKBOARD_PREDICTION_TEMPLATE`).
* ``text`` (no images): every record, the same prompt with its two sentences about images replaced by the folds in
  words (the folding family's :func:`spatialiq_train.core.folding_answers.step_sentence`): our adaptation, since the
  paper's text format needs the release's rendering script.

Answers are the prompt's JSON object (``totalNumberofHoles``, ``unfoldingTypes``, ``resultHoles``), found as the
release's scorer finds it (the last fenced block, else the outermost braces; bare unfolding codes quoted and
trailing commas dropped when it does not parse as it stands). Scores are the folding family's
(:mod:`spatialiq_train.core.folding_metrics`): exact match, partial accuracy, extra and missing holes, unfolding
exact and per step, per-field accuracy; directions count in ``2d`` and not in ``text`` (the paper's text format has
no direction).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from eval.external import chains
from eval.external.base import BenchmarkLayoutError, Item, Scored, plain_name
from eval.external.prompts import MENTALBLACKBOARD_IMAGE_SENTENCES, MENTALBLACKBOARD_PREDICTION_TEMPLATE
from spatialiq_train.core.folding import FoldError, Hole
from spatialiq_train.core.folding_answers import step_sentence
from spatialiq_train.core.folding_metrics import FIELDS, score_prediction, summarize_scores
from spatialiq_train.core.folding_records import read_holes, read_steps, record_id

log = logging.getLogger(__name__)

_FENCED_JSON = re.compile(r"```json\s*([\s\S]*?)```", re.I)
_FENCED = re.compile(r"```\s*([\s\S]*?)```")
_BARE_CODE = re.compile(r'(?<!")\b([DHV]\d-F)\b(?!")')
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a release file; a BenchmarkLayoutError names the file when it is not a JSON list of objects."""
    if not path.is_file():
        raise BenchmarkLayoutError(f"--data {path}: no such file (MentalBlackboard's PFHP_Prediction_Data.json)")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BenchmarkLayoutError(f"--data {path}: not JSON ({exc})") from None
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        raise BenchmarkLayoutError(f"--data {path}: expected a non-empty JSON list of prediction records")
    return records


def hole_list(raw_holes: list[dict[str, Any]]) -> str:
    """The prompt's hole lines as the release writes them (direction: the first angle of the record's, else 0)."""
    def direction(value: object) -> int:
        first = str(value or "").split(",")[0].strip()
        return int(first) if first.lstrip("-").isdigit() else 0

    return "\n".join(f"- Shape: {h.get('shape')}, Size: {h.get('size')}, Location: {h.get('location')}, "
                     f"Direction: {direction(h.get('direction'))}" for h in raw_holes)


def step_images(folder: Path, rid: str, fold_types: list[str], where: str) -> tuple[Path, ...]:
    """The 2D images of one record in order: initial sheet, one per step, the punch; a missing one is named."""
    names = [f"{rid}_fold_0_initial.png", *(f"{rid}_fold_{n}_{t}.png" for n, t in enumerate(fold_types, 1)),
             f"{rid}_punching_holes.png"]
    paths = tuple(folder / name for name in names)
    for path in paths:
        if not path.is_file():
            raise BenchmarkLayoutError(f"{where}: image {path} is missing (the release's img_text_map.py writes "
                                       f"{', '.join(names)})")
    return paths


def parse_answer(text: str) -> dict[str, Any] | None:
    """The answer's JSON object (see the module docstring), None when there is none."""
    candidates = _FENCED_JSON.findall(text) + _FENCED.findall(text)
    if not candidates and "{" in text and "}" in text:
        candidates = [text[text.index("{"):text.rindex("}") + 1]]
    for raw in reversed(candidates):
        for attempt in (raw, _TRAILING_COMMA.sub(r"\1", _BARE_CODE.sub(r'"\1"', raw))):
            try:
                obj = json.loads(attempt.strip())
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def predicted_holes(answer: dict[str, Any] | None) -> list[Hole] | None:
    """The answer's holes as written (an entry that is not a hole object still counts, matching nothing); None when
    the answer has no ``resultHoles`` list."""
    raw = (answer or {}).get("resultHoles")
    if not isinstance(raw, list):
        return None
    holes = []
    for h in raw:
        if not isinstance(h, dict):
            holes.append(Hole("", "", "", 0))
            continue
        loc = h.get("location")
        holes.append(Hole(str(h.get("shape", "")).lower(), str(h.get("size", "")).lower(), str(h.get("direction", "")),
                          loc if isinstance(loc, int) and not isinstance(loc, bool) else 0))
    return holes


class MentalBlackboard:
    """The MentalBlackboard adapter (:class:`eval.external.base.Adapter`)."""

    name = "mentalblackboard"
    max_images = 8
    """Initial sheet, up to six steps, the punch."""

    def load(self, data: Path, images: Path | None) -> list[Item]:
        if images is not None and not images.is_dir():
            raise BenchmarkLayoutError(f"--images {images}: not a folder (the release's img_text_outputs folder)")
        items, first = [], None
        for row, record in enumerate(read_records(data), start=1):
            rid = record_id(record, row)
            where = f"--data {data}: record {rid}"
            try:
                steps = read_steps(record, where)
                read_holes(record, "initialHoles", where)
                read_holes(record, "resultHoles", where)
            except FoldError as exc:
                raise BenchmarkLayoutError(str(exc)) from None
            unfolding = record.get("unfoldingTypes")
            if not isinstance(unfolding, list) or not all(isinstance(u, str) for u in unfolding):
                raise BenchmarkLayoutError(f"{where}: unfoldingTypes must be a list of codes such as \"H1-F\"")
            first = first or rid
            prompt = MENTALBLACKBOARD_PREDICTION_TEMPLATE.format(hole_list=hole_list(record["initialHoles"])).strip()
            truth = {"resultHoles": record["resultHoles"], "unfoldingTypes": unfolding,
                     "mode": "2d" if images is not None else "text"}
            if images is None:
                folds = "\n".join(step_sentence(n, s) for n, s in enumerate(steps, 1))
                text = f"\n\n        The paper is folded by the following actions, in order:\n{folds}"
                items.append(Item(rid, prompt.replace(MENTALBLACKBOARD_IMAGE_SENTENCES, text), None, (), truth))
            elif (images / plain_name(rid, where) / "img").is_dir():
                fold_types = [str(f["foldType"]) for f in record["foldingTypes"]]
                items.append(Item(rid, prompt, None, step_images(images / rid / "img", rid, fold_types, where), truth))
        if images is not None and len(items) < row:
            log.info("--images %s holds the images of %d of %d records; the others are not asked", images, len(items),
                     row)
        if not items:
            raise BenchmarkLayoutError(f"--images {images}: no record has its images (expected {images}/{first}/img/"
                                       f"{first}_fold_0_initial.png, as the release's img_text_map.py writes them)")
        return items

    def score(self, items: list[Item], texts: dict[str, str]) -> Scored:
        rows, scores = [], []
        for item in items:
            text = texts.get(item.id, "")
            answer = parse_answer(text)
            unfolding = (answer or {}).get("unfoldingTypes")
            truth = read_holes(item.truth, "resultHoles", item.id)
            score = score_prediction(predicted_holes(answer), truth,
                                     unfolding if isinstance(unfolding, list) else None,
                                     item.truth["unfoldingTypes"], use_direction=item.truth["mode"] == "2d")
            scores.append(score)
            rows.append({"id": item.id, "correct": int(score.exact), "parsed": score.parsed,
                         "scores": {"partial_accuracy": score.partial, "unfolding_exact": int(score.unfolding_exact),
                                    "unfolding_steps": score.unfolding_matched / score.unfolding_steps
                                    if score.unfolding_steps else None,
                                    "extra_holes": int(score.predicted_holes > score.truth_holes),
                                    "missing_holes": int(score.predicted_holes < score.truth_holes),
                                    "chain_words": len(chains.tokens(_chain(text)))}})
        metrics: dict[str, float | int | None] = {k: v for k, v in summarize_scores(scores).items() if k != "n"}
        metrics["unparsed"] = sum(not s.parsed for s in scores)
        outputs = [texts.get(item.id, "") for item in items]
        top, share = chains.opener_share(outputs)
        signals = {"opener": top, "opener_share": share,
                   "chain_words_mean": chains.mean_of(r["scores"]["chain_words"] for r in rows)}
        return Scored("exact_match", metrics, signals, rows, dict(METRIC_NOTES))


def _chain(text: str) -> str:
    """The reasoning before the answer's JSON (the whole text when there is none)."""
    cut = min((i for i in (text.find("```"), text.find("{")) if i >= 0), default=len(text))
    return text[:cut]


METRIC_NOTES: dict[str, str] = {
    "exact_match": "share of records whose holes equal the truth's exactly (no extra, none missing)",
    "partial_accuracy": "matched holes over truth holes plus extra predicted holes, summed over records",
    "extra_holes": "share of records with more predicted holes than true ones",
    "missing_holes": "share of records with fewer predicted holes than true ones",
    "unfolding_exact": "share of records whose unfolding codes equal the truth's, in order",
    "unfolding_steps": "unfolding codes right at their position, over the truth's codes",
    "parsed": "share of records whose answer holds the prompt's JSON with a resultHoles list",
    "unparsed": "records without such an answer (scored as no holes)",
    **{f: f"one-to-one matches on {f} alone over truth holes plus extra ones" for f in FIELDS},
}
