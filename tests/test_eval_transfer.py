"""The transfer table of `eval compare --base/--trained`: the paired numbers against hand-computed values, both
result layouts read (an `eval external` folder, the Spatial-IQ eval_raw file with its completions), the table, its
picture and the refusals."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from eval.rawcsv import META_COLUMNS, ResponderTable, write_raw_csv
from eval.transfer import Results, benchmark_rows, length_ratio_to_base, paired_bootstrap, signals_row
from spatialiq_train.cli import app
from spatialiq_train.core.errors import InputError

BASE_OK = [1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
TRAINED_OK = [0, 0, 0, 0, 1, 1, 1, 1, 1, 0]


def test_paired_bootstrap_by_hand() -> None:
    same = paired_bootstrap([0.0, 1.0, 0.5], [0.2, 1.2, 0.7], seed=0)
    assert (same.n, same.base, same.trained) == (3, 0.5, pytest.approx(0.7))
    assert (same.difference, same.ci_low, same.ci_high) == pytest.approx((0.2, 0.2, 0.2))  # every draw: +0.2
    # differences 0 and 1: a draw's mean is 0, 0.5 or 1 (each extreme a quarter of the draws), so the 2.5 % and
    # 97.5 % quantiles are the extremes; the NaN pair is left out
    two = paired_bootstrap([0.0, 0.0, math.nan], [0.0, 1.0, 1.0], seed=3)
    assert (two.n, two.difference, two.ci_low, two.ci_high) == (2, 0.5, 0.0, 1.0)
    spread = np.random.default_rng(0).random((2, 30))
    assert paired_bootstrap(*spread, seed=1) == paired_bootstrap(*spread, seed=1)
    assert paired_bootstrap(*spread, seed=1) != paired_bootstrap(*spread, seed=2)
    assert math.isnan(paired_bootstrap([math.nan], [1.0], seed=0).ci_low)


def test_length_ratio_to_base_by_hand() -> None:
    assert length_ratio_to_base([10, 20, math.nan], [3, 3, 5]) == pytest.approx(0.2)  # (3 + 3) / (10 + 20)
    assert math.isnan(length_ratio_to_base([0, 0], [4, 5])) and math.isnan(length_ratio_to_base([], []))


def _results(benchmark: str, ok: list[int], **kw: object) -> Results:
    return Results(benchmark, "m", f"{benchmark}-src", {f"i{n}": float(v) for n, v in enumerate(ok)}, **kw)


def test_accuracy_row_is_exact_mcnemar_on_the_discordant_pairs() -> None:
    base = _results("b", BASE_OK, scores={"rouge1": {"i0": 0.5, "i1": 0.25}})
    trained = _results("b", TRAINED_OK, scores={"rouge1": {"i0": 0.25, "i1": 0.25, "i9": 1.0}})
    acc, rouge = benchmark_rows(base, trained, seed=0)
    # base only right on i0, i1, i2, i9; trained only on i4: p = 2 P(X <= 1 | 5, 1/2) = 2 (1 + 5) / 32
    assert (acc["n"], acc["base"], acc["trained"], acc["difference"]) == (10, 0.8, 0.5, pytest.approx(-0.3))
    assert (acc["base_only"], acc["trained_only"], acc["p_value"]) == (4, 1, pytest.approx(0.375))
    assert acc["ci_low"] < -0.3 < acc["ci_high"] <= 0.1
    assert (rouge["metric"], rouge["n"], rouge["difference"]) == ("rouge1", 2, pytest.approx(-0.125))
    with pytest.raises(InputError, match="b-src and b-src: no item id in common"):
        benchmark_rows(base, Results("b", "m", "b-src", {"x": 1.0}), seed=0)


def test_signals_pair_chain_lengths_per_item_else_use_the_means() -> None:
    base = _results("b", [1, 1], opener="to count", opener_share=0.5, chain_words={"i0": 40.0, "i1": 60.0})
    trained = _results("b", [1, 1], opener="looking at", opener_share=1.0, chain_words={"i0": 6.0, "i1": 9.0})
    row = signals_row(base, trained)
    assert (row["opener_trained"], row["opener_share_trained"], row["length_ratio"]) == ("looking at", 1.0, 0.15)
    assert (row["chain_words_base"], row["chain_words_trained"]) == (50.0, 7.5)
    means = signals_row(_results("b", [1], chain_words_mean=20.0), _results("b", [1], chain_words_mean=5.0))
    assert means["length_ratio"] == 0.25


def _external(folder: Path, ok: list[int], opener: str, share: float, words: list[int]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"id": f"{n}:img", "correct": v, "scores": {"rouge1": v / 2, "chain_words": w}}
            for n, (v, w) in enumerate(zip(ok, words, strict=True))]
    (folder / "per_item.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "metrics.json").write_text(json.dumps({
        "benchmark": "spatialchain", "model": folder.name, "n": len(ok), "primary": "accuracy",
        "metrics": {"accuracy": sum(ok) / len(ok)}, "per_item": "per_item.jsonl",
        "signals": {"opener": opener, "opener_share": share, "chain_words_mean": sum(words) / len(words)}}))
    return folder


def _spatialiq(folder: Path, name: str, ok: list[int], texts: list[str]) -> tuple[Path, Path]:
    n = len(ok)
    views = [f"level_1/sample_{i:02d}/view_00/offset0_fov60_dist3" for i in range(n)]
    table = ResponderTable(name, views, ["cube"] * n, {c: np.full(n, 4.0) for c in META_COLUMNS},
                           {"main": np.array(ok, dtype=float)}, {"main": np.where(ok, 4.0, 5.0)},
                           {"main": np.full(n, 4.0)})
    folder.mkdir(parents=True)
    write_raw_csv(folder / f"eval_raw_{name}_text.csv", table)
    completions = folder / "completions.jsonl"
    completions.write_text("".join(json.dumps({"view": v, "task": "task_main", "sample": 0, "text": t}) + "\n"
                                   for v, t in zip(views, texts, strict=True)), encoding="utf-8")
    return folder / f"eval_raw_{name}_text.csv", completions


def test_compare_draws_the_transfer_table_across_benchmarks(tmp_path: Path) -> None:
    sc_base = _external(tmp_path / "sc_base", BASE_OK, "the red", 0.3, [20] * 10)
    sc_trained = _external(tmp_path / "sc_trained", TRAINED_OK, "looking at", 1.0, [3] * 10)
    long = "Step one: count the columns. Step two: add them. <answer>4</answer>"
    short = "Looking at it <answer>4</answer>"
    siq_base, siq_base_c = _spatialiq(tmp_path / "siq_base", "base", [1, 0, 1, 1], [long] * 3 + ["Looking"])
    siq_trained, siq_trained_c = _spatialiq(tmp_path / "siq_trained", "trained", [1, 1, 1, 1], [short] * 4)
    out = tmp_path / "table"
    res = CliRunner().invoke(app, ["eval", "compare", "--base", str(siq_base), "--base", str(sc_base),
                                   "--trained", str(sc_trained), "--trained", str(siq_trained.parent),
                                   "--base-completions", str(siq_base_c), "--trained-completions",
                                   str(siq_trained_c), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((out / "transfer.csv").open()))
    assert [(r["benchmark"], r["metric"]) for r in rows] == [
        ("spatialiq", "correct"), ("spatialchain", "correct"), ("spatialchain", "rouge1"),
        ("spatialchain", "chain_words")]
    assert (rows[0]["base"], rows[0]["trained"], rows[0]["trained_only"], rows[0]["p_value"]) == (
        "0.75", "1.0", "1", "1.0")
    assert (rows[1]["base_only"], float(rows[1]["p_value"])) == ("4", 0.375)
    assert float(rows[3]["difference"]) == -17.0
    signals = {r["benchmark"]: r for r in csv.DictReader((out / "transfer_signals.csv").open())}
    # Spatial-IQ from the completions: 3 of 4 base outputs open "step one", every trained one "looking at"; the
    # chains (before the answer tag) are 9 and 1 words, then 3
    assert (signals["spatialiq"]["opener_base"], signals["spatialiq"]["opener_share_base"]) == ("step one", "0.75")
    assert (signals["spatialiq"]["opener_trained"], signals["spatialiq"]["opener_share_trained"]) == (
        "looking at", "1.0")
    assert float(signals["spatialiq"]["length_ratio"]) == pytest.approx(12 / 28)
    assert float(signals["spatialchain"]["length_ratio"]) == pytest.approx(0.15)
    assert "| spatialchain | 10 | 80.0 | 50.0 | -30.0 [" in res.output and "30.0 -> 100.0 (looking at) | 0.15 |" in (
        res.output)
    assert (out / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![transfer](transfer.png)" in (out / "transfer.md").read_text()
    assert list(csv.DictReader((out / "transfer_groups.csv").open())) == []  # no results here carry breakdowns


@pytest.mark.parametrize("args,message", [
    (["--raw", "r", "--base", "b"], "give --raw .* or --base and --trained"),
    (["--base", "{sc}"], "needs --base and --trained .got 1 and 0"),
    (["--base", "{sc}", "--base", "{sc}", "--trained", "{sc}"], "--base: two results for benchmark 'spatialchain'"),
    (["--base", "{sc}", "--trained", "{siq}"], "--trained: no results for benchmark 'spatialchain'"),
    (["--base", "{bad}", "--trained", "{sc}"], "metrics.json: lacks 'per_item'"),
    (["--base", "{sc}", "--trained", "{sc}", "--base-completions", "{sc}/per_item.jsonl"],
     "--base-completions .*: no Spatial-IQ results among --base"),
])
def test_compare_refuses_with_one_line_naming_the_problem(tmp_path: Path, args: list[str], message: str) -> None:
    sc = _external(tmp_path / "sc", BASE_OK, "a b", 0.1, [1] * 10)
    siq, _ = _spatialiq(tmp_path / "siq", "base", [1], ["x"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text(json.dumps({"benchmark": "x", "model": "m", "n": 1, "metrics": {}}))
    filled = [a.format(sc=sc, siq=siq, bad=bad) for a in args]
    res = CliRunner().invoke(app, ["eval", "compare", *filled, "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert len([line for line in res.output.splitlines() if line.strip()]) == 1, res.output
    assert re.search(message, res.output), res.output
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_the_table_reads_what_eval_external_writes(tmp_path: Path) -> None:
    from _external_support import write_spatialchain

    from eval.external.run import write_results
    from eval.external.spatialchain import SpatialChain
    from eval.transfer_io import read_results, summary_markdown, transfer_group_rows, transfer_rows

    root = write_spatialchain(tmp_path / "sc")
    adapter = SpatialChain()
    items = adapter.load(root / "test.csv", root / "images")
    outputs = {"base": ["<think>I see a person and a black fence on the left</think><answer>Yes</answer>",
                        "<think>There are red cans at the right of the boy</think><answer>Yes</answer>", ""],
               "trained": ["Looking at it <answer>Yes</answer>", "Looking at it <answer>No</answer>",
                           "Looking at it <answer>White</answer>"]}
    for side, texts in outputs.items():
        scored = adapter.score(items, {item.id: t for item, t in zip(items, texts, strict=True)})
        write_results(tmp_path / side, "spatialchain", {"model": side}, scored, {})
    rows, signals = transfer_rows([read_results(tmp_path / "base")], [read_results(tmp_path / "trained")],
                                   seed=0)
    acc = rows[0]
    # the two yes/no questions (the colour question has no yes/no label: left out): base right once, trained twice
    assert (acc["benchmark"], acc["n"], acc["base"], acc["trained"], acc["trained_only"]) == (
        "spatialchain", 2, 0.5, 1.0, 1)
    assert {"rouge1", "chain_words"} <= {r["metric"] for r in rows}
    # chains: 11, 10 and 0 words (base) against 3 each ("looking at it"), summed over the three items
    assert signals[0]["opener_trained"] == "looking at" and signals[0]["opener_share_trained"] == 1.0
    assert signals[0]["length_ratio"] == pytest.approx(9 / 21)
    # SpatialChain's breakdowns, paired per group: the column's relations and the hop strata (every fixture
    # question names one relation); the colour question has no accuracy
    groups = {(g["breakdown"], g["group"]): g for g in transfer_group_rows([read_results(tmp_path / "base")],
                                                                           [read_results(tmp_path / "trained")])}
    assert list(groups) == [("relation", "left_of"), ("relation", "right_of"), ("hops", "single")]
    assert [groups["relation", "right_of"][k] for k in ("n", "base", "trained", "trained_only", "p_value")] == [
        1, 0.0, 1.0, 1, 1.0]
    assert [groups["hops", "single"][k] for k in ("n", "base", "trained", "difference")] == [2, 0.5, 1.0, 0.5]
    assert "| spatialchain | hops | single | 2 | 50.0 | 100.0 | 50.0 | 1 | 0 / 1 |" in summary_markdown(
        rows, signals, list(groups.values()))
    per_item = tmp_path / "base" / "per_item.jsonl"
    lines = per_item.read_text().splitlines()
    per_item.write_text("\n".join([json.dumps({k: v for k, v in json.loads(lines[0]).items() if k != "hops"}),
                                   *lines[1:]]))
    with pytest.raises(InputError, match=r"per_item.jsonl:1: 'hops' must be the item's group"):
        read_results(tmp_path / "base")
