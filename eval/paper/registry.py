"""The 24 text-side tables: file name, responder group, builder, columns (the official files' column order) and
the columns that identify a row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eval.paper import accuracy, camera, correlations, dependency, mechanism
from eval.paper.common import Group

Row = dict[str, object]
MODEL_COLUMNS = ("group", "model", "display_name")
SUMMARY = ("model", "display_name", "object_count", "visible_count", "hidden_count", "referential_chain",
           "visible_support", "hidden_support", "summation_mechanism", "mental_rotation_mean")
WILSON = ("ci_low_wilson", "ci_high_wilson")
TASK_ACCURACY = (*MODEL_COLUMNS, "task", "source_task", "task_name", "accuracy", "n_correct", "n_incorrect", "n",
                 "binom_se", *WILSON, "chance_level", "chance_adjusted_accuracy", "chance_adjusted_ci_low",
                 "chance_adjusted_ci_high", "above_chance_p")
SUMMATION = (*MODEL_COLUMNS, "visible_correct", "hidden_correct", "cell", "main_accuracy", "main_correct",
             "main_incorrect", "n", "share_of_scenes", "overall_main_accuracy", "overall_main_correct", "overall_n")
COMPOSITION = (*MODEL_COLUMNS, "prediction_correlation_r", "prediction_correlation_p", "exact_match_rate",
               "both_wrong_exact_match_rate", "mean_absolute_residual", "residual_bias", "both_wrong_n", "n")
OBJECTS = (*MODEL_COLUMNS, "object_type", "accuracy", "n_correct", "n_incorrect", "n", *WILSON,
           "chance_adjusted_accuracy")


@dataclass(frozen=True)
class TableSpec:
    name: str
    group: str | None
    """Responder group the table is computed over (None: no responder data, Table 5)."""
    build: Callable[[Group], list[Row]]
    columns: tuple[str, ...]
    key: tuple[str, ...]
    """Columns whose values identify a row."""
    figure: bool = False
    """Whether the official analysis draws a figure from this table."""


def _summary(group: Group) -> list[Row]:
    return accuracy.summary_rows(group, accuracy.task_accuracy_rows(group))


TABLES: tuple[TableSpec, ...] = (
    TableSpec("table_01_text_summary", "text", _summary, SUMMARY, ("model",)),
    TableSpec("table_04_trained_text_summary", "trained_text", _summary, SUMMARY, ("model",)),
    TableSpec("table_05_task_queries", None, lambda _: accuracy.query_rows(),
              ("task", "source_task", "task_name", "query_text"), ("source_task",)),
    TableSpec("table_06_text_task_accuracy", "text", accuracy.task_accuracy_rows, TASK_ACCURACY, ("model", "task")),
    TableSpec("table_09_text_difficulty_bins", "text", accuracy.difficulty_rows,
              (*MODEL_COLUMNS, "factor", "factor_name", "bin", "accuracy", "n_correct", "n_incorrect", "n",
               "binom_se", *WILSON, "chance_adjusted_accuracy", "chance_adjusted_ci_low", "chance_adjusted_ci_high"),
              ("model", "factor", "bin")),
    TableSpec("table6_mcnemar_object_counting_text", "text", dependency.mcnemar_rows,
              ("modality", "model_a", "model_b", "acc_a", "acc_b", "n_common", "a_wrong_b_right", "a_right_b_wrong",
               "p_mcnemar", "is_adjacent", "p_mcnemar_fdr"), ("model_a", "model_b")),
    TableSpec("tableF_bundle_coupling_text", "text", correlations.bundle_coupling_rows,
              ("modality", "bundle", "model", "r_ws", "p_ws", "n_varying", "p_ws_fdr"), ("bundle", "model")),
    TableSpec("tableF_bundle_coupling_twoway_text", "text", correlations.bundle_twoway_rows,
              ("modality", "bundle", "r_scene", "r_scene_responder", "n"), ("bundle",)),
    TableSpec("tableF_joint_integrity_text", "text", dependency.joint_integrity_rows,
              ("modality", "variant", "group", "relation", "model", "joint_integrity", "n_child_correct"),
              ("variant", "relation", "model")),
    TableSpec("tableF_per_responder_lift_text", "text", dependency.per_responder_lift_rows,
              ("modality", "relation", "group", "model", "n_met", "n_unmet", "included", "marginal_lift"),
              ("relation", "model")),
    TableSpec("tableF_responder_controlled_lift_text", "text", dependency.responder_controlled_rows,
              ("modality", "subset", "relation", "group", "scene_only_lift", "twoway_fe_slope", "ci_low", "ci_high",
               "p_boot_le0", "responders_positive", "responders_total", "responders_excluded", "n"),
              ("subset", "relation")),
    TableSpec("tableF_within_scene_lift_text", "text", dependency.within_scene_lift_rows,
              ("modality", "naive_lift", "ws_met", "ws_unmet", "ws_lift", "ws_ci_low", "ws_ci_high", "p_ws_lift",
               "r_within", "p_within", "null_mean", "perm_p", "n_varying", "group", "relation", "kind", "parent_1",
               "parent_2", "target", "p_ws_lift_fdr", "perm_p_fdr"), ("relation",)),
    TableSpec("figure_07_text_summation_mechanism", "text", mechanism.summation_rows, SUMMATION,
              ("model", "cell"), True),
    TableSpec("figure_13_text_mental_rotation_correlations", "text", correlations.rotation_rows,
              (*MODEL_COLUMNS, "correlation_type", "focus_task", "source_focus_task", "focus_name", "task",
               "source_task", "task_name", "pearson_r", "p_value", "n"),
              ("model", "correlation_type", "source_focus_task", "source_task"), True),
    TableSpec("figure_14_text_bundle_correlations", "text", correlations.crossview_bundle_rows,
              ("group", "level", "model", "display_name", "bundle", "pearson_r_with_object_count", "p_value", "n",
               "n_varying_scenes", "n_tasks"), ("level", "model", "bundle"), True),
    TableSpec("figure_18_text_camera_effects", "text", camera.camera_effect_rows,
              (*MODEL_COLUMNS, "task", "source_task", "task_name", "factor", "low_level", "high_level",
               "delta_high_minus_low", "se", "p_value", "ci_low", "ci_high", "n_low", "n_high"),
              ("model", "source_task", "factor"), True),
    TableSpec("figF18_camera_within_structure_text", "text", camera.camera_within_structure_rows,
              ("modality", "model", "task", "task_display", "perspective_delta", "t_perspective", "p_perspective",
               "n_struct_perspective", "offset_delta", "t_offset", "p_offset", "n_struct_offset",
               "p_perspective_fdr", "p_offset_fdr"), ("model", "task"), True),
    TableSpec("figure_20_text_object_accuracy", "text", accuracy.object_rows, OBJECTS, ("model", "object_type"),
              True),
    TableSpec("figure_21_text_object_difficulty_slices", "text", accuracy.slice_rows,
              ("group", "slice_type", "slice_value", "task", "source_task", "task_name", "accuracy", "n_correct",
               "n"), ("slice_type", "slice_value", "source_task"), True),
    TableSpec("figure_22_text_composition_diagnostics", "text", mechanism.composition_rows, COMPOSITION,
              ("model",), True),
    TableSpec("figure_25_trained_text_task_accuracy", "trained_text", accuracy.task_accuracy_rows, TASK_ACCURACY,
              ("model", "task"), True),
    TableSpec("figure_26_trained_text_object_accuracy", "trained_text", accuracy.object_rows, OBJECTS,
              ("model", "object_type"), True),
    TableSpec("figure_27_trained_text_summation_mechanism", "trained_text", mechanism.summation_rows, SUMMATION,
              ("model", "cell"), True),
    TableSpec("figure_28_trained_text_composition_diagnostics", "trained_text", mechanism.composition_rows,
              COMPOSITION, ("model",), True),
)
"""Every table, in the order they are written."""
TABLE_NAMES: tuple[str, ...] = tuple(t.name for t in TABLES)
LOOSE_COLUMNS: dict[str, tuple[str, ...]] = {"tableF_within_scene_lift_text": ("ws_ci_low", "ws_ci_high")}
"""Bootstrap columns whose official draw order cannot be reproduced (a Python set's iteration order)."""
