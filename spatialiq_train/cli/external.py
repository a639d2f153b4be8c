"""`spatialiq eval external NAME`: a checkpoint scored on an external benchmark (docs/transfer.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from eval.external.judge import JudgeConfig

log = logging.getLogger(__name__)


def external(
    name: str = typer.Argument(..., help="Benchmark: spatialchain or mentalblackboard."),
    data: Path = typer.Option(..., "--data", help="The benchmark's file (your local copy; nothing is downloaded)."),
    model: Path = typer.Option(..., "--model", help="Checkpoint folder (HF format, safetensors) or hub id."),
    out: Path = typer.Option(..., "--out", help="Output folder: completions, metrics.json, per_item.jsonl, "
                             "report.md (a rerun resumes)."),
    images: Path | None = typer.Option(None, "--images", help="The benchmark's image folder (SpatialChain: the GQA "
                                       "images; MentalBlackboard: the 2D images, else the text prompts are used)."),
    engine: str = typer.Option("auto", "--engine", help="auto (vLLM when installed), vllm or transformers."),
    device: str = typer.Option("cpu", "--device", help="transformers engine device."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 is greedy decoding."),
    top_p: float = typer.Option(1.0, "--top-p"),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens"),
    seed: int = typer.Option(0, "--seed"),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N items (smoke runs)."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Requests per engine call (default 256 with "
                                          "vLLM, 4 otherwise)."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", help="vLLM GPUs per model."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="vLLM context length."),
    judge_url: str | None = typer.Option(None, "--judge-url", help="SpatialChain's LLM judge: base URL of an "
                                         "OpenAI-compatible endpoint (e.g. http://host:8000/v1)."),
    judge_model: str | None = typer.Option(None, "--judge-model", help="The judge's model name at --judge-url."),
    judge_api_key_env: str | None = typer.Option(None, "--judge-api-key-env", help="Environment variable holding "
                                                 "the judge's API key (never stored)."),
    judge_workers: int = typer.Option(4, "--judge-workers", min=1, help="Judge requests in flight at once."),
) -> None:
    """Score a checkpoint on an external benchmark with its own prompts and metrics; a rerun resumes."""
    from pydantic import ValidationError

    from eval.engines import check_device
    from eval.external import get_adapter
    from eval.external.run import external_config
    from spatialiq_train.cli.options import option_errors
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.io import check_model_source
    from spatialiq_train.core.lock import output_lock

    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}; leave it out for every item")
    if (judge_url is None) != (judge_model is None):
        raise UserError("--judge-url and --judge-model go together (the endpoint and the model it serves)")
    judge = None
    if judge_url is not None:
        from eval.external.judge import JudgeConfig

        judge = JudgeConfig(judge_url, judge_model or "", judge_api_key_env, workers=judge_workers)
    adapter = get_adapter(name)
    if judge_url is not None and not hasattr(adapter, "judge_prompts"):
        raise UserError(f"--judge-url: {name} has no LLM judge (SpatialChain's Appendix F judge only)")
    check_device(device, engine)
    try:
        config = external_config(temperature, top_p, max_new_tokens, seed, batch_size)
    except ValidationError as exc:
        raise UserError(option_errors(exc)) from None
    every = adapter.load(data, images)
    check_model_source(model, "--model")
    with output_lock(out, "--out"):
        _run_locked(adapter, every, every[:limit], data, model, out, config, engine, device,
                    tensor_parallel_size, max_model_len, judge)


def _run_locked(adapter, every: list, items: list, data: Path, model: Path, out: Path, config,  # noqa: ANN001
                engine: str, device: str, tensor_parallel_size: int, max_model_len: int | None,
                judge: JudgeConfig | None) -> None:
    """Sampling (resumed, provenance-checked), scoring, the optional judge and the result files."""
    from eval.completions import load_completions
    from eval.external.base import data_record
    from eval.external.run import COMPLETIONS, JUDGE, plan_item_requests, read_texts, write_results
    from eval.provenance import check_provenance, sampling_record
    from spatialiq_train.core.weights import check_finite_weights

    completions = out / COMPLETIONS
    if Path(model).is_dir():
        check_finite_weights(model, "--model")
    record = sampling_record(model, config, data_record(adapter.name, data, every))
    check_provenance(completions, record, bool(load_completions(completions)))
    if plan_item_requests(items, adapter.name, config, load_completions(completions)):
        _sample(adapter, items, model, completions, record, config, engine, device, tensor_parallel_size,
                max_model_len)
    texts = read_texts(completions, adapter.name, items)
    scored = adapter.score(items, texts)
    if judge is not None:
        from eval.external.judge import JUDGE_NOTES, judge_metrics, run_judge

        verdicts = run_judge(judge, adapter.judge_prompts(items, texts), out / JUDGE)
        scored.metrics.update(judge_metrics(scored.rows, verdicts))
        scored.notes.update(JUDGE_NOTES)
    path = write_results(out, adapter.name, record, scored, record)
    shown = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in scored.metrics.items() if k in (scored.primary, "unparsed", "n_binary"))
    typer.echo(f"{path}: {adapter.name} n={len(scored.rows)}  {shown}")


def _sample(adapter, items: list, model: Path, completions: Path, record: dict, config,  # noqa: ANN001
            engine: str, device: str, tensor_parallel_size: int, max_model_len: int | None) -> None:
    """Load the engine, write the provenance record, draw the missing completions."""
    from eval.engines import VLLMEngine, default_max_model_len, make_engine
    from eval.external.run import plan_item_requests
    from eval.provenance import write_provenance
    from eval.sample import run_requests
    from spatialiq_train.cli.steps import on_interrupt

    gen_engine = make_engine(engine, model, tensor_parallel_size=tensor_parallel_size, device=device,
                             max_model_len=max_model_len or default_max_model_len(config.max_new_tokens),
                             max_images=adapter.max_images)
    write_provenance(completions, record)  # every check passed and the engine loaded: only now is anything written
    on_interrupt(f"every finished batch is kept in {completions}; rerun the same command to draw the rest")
    if "batch_size" not in config.model_fields_set:
        config = config.model_copy(update={"batch_size": 256 if isinstance(gen_engine, VLLMEngine) else 4})
    report = run_requests(lambda done: plan_item_requests(items, adapter.name, config, done), gen_engine, config,
                          completions, progress=lambda done, total: log.info("%d/%d completions", done, total))
    typer.echo(f"{completions}: {report.already_done} already on file, {report.written} written")


def register(eval_app: typer.Typer) -> None:
    """Add `eval external` to the eval command group."""
    eval_app.command("external")(external)
