"""Fidelity check: generated per-view distributions against the released evaluation set.

The released set (``../shared/fixtures/paper_outputs/raw/eval_raw_*_text.csv``) holds 3,000 leaf
views: 750 (structure, base view) folders x 4 leaves, from 554 structures, with base views close
to uniform (view_01..04: 708/812/800/680). We use all 16 leaf views of every generated structure,
which is the same per-view distribution as drawing base views uniformly and taking their 4 leaves.

Views of one structure are strongly correlated (num_columns, num_layers and task9 are constant
over a structure), so the tests treat the number of *structures* as the sample size on each side:
the chi-square homogeneity test runs on per-view frequencies scaled to the structure counts, and
the expected total variation distance under the null is simulated by drawing two multinomial
samples of those sizes from the pooled distribution. Both are approximations (conservative for the
view-dependent fields, whose effective size lies between the structure and the view count).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spatialiq_train.core.dataset import iter_views

REFERENCE_RELPATH = "../shared/fixtures/paper_outputs/raw/eval_raw_qwen_text.csv"
"""The released per-view CSV, relative to the repository root (``../shared`` sits beside it)."""
FIELDS: tuple[str, ...] = ("total_blocks", "num_hidden_blocks", "num_columns", "num_layers", "task9")
_REF_COLUMNS = {"total_blocks": "total_blocks", "num_hidden_blocks": "num_hidden_blocks",
                "num_columns": "num_columns", "num_layers": "num_layers", "task9": "task9_gt"}


@dataclass(frozen=True)
class Views:
    """Per-view values of FIELDS and the structure each view belongs to."""

    values: Mapping[str, np.ndarray]
    structures: np.ndarray

    @property
    def n_views(self) -> int:
        return len(self.structures)

    @property
    def n_structures(self) -> int:
        return len(set(self.structures.tolist()))


@dataclass(frozen=True)
class Distance:
    field: str
    tvd: float
    chi2_p: float
    mean_generated: float
    mean_reference: float
    expected_tvd: float
    """Mean TVD of two samples of the two structure counts drawn from one (pooled) distribution."""
    tvd_95: float
    """95th percentile of that null TVD."""


def default_reference() -> Path:
    """``REFERENCE_RELPATH`` resolved against this checkout's root (not the current directory)."""
    return (Path(__file__).resolve().parents[1] / REFERENCE_RELPATH).resolve()


def load_reference(path: str | Path) -> Views:
    """The released CSV's structure columns and ``task9_gt``; a structure is ``<run>/level_1/sample_NN``. A view on
    two rows is refused, naming both lines."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("view", *_REF_COLUMNS.values()) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected an eval_raw_*_text.csv of the release")
        rows = list(reader)
    values: dict[str, list[int]] = {f: [] for f in FIELDS}
    structures = []
    first_line: dict[str, int] = {}
    for n, row in enumerate(rows, start=2):
        seen = first_line.setdefault(row["view"], n)
        if seen != n:
            raise ValueError(f"{path}: line {n} repeats view {row['view']!r} of line {seen}; the reference holds one "
                             "row per view (a repeated row would weigh that view twice): remove the repeat")
        structures.append(row["view"].rsplit("/", 2)[0])
        for f, col in _REF_COLUMNS.items():
            try:
                values[f].append(int(row[col]))
            except (ValueError, TypeError):
                raise ValueError(f"{path}: line {n}, column {col}: expected an integer, got {row[col]!r}") from None
    return Views({f: np.asarray(v) for f, v in values.items()}, np.asarray(structures))


def load_generated(dataset: str | Path, split: str = "benchmark") -> Views:
    """Per-view values of one split of a generated dataset (its gt.json files, else its parquet rows)."""
    values: dict[str, list[int]] = {f: [] for f in FIELDS}
    structures: list[str] = []
    for view in iter_views(dataset, split, required=FIELDS, images=False):
        structures.append(view.structure_id)
        for f in FIELDS:
            values[f].append(view.gt[f])
    return Views({f: np.asarray(v) for f, v in values.items()}, np.asarray(structures))


def _pmf(x: np.ndarray, support: np.ndarray) -> np.ndarray:
    return np.array([(x == s).mean() for s in support])


def _chi2_p(p: np.ndarray, q: np.ndarray, n: int, m: int) -> float:
    """Homogeneity test on frequencies scaled to sizes n and m; sparse bins merged into neighbours."""
    from scipy.stats import chi2

    table = np.vstack([p * n, q * m])
    merged = []
    acc = np.zeros(2)
    for col in table.T:  # merge left to right until the expected count of a bin is >= 5
        acc = acc + col
        if acc.sum() * min(n, m) / (n + m) >= 5:
            merged.append(acc)
            acc = np.zeros(2)
    if acc.sum() > 0:
        if merged:
            merged[-1] = merged[-1] + acc
        else:
            merged.append(acc)
    t = np.array(merged).T
    if t.shape[1] < 2:
        return 1.0
    expected = t.sum(axis=1, keepdims=True) * t.sum(axis=0, keepdims=True) / t.sum()
    stat = float(((t - expected) ** 2 / expected).sum())
    return float(chi2.sf(stat, t.shape[1] - 1))


def _null_tvd(pooled: np.ndarray, n: int, m: int, rng: np.random.Generator, reps: int) -> np.ndarray:
    a = rng.multinomial(n, pooled, size=reps) / n
    b = rng.multinomial(m, pooled, size=reps) / m
    return 0.5 * np.abs(a - b).sum(axis=1)


def compare(generated: Views, reference: Views, reps: int = 2000, seed: int = 0) -> list[Distance]:
    """One Distance per field of FIELDS (see the module docstring for the sample sizes used)."""
    rng = np.random.default_rng(seed)
    n, m = generated.n_structures, reference.n_structures
    out = []
    for f in FIELDS:
        g, r = generated.values[f], reference.values[f]
        support = np.union1d(g, r)
        p, q = _pmf(g, support), _pmf(r, support)
        pooled = (p * n + q * m) / (n + m)
        null = _null_tvd(pooled, n, m, rng, reps)
        out.append(Distance(f, float(0.5 * np.abs(p - q).sum()), _chi2_p(p, q, n, m), float(g.mean()),
                            float(r.mean()), float(null.mean()), float(np.quantile(null, 0.95))))
    return out


def format_report(distances: list[Distance], generated: Views | None = None, reference: Views | None = None) -> str:
    """A plain-text table, then the note on sampling error."""
    lines = []
    if generated is not None and reference is not None:
        lines.append(f"generated: {generated.n_views} views of {generated.n_structures} structures; "
                     f"reference: {reference.n_views} views of {reference.n_structures} structures")
    lines.append(f"{'field':<18} {'TVD':>6} {'E[TVD|H0]':>10} {'TVD95|H0':>9} {'chi2 p':>8} {'mean gen':>9} "
                 f"{'mean ref':>9}")
    for d in distances:
        lines.append(f"{d.field:<18} {d.tvd:6.3f} {d.expected_tvd:10.3f} {d.tvd_95:9.3f} {d.chi2_p:8.3f} "
                     f"{d.mean_generated:9.2f} {d.mean_reference:9.2f}")
    lines.append("note: all 16 leaf views of each generated structure are used (the release takes 4 leaves of "
                 "near-uniform base views). Sample sizes are the structure counts, since views of one structure "
                 "are correlated; E[TVD|H0] and TVD95|H0 are the TVD two such samples of one distribution give "
                 "(mean, 95th percentile): a TVD below TVD95|H0 and chi2 p > 0.05 agree within sampling error.")
    return "\n".join(lines)
