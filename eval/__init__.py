"""Evaluation: k-sample generation, scoring, hierarchy metrics, statistics, reports (docs/eval.md)."""
