"""Pure metric functions: decoding metrics, statistics, hierarchy conventions, breakdowns, trace audits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from eval.breakdowns import breakdown, total_bin_labels
from eval.decoding import decoding_metrics, majority_vote, selected_vote, unbiased_pass_at_k
from eval.faithfulness import trace_audit
from eval.hierarchy import composition, edge_integrity, referential_chain, summary_row, summation_2x2
from eval.rawcsv import META_COLUMNS, ResponderTable
from eval.stats import accuracy, benjamini_hochberg, mcnemar_exact, wilson_interval
from spatialiq_train.core.parsing import trace_self_consistent

nan = math.nan


def test_majority_tie_goes_to_earliest_sample_and_missing_do_not_vote() -> None:
    preds = np.array([
        [3, 5, 5, 3, nan],        # 3 and 5 tie with two votes; 3 appears first
        [nan, 7, 8, 8, 7],        # 7 and 8 tie; 7 first (sample 1)
        [nan, nan, nan, nan, nan],  # nothing votes
        [nan, nan, nan, 4, nan],  # a single vote wins
        [2, 9, 9, 9, 2],
    ], dtype=float)
    np.testing.assert_array_equal(majority_vote(preds), [3, 7, nan, 4, 9])
    gt = np.array([3, 8, 1, 4, 2], dtype=float)
    m = decoding_metrics(preds, gt)
    assert m["maj@5"] == pytest.approx(2 / 5)  # the no-answer scene is wrong
    assert m["acc@1"] == pytest.approx(2 / 5)  # first sample missing in three scenes: wrong, over all scenes
    assert m["acc@1_missing"] == 3 and m["acc@1_n"] == 5
    assert m["coverage@1"] == pytest.approx(2 / 5) and m["acc@1_answered"] == pytest.approx(1.0)
    assert m["n"]["acc@1"] == 5 and m["n"]["acc@1_answered"] == 2
    assert m["pass@5"] == pytest.approx(4 / 5)
    assert m["scenes_without_answer"] == 1 and m["missing_samples"] == 11
    assert "earliest" in m["majority_rule"]


def test_abstaining_does_not_raise_acc_at_1() -> None:
    """The published GLM row: 105 of 3000 correct, 489 unanswered -> 0.035 over n = 3000 (not 105/2511)."""
    gt = np.full(3000, 7.0)
    first = np.full(3000, 3.0)
    first[:105] = 7.0
    first[105:105 + 489] = nan
    m = decoding_metrics(first[:, None], gt)
    assert m["acc@1"] == pytest.approx(0.035) and m["n"]["acc@1"] == 3000
    assert m["acc@1_answered"] == pytest.approx(105 / 2511) and m["n"]["acc@1_answered"] == 2511
    assert m["coverage@1"] == pytest.approx(2511 / 3000)
    answering = first.copy()
    answering[105:105 + 489] = 3.0  # answering the same views wrongly scores the same acc@1
    assert decoding_metrics(answering[:, None], gt)["acc@1"] == m["acc@1"]


def test_validation_accuracy_counts_no_answer_as_wrong() -> None:
    from spatialiq_train.core.metrics import (
        EVAL_ANSWERED_EXACT_MATCH,
        EVAL_COVERAGE,
        EVAL_EXACT_MATCH,
        validation_accuracy,
    )

    v = validation_accuracy([3, None, 5, None], [3, 4, 6, 1])
    assert v == {EVAL_EXACT_MATCH: 0.25, EVAL_COVERAGE: 0.5, EVAL_ANSWERED_EXACT_MATCH: 0.5}
    from _metric_names import is_known

    assert all(is_known(name) for name in v)
    assert math.isnan(validation_accuracy([None], [1])[EVAL_ANSWERED_EXACT_MATCH])
    with pytest.raises(ValueError, match="1 answers but 2"):
        validation_accuracy([1], [1, 2])


def _brute_pass_at_k(correct: list[bool], k: int) -> float:
    combos = list(itertools.combinations(range(len(correct)), k))
    return sum(any(correct[i] for i in c) for c in combos) / len(combos)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_unbiased_pass_at_k_equals_subset_enumeration(correct: list[bool], data: st.DataObject) -> None:
    n = len(correct)
    k = data.draw(st.integers(1, n))
    assert unbiased_pass_at_k(np.array([sum(correct)]), n, k) == pytest.approx(_brute_pass_at_k(correct, k))


def test_pass_at_n_equals_pass_at_k_and_pass_at_1_is_mean_accuracy() -> None:
    rng = np.random.default_rng(0)
    preds = rng.integers(0, 3, size=(200, 10)).astype(float)
    gt = np.zeros(200)
    m = decoding_metrics(preds, gt)
    curve = m["pass@k_unbiased"]
    assert curve["10"] == pytest.approx(m["pass@10"])
    assert curve["1"] == pytest.approx(float((preds == 0).mean()))
    assert all(curve[str(j)] <= curve[str(j + 1)] + 1e-12 for j in range(1, 10))


def test_selected_vote_prefers_verified_samples_and_falls_back() -> None:
    preds = np.array([[5, 5, 5, 6, 6], [1, 1, 2, 2, 2]], dtype=float)
    scores = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=float)
    np.testing.assert_array_equal(selected_vote(preds, scores), [6, 2])


def test_wilson_matches_published_value() -> None:
    lo, hi = wilson_interval(2464, 3000)  # Human Object Counting, table 6
    assert lo == pytest.approx(0.8072168978202137, abs=1e-12)
    assert hi == pytest.approx(0.8346278652325387, abs=1e-12)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    a = accuracy(np.array([1, 0, nan, 1]))
    assert (a.n, a.n_correct, a.n_missing) == (3, 2, 1)
    assert a.binom_se == pytest.approx(math.sqrt(2 / 3 * 1 / 3 / 3))


def test_mcnemar_exact_matches_binomial_test() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, 300).astype(float)
    b = np.where(rng.random(300) < 0.2, 1 - a, a)
    b[:5] = nan
    r = mcnemar_exact(a, b)
    assert r.n == 295
    expected = binomtest(r.a_only, r.a_only + r.b_only, 0.5).pvalue
    assert r.p_value == pytest.approx(expected)
    assert mcnemar_exact(a, a).p_value == 1.0


def test_benjamini_hochberg_known_values() -> None:
    p = [0.01, 0.04, 0.03, 0.005, nan]
    adj = benjamini_hochberg(p)
    np.testing.assert_allclose(adj[:4], [0.02, 0.04, 0.04, 0.02])
    assert math.isnan(adj[4])


def _table(correct: dict[str, list[float]], pred: dict[str, list[float]] | None = None,
           gt: dict[str, list[float]] | None = None) -> ResponderTable:
    n = len(next(iter(correct.values())))
    pred = pred or {t: [nan] * n for t in correct}
    gt = gt or {t: [nan] * n for t in correct}
    return ResponderTable(
        "toy", [f"v{i}" for i in range(n)], ["cube"] * n, {c: np.full(n, 4.0) for c in META_COLUMNS},
        {t: np.array(v, dtype=float) for t, v in correct.items()},
        {t: np.array(pred.get(t, [nan] * n), dtype=float) for t in correct},
        {t: np.array(gt.get(t, [nan] * n), dtype=float) for t in correct},
    )


def test_conventions_differ_as_defined() -> None:
    # P = task2, C = task6: rows (P, C) = (1,1), (1,0), (0,1), (1,1), (nan,1)
    t = _table({"task2": [1, 1, 0, 1, nan], "task6": [1, 0, 1, 1, 1], "task7": [1, 1, 1, 1, 1]})
    assert edge_integrity(t, "task2", "task6", "prerequisite_given_dependent") == pytest.approx(2 / 3)
    assert edge_integrity(t, "task2", "task6", "dependent_given_prerequisite") == pytest.approx(2 / 3)
    # task6 -> task7: C always 1; P|C = mean(task6) over 5 rows = 4/5; C|P = 1 over the 4 rows with task6 = 1
    assert edge_integrity(t, "task6", "task7", "prerequisite_given_dependent") == pytest.approx(4 / 5)
    assert edge_integrity(t, "task6", "task7", "dependent_given_prerequisite") == pytest.approx(1.0)
    # pooled under P|C: testable 3 + 5 = 8, violations 1 + 1 = 2
    assert referential_chain(t, "prerequisite_given_dependent") == pytest.approx(1 - 2 / 8)
    assert referential_chain(t, "dependent_given_prerequisite") == pytest.approx((2 / 3 + 1.0) / 2)


def test_support_bundle_undefined_edge_rules() -> None:
    # task4 never correct: edge task4 -> task5 undefined under C|P; task5 never correct: undefined under P|C
    t = _table({"task3": [1, 1, 0], "task4": [0, 0, 0], "task5": [0, 1, 0], "task7": [1, 1, 1],
                "task8": [0, 0, 0], "main": [1, 0, 0]})
    pgd = summary_row(t, "prerequisite_given_dependent")
    dgp = summary_row(t, "dependent_given_prerequisite")
    assert math.isnan(pgd["visible_support"]) is False and pgd["visible_support"] == pytest.approx((1 + 0) / 2)
    assert dgp["visible_support"] == pytest.approx(0.5)  # only task3 -> task5 is defined: 1 of 2
    assert math.isnan(pgd["hidden_support"])  # task8 never correct
    assert dgp["hidden_support"] == pytest.approx(0.0)


def test_summation_cells_and_composition_on_toy_rows() -> None:
    corr = {"task5": [1, 1, 0, 0, 1], "task8": [1, 0, 1, 0, 1], "main": [1, 0, 0, 1, nan]}
    pred = {"task5": [5, 5, 6, 2, 5], "task8": [1, 3, 2, 0, 1], "main": [6, 7, 9, 9, nan]}
    gt = {"task5": [5, 5, 5, 5, 5], "task8": [1, 1, 2, 1, 1], "main": [6, 6, 7, 9, 6]}
    t = _table(corr, pred, gt)
    cells = {c["cell"]: c for c in summation_2x2(t)}
    assert cells["V+ H+"]["n"] == 1 and cells["V+ H+"]["main_accuracy"] == 1.0
    assert cells["V- H-"]["main_correct"] == 1 and cells["V+ H-"]["main_accuracy"] == 0.0
    assert cells["V+ H+"]["overall_n"] == 4
    comp = composition(t)
    # residuals: 0-(0+0)=0, 1-(0+2)=-1, 2-(1+0)=1, 0-(-3-1)=4
    assert comp["n"] == 4 and comp["exact_match_rate"] == pytest.approx(0.25)
    assert comp["mean_absolute_residual"] == pytest.approx(1.5) and comp["residual_bias"] == pytest.approx(1.0)
    assert comp["both_wrong_n"] == 1 and comp["both_wrong_exact_match_rate"] == 0.0
    flat = _table(corr, {**pred, "main": [6, 6, 6, 6, nan]}, gt)
    assert math.isnan(composition(flat)["prediction_correlation_r"])  # constant vector: undefined


def test_breakdown_bins() -> None:
    labels = total_bin_labels(np.array([4, 8, 9, 13, 25, 26, 40, 3], dtype=float))
    assert labels.tolist() == ["4-8", "4-8", "9-12", "13-18", "19-25", "26+", "26+", "<4"]
    rows = breakdown(np.array([1, 0, 1, 1, 0, 1, 1, 0], dtype=float), labels)
    assert [r["bin"] for r in rows] == ["<4", "4-8", "9-12", "13-18", "19-25", "26+"]
    assert rows[1]["accuracy"] == 0.5 and rows[-1]["n"] == 2


def test_trace_audit_shortcut_and_self_consistency() -> None:
    answer = np.array([[9, 9], [5, nan]], dtype=float)
    gt = np.array([9, 5], dtype=float)
    sub = {"task5": np.array([[7, 7], [5, nan]], dtype=float)}
    sub_gt = {"task5": np.array([7, 4], dtype=float)}
    # self-consistency as parsing.trace_self_consistent gives it: totals 7 + 2, 7 + 1, 5 + 0, none
    consistency = np.array([[trace_self_consistent(9, (7, 2, 9)), trace_self_consistent(9, (7, 1, 8))],
                            [trace_self_consistent(5, (5, 0, 5)), nan]], dtype=float)
    assert consistency.tolist()[0] == [1.0, 0.0]
    out = trace_audit(answer, gt, sub, sub_gt, consistency)
    allr = out["all_samples"]
    # correct traces: (0,0) ok, (0,1) answer 9 != 7+1 -> shortcut, (1,0) task5 wrong -> shortcut
    assert allr["correct_traces"] == 3 and allr["shortcut_rate"] == pytest.approx(2 / 3)
    assert allr["self_consistency_rate"] == pytest.approx(2 / 4)
    assert allr["traces_without_total_or_answer"] == 1
    assert out["first_sample"]["shortcut_rate"] == pytest.approx(1 / 2)


def _reference_majority(row: list[float]) -> float:
    counts: dict[float, int] = {}
    first: dict[float, int] = {}
    for i, v in enumerate(row):
        if not math.isnan(v):
            counts[v] = counts.get(v, 0) + 1
            first.setdefault(v, i)
    if not counts:
        return nan
    return min(counts, key=lambda v: (-counts[v], first[v]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(0, 4).map(float), st.just(nan)), min_size=6, max_size=6),
                min_size=1, max_size=12))
def test_majority_vote_matches_reference(rows: list[list[float]]) -> None:
    got = majority_vote(np.array(rows))
    expected = [_reference_majority(r) for r in rows]
    np.testing.assert_array_equal(got, expected)


def test_pairwise_mcnemar_aligns_views_by_name() -> None:
    from eval.compare import pairwise_mcnemar

    rng = np.random.default_rng(5)
    a = _table({"main": rng.integers(0, 2, 40).astype(float).tolist()})
    b = _table({"main": rng.integers(0, 2, 40).astype(float).tolist()})
    order = rng.permutation(40)
    shuffled = ResponderTable("b", [b.views[i] for i in order], ["cube"] * 40, b.meta,
                              {"main": b.correct["main"][order]}, b.pred, b.gt)
    direct = pairwise_mcnemar({"a": a, "b": b})[0]
    aligned = pairwise_mcnemar({"a": a, "b": shuffled})[0]
    assert direct["p_value"] == aligned["p_value"] and direct["a_only"] == aligned["a_only"]
    expected = mcnemar_exact(a.correct["main"], b.correct["main"])
    assert direct["a_only"] == expected.a_only and direct["p_bh"] == pytest.approx(expected.p_value)
