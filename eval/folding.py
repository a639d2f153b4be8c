"""Evaluation of the paper-folding task family: sampling requests for generated tasks, reading answers (ours and
the release's JSON), and the paper's metrics over completion files (``spatialiq fold sample`` / ``fold score``).

Truth comes from records in the release's schema: a JSON list of records (the release's 900 prediction records,
or any file ``spatialiq fold simulate`` reads) or a dataset written by ``spatialiq fold gen``. A completion file
holds one JSON object per line: ``id`` (the record's), ``sample`` (its index) and ``completion`` (the text).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.sample import Request, request_seed
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.folding import FoldError, Hole
from spatialiq_train.core.folding_answers import parse_holes, parse_unfolding, task_prompt
from spatialiq_train.core.folding_holes import covered_locations, fold_steps
from spatialiq_train.core.folding_metrics import FoldingScore, score_prediction, summarize_scores
from spatialiq_train.core.folding_records import read_hole, read_holes, read_steps, record_id
from spatialiq_train.core.io import loads_json, read_text

Truth = dict[str, tuple[list[Hole], list[str]]]
"""Record id -> (result holes, unfolding codes)."""


def truth_of(records: Iterable[Mapping[str, Any]]) -> Truth:
    """Each record's ``resultHoles`` and ``unfoldingTypes`` by id; a malformed record is an error naming it."""
    out: Truth = {}
    for row, rec in enumerate(records, 1):
        rid = record_id(rec, row)
        holes = read_holes(rec, "resultHoles", f"record {rid}")
        unfolding = rec.get("unfoldingTypes")
        if not isinstance(unfolding, list):
            raise InputError(f"record {rid}: unfoldingTypes must be a list of codes like H1-F")
        out[rid] = (holes, [str(u) for u in unfolding])
    return out


def _release_location(raw: Any) -> int | None:
    if isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, int) for x in raw):
        r, c, t = raw
        return r * 8 + c * 2 + t + 1 if 0 <= r < 4 and 0 <= c < 4 and t in (0, 1) else None
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


_MAX_OBJECT_STARTS = 256
"""How many ``{`` positions, from the end of a completion, are tried as the start of the release's JSON answer (each
try parses one object, so a completion full of braces costs at most this many linear passes)."""


def parse_release_answer(text: str) -> tuple[list[Hole] | None, list[str] | None]:
    """An answer in the release's JSON form (``{"resultHoles": [...], "unfoldingTypes": [...]}``, location 1-32 or
    ``[row, column, triangle]``): the last such object in the text, else (None, None). Never raises."""
    if not isinstance(text, str):
        return None, None
    decoder = json.JSONDecoder()
    pos = len(text)
    for _ in range(_MAX_OBJECT_STARTS):
        pos = text.rfind("{", 0, pos)
        if pos < 0:
            break
        try:
            obj, _ = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            continue
        if isinstance(obj, dict) and "resultHoles" in obj:
            return _release_holes(obj.get("resultHoles")), _codes(obj.get("unfoldingTypes"))
    return None, None


def _release_holes(raw: Any) -> list[Hole] | None:
    if not isinstance(raw, list):
        return None
    holes = []
    for h in raw:
        if not isinstance(h, dict):
            return None
        loc = _release_location(h.get("location"))
        try:
            holes.append(read_hole({**h, "location": loc, "direction": h.get("direction", "")}, "answer"))
        except FoldError:
            return None
    return holes


def _codes(raw: Any) -> list[str] | None:
    return [str(c) for c in raw] if isinstance(raw, list) else None


def parse_answer(text: str) -> tuple[list[Hole] | None, list[str] | None]:
    """Holes and unfolding codes of a completion: our tags (docs/folding.md), else the release's JSON form."""
    holes = parse_holes(text)
    if holes is not None:
        return holes, parse_unfolding(text)
    return parse_release_answer(text)


def read_completions(path: Path) -> list[dict[str, Any]]:
    """The completion file's rows as ``id``, ``sample``, ``completion``: `spatialiq fold sample`'s lines (``view``,
    ``task``, ``sample``, ``text``, as `eval sample` writes them) or lines of ``id`` and ``completion``; a bad line
    names the file and line."""
    rows = []
    for n, line in enumerate(read_text(path, "completion file").splitlines(), 1):
        if not line.strip():
            continue
        row = loads_json(line, f"{path}:{n}", one_line=True)
        if isinstance(row, dict) and "view" in row and "id" not in row:
            row = {"id": row["view"], "sample": row.get("sample", 0), "completion": row.get("text")}
        if not isinstance(row, dict) or not isinstance(row.get("completion"), str) or "id" not in row:
            raise InputError(f"{path}:{n}: expected an object with 'id' and a 'completion' string (or 'view' and "
                             "'text', as `spatialiq fold sample` writes)")
        rows.append(row)
    return rows


def score_completions(
    truth: Truth, rows: Sequence[Mapping[str, Any]], use_direction: bool = True
) -> tuple[list[FoldingScore], dict[str, float]]:
    """Every completion scored against its record (a record without a completion counts as no answer), and the
    paper's table over them; an id the truth does not have is an error."""
    scores: list[FoldingScore] = []
    answered: set[str] = set()
    for row in rows:
        rid = str(row["id"])
        if rid not in truth:
            raise InputError(f"completion for id {rid!r}: no such record in the truth")
        answered.add(rid)
        holes, unfolding = parse_answer(str(row["completion"]))
        scores.append(score_prediction(holes, truth[rid][0], unfolding, truth[rid][1], use_direction))
    scores += [
        score_prediction(None, h, None, u, use_direction) for rid, (h, u) in truth.items() if rid not in answered
    ]
    return scores, summarize_scores(scores)


def record_prompt(record: Mapping[str, Any], where: str) -> str:
    """Our text of a record's task (:func:`spatialiq_train.core.folding_answers.task_prompt`), from its folds and
    initial holes: how ``fold sample --records`` asks a model the release's questions in our answer format."""
    steps = read_steps(record, where)
    punches = read_holes(record, "initialHoles", where)
    return task_prompt(steps, punches, covered_locations(fold_steps(steps)))


def record_requests(
    records: Sequence[Mapping[str, Any]], k: int, seed: int, images: Path | None = None
) -> list[Request]:
    """Sampling requests for records in the release's schema: the text of each, with ``IMAGES/<id>.png`` when an
    image folder is given (the user's own pictures of the release's 2D modality), else text only."""
    out = []
    for row, rec in enumerate(records, 1):
        rid = record_id(rec, row)
        shown: tuple[Path, ...] = ()
        if images is not None:
            path = images / f"{rid}.png"
            if not path.is_file():
                raise InputError(f"--images {images}: no {path.name} for record {rid}")
            shown = (path,)
        prompt = record_prompt(rec, f"record {rid}")
        out.append(Request(rid, "folding", prompt, None, shown, tuple(range(k)), request_seed(seed, rid, "folding")))
    return out


def task_requests(tasks: Iterable[tuple[Path, Mapping[str, Any]]], k: int, seed: int) -> list[Request]:
    """Sampling requests for generated tasks: each task's prompt and sheet image, ``k`` samples each."""
    out = []
    for folder, rec in tasks:
        rid = str(rec.get("id"))
        prompt = rec.get("prompt")
        if not isinstance(prompt, str):
            raise InputError(f"{folder / 'record.json'}: no 'prompt' text (write the task with `spatialiq fold gen`)")
        image = folder / str(rec.get("image", "sheet.png"))
        out.append(Request(rid, "folding", prompt, None, (image,), tuple(range(k)), request_seed(seed, rid, "folding")))
    return out
