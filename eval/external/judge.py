"""The optional LLM judge of SpatialChain (section 4.3, Appendix F) through any OpenAI-compatible endpoint.

Each item's judge call is one chat completion (``POST URL/chat/completions``, temperature 0) with the paper's rubric
as the system turn and its input block as the user turn (:mod:`eval.external.prompts`). The reply must be exactly
the rubric's JSON object — three numbers in [0, 1] under the three keys, nothing else, no fences — or the item's
verdict is recorded as invalid (counted, never read as zeros). Verdicts are appended to ``OUT/judge.jsonl`` as they
come, so a rerun asks only for the items still missing.

Names: the judge's shortcut rate is ``judged_shortcut_rate`` (correct answers whose chain the judge scores at most
0.5 for faithfulness, the paper's inclusive cutoff); the project's own ``shortcut_rate`` (eval.faithfulness) is an
exact rule on the benchmark's ground truth and a different quantity.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.external.spatialchain_breakdown import hop_faithfulness
from spatialiq_train.core.errors import UserError

JUDGE_KEYS: tuple[str, ...] = ("answer_correctness", "reasoning_faithfulness", "reasoning_completeness")
SHORTCUT_FAITHFULNESS = 0.5
"""A correct answer whose faithfulness is at most this is a judged shortcut (section 6.5: inclusive)."""
PASS_THRESHOLD = 0.5
"""Pass: answer_correctness >= 0.5 and mean of faithfulness and completeness >= 0.5 (Table 4)."""


class JudgeReplyError(ValueError):
    """A judge reply that is not the rubric's JSON object."""


@dataclass(frozen=True)
class JudgeConfig:
    url: str
    """The endpoint's base URL, e.g. http://host:8000/v1 (``/chat/completions`` is appended)."""
    model: str
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (the key itself is never stored or logged)."""
    timeout: float = 120.0
    workers: int = 4
    """Requests in flight at once (``--judge-workers``): the 899 test items one at a time take an hour at a few
    seconds a reply."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UserError(f"--judge-workers must be at least 1, got {self.workers}")


def parse_verdict(content: str) -> dict[str, float]:
    """The three scores of a reply that is exactly the rubric's JSON object; JudgeReplyError says what is wrong."""
    try:
        obj = json.loads(content.strip())
    except ValueError:
        raise JudgeReplyError(f"not JSON: {content.strip()[:80]!r}") from None
    if not isinstance(obj, dict):
        raise JudgeReplyError(f"not a JSON object: {type(obj).__name__}")
    if set(obj) != set(JUDGE_KEYS):
        raise JudgeReplyError(f"keys {sorted(obj)}; the rubric asks for exactly {', '.join(JUDGE_KEYS)}")
    scores = {}
    for key in JUDGE_KEYS:
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or not 0.0 <= value <= 1.0:
            raise JudgeReplyError(f"{key} must be a number in [0, 1], got {value!r}")
        scores[key] = float(value)
    return scores


