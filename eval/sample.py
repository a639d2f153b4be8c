"""k completions per benchmark scene through a generation engine, resumable (metrics.md section 2).

Modes:

* ``from-trace``: one Object Counting prompt per view (training dialect by default, with the CoT
  system prompt unless disabled); the sub-task answers are parsed from the chain of thought.
* ``independent``: one prompt per sub-task (Type1 dialect by default); task10/task11 send this
  view's image and the partner view's image (``view_{(v+step-1)%4+1}``, same leaf).

Completions are appended to a JSONL file keyed by (view, task, sample index). A resumed run reads
that file first and asks the engine only for the sample indices that are not there yet.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eval.completions import Completion, Key, append_completions, load_completions, repair_tail
from spatialiq_train.core.dataset import View
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.core.tasks import INTEGER_TASKS, Dialect, build_prompt, get_task

log = logging.getLogger(__name__)

Mode = Literal["from-trace", "independent"]
PARTNER_STEP = {"task10": 1, "task11": 2}


GREEDY_BELOW = 1e-5
"""Temperatures below this are greedy decoding (vLLM's ``_SAMPLING_EPS``): one completion, repeated k times."""
MIN_SAMPLING_TEMPERATURE = 1e-2
"""vLLM silently raises a temperature in (0, 0.01) to 0.01 (``_MAX_TEMP`` in vllm/sampling_params.py)."""
MAX_TEMPERATURE = 2.0
"""vLLM >= 0.31 rejects temperatures above 2 (``temperature must be in [0, 2]``)."""


def check_temperature(value: float) -> float:
    """``value`` when both engines sample at exactly that temperature, else ValueError saying what is valid.

    vLLM (vllm/sampling_params.py, 0.31) takes a finite temperature in [0, 2], decodes greedily below 1e-5 and raises
    anything in (0, 0.01) to 0.01 with a warning; transformers would sample at the value given. So the runs agree
    across engines, a temperature in (0, 0.01) is refused rather than changed, and near-zero ones count as 0.
    """
    if not math.isfinite(value) or not 0.0 <= value <= MAX_TEMPERATURE:
        raise ValueError(f"temperature must be in [0, {MAX_TEMPERATURE:g}] (vLLM's bound), got {value}")
    if GREEDY_BELOW <= value < MIN_SAMPLING_TEMPERATURE:
        raise ValueError(f"temperature {value} is below {MIN_SAMPLING_TEMPERATURE:g}, which vLLM raises to "
                         f"{MIN_SAMPLING_TEMPERATURE:g}: pass 0 for greedy decoding or at least "
                         f"{MIN_SAMPLING_TEMPERATURE:g}")
    return 0.0 if value < GREEDY_BELOW else value


class SamplingConfig(BaseModel):
    """Decoding and prompting settings of one sampling run (defaults: the paper's recipe, Appendix H.1)."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "from-trace"
    k: int = Field(10, ge=1)
    temperature: float = 1.0
    """0 (greedy) or [MIN_SAMPLING_TEMPERATURE, MAX_TEMPERATURE]: vLLM's rule (see :func:`check_temperature`)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1)
    dialect: Dialect | None = None
    """Prompt dialect; None = ``training`` for from-trace, ``type1`` for independent."""
    cot_system_prompt: bool = True
    """from-trace only: send the CoT system prompt."""
    tasks: list[str] | None = None
    """independent only: tasks to ask (default: every integer task)."""
    seed: int = 0
    batch_size: int = Field(16, ge=1)

    @field_validator("temperature")
    @classmethod
    def _vllm_temperature(cls, value: float) -> float:
        return check_temperature(value)

    def prompt_dialect(self) -> Dialect:
        if self.dialect is not None:
            return self.dialect
        return "training" if self.mode == "from-trace" else "type1"

    def task_list(self) -> list[str]:
        if self.mode == "from-trace":
            return ["task_main"]
        tasks = self.tasks or list(INTEGER_TASKS)
        return [get_task(t).id for t in tasks]

    def task_prompts(self) -> dict[str, str]:
        """Every task's prompt in the run's dialect, built up front; ValueError names a task the dialect lacks."""
        dialect = self.prompt_dialect()
        prompts: dict[str, str] = {}
        for task in self.task_list():
            try:
                prompts[task] = build_prompt(task, dialect)
            except KeyError:
                raise InputError(
                    f"task {task!r} has no prompt in the {dialect!r} dialect; use --dialect type1 or leave "
                    f"{task} out of --tasks (asked: {', '.join(self.task_list())})"
                ) from None
        return prompts


@dataclass(frozen=True)
class Request:
    """One prompt for one (view, task) and the sample indices still to draw for it."""

    view: str
    task: str
    prompt: str
    system: str | None
    images: tuple[Path | bytes, ...]
    """view.png paths, or PNG bytes for scenes read from parquet."""
    samples: tuple[int, ...]
    seed: int
    """The request's seed (:func:`request_seed`); sample ``i`` is drawn with :func:`sample_seed` of it and ``i``."""

    @property
    def sample_seeds(self) -> tuple[int, ...]:
        """One seed per sample index still to draw: a sample depends on its own seed and index only, so a resume
        that draws some of a request's samples gets the texts an uninterrupted run drew for them."""
        return tuple(sample_seed(self.seed, i) for i in self.samples)


class Engine(Protocol):
    """Generates ``len(request.samples)`` completions for each request, in order."""

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]: ...