def ask(config: JudgeConfig, system: str, user: str) -> str:
    """The judge's reply text for one item (``choices[0].message.content``); a UserError names the URL when the
    endpoint cannot be reached or answers in another shape."""
    body = {"model": config.model, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    headers = {"Content-Type": "application/json"}
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if not key:
            raise UserError(f"--judge-api-key-env {config.api_key_env}: that environment variable is not set")
        headers["Authorization"] = f"Bearer {key}"
    url = config.url.rstrip("/") + "/chat/completions"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as response:
            reply = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise UserError(f"--judge-url {config.url}: {url} answered HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise UserError(f"--judge-url {config.url}: cannot reach {url} ({exc}); is the judge served there?") from None
    except ValueError:
        raise UserError(f"--judge-url {config.url}: {url} did not answer JSON") from None
    try:
        return str(reply["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        raise UserError(f"--judge-url {config.url}: the reply has no choices[0].message.content (an "
                        "OpenAI-compatible chat completions endpoint answers with one)") from None


def read_verdicts(path: Path) -> dict[str, dict[str, Any]]:
    """The verdicts on file by item id (the first of each id; a cut last line is ignored)."""
    if not path.is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by an interrupted run: that item is asked again
        if isinstance(rec, dict) and isinstance(rec.get("id"), str):
            out.setdefault(rec["id"], rec)
    return out


def run_judge(config: JudgeConfig, prompts: dict[str, tuple[str, str]], path: Path,
              ask_one: Callable[[JudgeConfig, str, str], str] = ask) -> dict[str, dict[str, Any]]:
    """Every item's verdict (``{"id", "scores" | None, "error"?}``), asking only for the ids not yet in ``path``,
    ``config.workers`` at a time. Each verdict is appended as its reply arrives (the file's order is the replies'),
    so an interrupted run keeps what came back; a failed request stops the rest (not yet asked ones are cancelled)
    and raises."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm import tqdm

    verdicts = read_verdicts(path)
    todo = [(item_id, pair) for item_id, pair in prompts.items() if item_id not in verdicts]
    path.parent.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="judge")
    try:
        futures = {pool.submit(ask_one, config, system, user): item_id for item_id, (system, user) in todo}
        for future in tqdm(as_completed(futures), total=len(futures), desc="judge", unit="item",
                           disable=not futures):
            item_id = futures[future]
            try:
                rec: dict[str, Any] = {"id": item_id, "scores": parse_verdict(future.result())}
            except JudgeReplyError as exc:
                rec = {"id": item_id, "scores": None, "error": str(exc)}
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")
            verdicts[item_id] = rec
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return {k: verdicts[k] for k in prompts}


def judge_metrics(rows: list[dict[str, Any]], verdicts: dict[str, dict[str, Any]]) -> dict[str, float | int | None]:
    """Means of the three judge scores, pass rate and ``judged_shortcut_rate`` over the valid verdicts; each row's
    ``scores`` gains its ``judge_*`` values (None when its verdict is invalid)."""
    valid = []
    for row in rows:
        scores = (verdicts.get(row["id"]) or {}).get("scores")
        for key in JUDGE_KEYS:
            row["scores"][f"judge_{key}"] = scores[key] if scores else None
        if scores:
            valid.append((row, scores))

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    correct = [s for r, s in valid if r["correct"] == 1]
    passed = [s["answer_correctness"] >= PASS_THRESHOLD
              and (s["reasoning_faithfulness"] + s["reasoning_completeness"]) / 2 >= PASS_THRESHOLD for _, s in valid]
    by_hops = hop_faithfulness(rows) if rows and all("hops" in r for r in rows) else {}
    return {"judge_n": len(valid), "judge_invalid": len(rows) - len(valid),
            "judge_answer_correctness": mean([s["answer_correctness"] for _, s in valid]),
            "judge_faithfulness": mean([s["reasoning_faithfulness"] for _, s in valid]),
            "judge_completeness": mean([s["reasoning_completeness"] for _, s in valid]),
            "judge_pass_rate": mean([float(p) for p in passed]),
            "judged_shortcut_rate": mean([float(s["reasoning_faithfulness"] <= SHORTCUT_FAITHFULNESS)
                                          for s in correct]), **by_hops}


JUDGE_NOTES: dict[str, str] = {
    "judge_faithfulness": "mean reasoning_faithfulness the judge gave (Appendix F rubric)",
    "judge_completeness": "mean reasoning_completeness the judge gave",
    "judge_answer_correctness": "mean answer_correctness the judge gave",
    "judge_pass_rate": "share with answer_correctness >= 0.5 and (faithfulness + completeness) / 2 >= 0.5",
    "judged_shortcut_rate": "share of correct answers whose faithfulness the judge scored <= 0.5 (not the "
                            "project's exact shortcut_rate)",
    "judge_invalid": "items whose judge reply was not the rubric's JSON object (left out of the means)",
    "judge_faithfulness_single_hop": "mean faithfulness on questions naming one relation (Table 18's RF single)",
    "judge_faithfulness_multi_hop": "mean faithfulness on questions chaining two or more (Table 18's RF multi)",
    "judge_faithfulness_ambiguous_hop": "mean faithfulness on questions whose hop count the text leaves open",
    "judge_faithfulness_hop_delta": "multi - single (Table 18's RF delta)",
}