def request_seed(base: int, view: str, task: str) -> int:
    """A 63-bit seed derived from the run seed and the request's (view, task) (independent of run order and resumes)."""
    digest = hashlib.sha256(f"{base}|{view}|{task}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def sample_seed(request: int, index: int) -> int:
    """The 63-bit seed of sample ``index`` of a request seeded ``request``: each sample is drawn on its own."""
    digest = hashlib.sha256(f"{request}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def plan_requests(scenes: Sequence[View], config: SamplingConfig, done: set[Key] | dict[Key, object]) -> list[Request]:
    """Requests for every (scene, task) with sample indices not in ``done``; tasks lacking partner views are skipped."""
    system = COT_SYSTEM_PROMPT if config.mode == "from-trace" and config.cot_system_prompt else None
    prompts = config.task_prompts()
    by_view = {s.view: s for s in scenes}
    requests: list[Request] = []
    for scene in scenes:
        for task, prompt in prompts.items():
            missing = tuple(i for i in range(config.k) if (scene.view, task, i) not in done)
            if not missing:
                continue
            images: tuple[Path | bytes, ...] = (scene.image_source,)
            if task in PARTNER_STEP:
                partner_view = scene.partner_view(PARTNER_STEP[task])
                partner = by_view.get(partner_view)
                if partner is not None:
                    images = (scene.image_source, partner.image_source)
                elif (scene.root / partner_view).is_dir():
                    images = (scene.image_source, scene.partner_image(PARTNER_STEP[task]))
                else:
                    log.warning("%s: partner view %s is absent; %s not asked", scene.view, partner_view, task)
                    continue
            requests.append(Request(scene.view, task, prompt, system, images, missing,
                                    request_seed(config.seed, scene.view, task)))
    return requests


@dataclass(frozen=True)
class SamplingReport:
    already_done: int
    requested: int
    written: int


def run_sampling(
    scenes: Sequence[View],
    engine: Engine,
    config: SamplingConfig,
    out_path: str | Path,
    progress: Callable[[int, int], None] | None = None,
) -> SamplingReport:
    """Draw the missing completions batch by batch, appending each batch to ``out_path`` as soon as it returns."""
    return run_requests(lambda done: plan_requests(scenes, config, done), engine, config, out_path, progress)


def run_requests(
    plan: Callable[[dict[Key, Completion]], list[Request]],
    engine: Engine,
    config: SamplingConfig,
    out_path: str | Path,
    progress: Callable[[int, int], None] | None = None,
) -> SamplingReport:
    """The resumable drawing loop: ``plan`` turns the completions already on file into the requests still to ask
    (:func:`plan_requests` for the benchmark's views, an external benchmark's adapter for its items); each engine
    batch is appended to ``out_path`` as soon as it returns."""
    out_path = Path(out_path)
    repair_tail(out_path)
    done = load_completions(out_path)
    requests = plan(done)
    total = sum(len(r.samples) for r in requests)
    log.info("%d completions on file, %d to draw in %d requests", len(done), total, len(requests))
    if config.temperature == 0 and config.k > 1:
        log.info("temperature 0 is greedy: one completion per prompt, repeated k=%d times", config.k)
    written = 0
    for start in range(0, len(requests), config.batch_size):
        batch = requests[start:start + config.batch_size]
        outputs = engine.generate(batch, config)
        if len(outputs) != len(batch):
            raise RuntimeError(f"engine returned {len(outputs)} results for {len(batch)} requests")
        records = []
        for req, texts in zip(batch, outputs, strict=True):
            if len(texts) != len(req.samples):
                raise RuntimeError(f"engine returned {len(texts)} completions for {req.view} {req.task}, "
                                   f"expected {len(req.samples)}")
            records += [Completion(req.view, req.task, i, t) for i, t in zip(req.samples, texts, strict=True)]
        written += append_completions(out_path, records)
        if progress is not None:
            progress(written, total)
    return SamplingReport(len(done), total, written)
