"""Time ``spatialiq eval paper-tables`` (the 24 official tables) on one core, and check them against a reference.

Run by hand::

    python bench/bench_paper_tables.py                                  # the 7 shared raw files
    python bench/bench_paper_tables.py --from-git /path/to/Spatial-IQ.git  # all 17 published raw files
    python bench/bench_paper_tables.py --from-git SPATIAL_IQ_GIT --side-by-side --runs 3   # against the official script

``--from-git`` takes a clone (or bare mirror) of NVIDIA/Spatial-IQ and reads the 17 text raw files from
``analyses/inference_results`` at HEAD (16 ``eval_raw_*_text.csv`` and ``eval_raw_human_frq.csv``) and, unless
``--reference`` is given, compares with the published tables in ``analyses/analyses_results/tables``. Without it
the shared raw files are read and compared with ``official_script_on_these_raw``. Reported: CPU seconds of this
process to read the files, to build each table, and in all (the goal is under 5 s for tables); with
``--figures`` also the time to draw the 12 PNGs. The comparison allows 1e-9 absolute on every number except the
bootstrap columns in ``LOOSE_COLUMNS`` (compared to 0.02; their largest difference is printed).

``--side-by-side`` also runs the whole commands, alternating, ``--runs`` times each: ``spatialiq eval paper-tables
--published-groups --no-figures`` and the official ``analyses/spatial-IQ_analyses.py --stage analysis --groups text
trained_text`` on the same raw files, each in a fresh interpreter with the same environment (one BLAS thread), and
prints each run's CPU seconds (user + system, from ``getrusage`` of the children) and wall seconds, the medians, and
the ratios of the medians. The official script is taken from ``--official DIR`` (or ``$SPATIAL_IQ_OFFICIAL``: the
folder holding ``spatial-IQ_analyses.py`` and ``hierarchy_dependency.py``), else from ``--from-git``; it needs pandas,
scipy and matplotlib. Its tables are compared with ours as above. Without an official script the side-by-side part
is skipped with a message saying where to point it.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from eval.paper.common import full_precision  # noqa: E402
from eval.paper.registry import LOOSE_COLUMNS, TABLES  # noqa: E402
from eval.paper.tables import build_tables  # noqa: E402
from eval.rawcsv import read_raw_dir  # noqa: E402
from spatialiq_train.core.io import csv_text  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "paper_outputs"
RAW_IN_GIT = "analyses/inference_results"
TABLES_IN_GIT = "analyses/analyses_results/tables"
OFFICIAL_IN_GIT = "analyses"
OFFICIAL_FILES = ("spatial-IQ_analyses.py", "hierarchy_dependency.py")
ROOT = Path(__file__).resolve().parents[1]


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def extract(git_dir: Path, folder: str, wanted: callable, dest: Path) -> None:  # type: ignore[valid-type]
    """Copy the files of ``folder`` at HEAD whose name passes ``wanted`` into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in _git(git_dir, "ls-tree", "--name-only", "HEAD", folder + "/").split():
        name = Path(path).name
        if wanted(name):
            (dest / name).write_text(_git(git_dir, "show", f"HEAD:{path}"))


def _number_differs(expected: str, got: str, tol: float) -> float | None:
    """The absolute difference when both are numbers, 0 when equal as text, None when they disagree otherwise."""
    if expected == got:
        return 0.0
    try:
        e, g = float(expected), float(got)
    except ValueError:
        return None
    if math.isnan(e) and math.isnan(g):
        return 0.0
    return abs(e - g) if abs(e - g) <= tol else None


def compare(built: dict[str, list[dict[str, object]]], reference: Path) -> tuple[list[str], float]:
    """Problems found (missing rows, differing values), and the largest difference in a loose column."""
    problems: list[str] = []
    loose_max = 0.0
    for spec in TABLES:
        path = reference / f"{spec.name}.csv"
        if not path.is_file():
            problems.append(f"{spec.name}: no reference file")
            continue
        expected = list(csv.DictReader(path.open(newline="")))
        got = list(csv.DictReader(io.StringIO(csv_text(spec.columns, built[spec.name], full_precision))))
        keys = [tuple(r[k] for k in spec.key) for r in expected]
        if keys != [tuple(r[k] for k in spec.key) for r in got]:
            problems.append(f"{spec.name}: row keys or order differ")
            continue
        for e, g in zip(expected, got, strict=True):
            for column, value in e.items():
                loose = column in LOOSE_COLUMNS.get(spec.name, ())
                diff = _number_differs(value, g.get(column, ""), 0.02 if loose else 1e-9)
                if diff is None:
                    problems.append(f"{spec.name} {tuple(e[k] for k in spec.key)} {column}: {value!r} vs "
                                    f"{g.get(column)!r}")
                elif loose:
                    loose_max = max(loose_max, diff)
    return problems, loose_max


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(CPU seconds of the child and its children, wall seconds) of one command; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def official_dir(args: argparse.Namespace, tmp: Path) -> Path | None:
    """The folder holding the official script: --official, $SPATIAL_IQ_OFFICIAL, or extracted from --from-git."""
    given = args.official or os.environ.get("SPATIAL_IQ_OFFICIAL")
    if given:
        folder = Path(given)
        folder = folder.parent if folder.is_file() else folder
        missing = [f for f in OFFICIAL_FILES if not (folder / f).is_file()]
        if missing:
            raise SystemExit(f"{folder}: no {', '.join(missing)} (give the official analyses/ folder)")
        return folder
    if args.from_git:
        folder = tmp / "official"
        extract(args.from_git, OFFICIAL_IN_GIT, lambda n: n in OFFICIAL_FILES, folder)
        return folder if all((folder / f).is_file() for f in OFFICIAL_FILES) else None
    return None


def side_by_side(raw: Path, official: Path, runs: int, tmp: Path) -> None:
    """Alternate the two whole commands ``runs`` times; print every run, the medians and their ratios."""
    ours_cmd = [sys.executable, "-m", "spatialiq_train.cli", "eval", "paper-tables", "--raw", str(raw.resolve()),
                "--out", str(tmp / "ours"), "--published-groups", "--no-figures"]
    official_cmd = [sys.executable, str(official / OFFICIAL_FILES[0]), "--input-dir", str(raw.resolve()),
                    "--output-dir", str(tmp / "official_out"), "--stage", "analysis", "--groups", "text",
                    "trained_text"]
    times: dict[str, list[tuple[float, float]]] = {"ours": [], "official": []}
    for run in range(runs):
        for name, cmd, cwd in (("ours", ours_cmd, ROOT), ("official", official_cmd, official)):
            cpu, wall = _timed(cmd, cwd)
            times[name].append((cpu, wall))
            print(f"run {run + 1} {name:8s} {cpu:8.2f} s CPU {wall:8.2f} s wall (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    med = {name: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t)) for name, t in times.items()}
    print(f"median of {runs}: ours {med['ours'][0]:.2f} s CPU {med['ours'][1]:.2f} s wall; official "
          f"{med['official'][0]:.2f} s CPU {med['official'][1]:.2f} s wall")
    print(f"ratio official/ours: {med['official'][0] / med['ours'][0]:.1f}x CPU, "
          f"{med['official'][1] / med['ours'][1]:.1f}x wall")
    tables = {spec.name: list(csv.DictReader((tmp / "ours" / "tables" / f"{spec.name}.csv").open(newline="")))
              for spec in TABLES}
    problems, loose = compare(tables, tmp / "official_out" / "tables")
    print(f"ours vs the official script's tables: {len(problems)} problem(s); largest loose-column difference "
          f"{loose:.2e}")
    for line in problems[:20]:
        print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw", type=Path, default=SHARED / "raw")
    parser.add_argument("--from-git", type=Path, help="NVIDIA/Spatial-IQ git dir: use its 17 published raw files")
    parser.add_argument("--reference", type=Path, help="folder of official tables to compare with")
    parser.add_argument("--figures", action="store_true", help="also time drawing the figures")
    parser.add_argument("--side-by-side", action="store_true", help="also time both whole commands, alternating")
    parser.add_argument("--official", type=Path, help="folder of the official spatial-IQ_analyses.py "
                        "(default: $SPATIAL_IQ_OFFICIAL, else taken from --from-git)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command with --side-by-side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw, reference = args.raw, args.reference or SHARED / "official_script_on_these_raw"
        if args.from_git:
            raw = Path(tmp) / "raw"
            extract(args.from_git, RAW_IN_GIT, lambda n: n.endswith("_text.csv") or n == "eval_raw_human_frq.csv", raw)
            if args.reference is None:
                reference = Path(tmp) / "tables"
                extract(args.from_git, TABLES_IN_GIT, lambda n: n.endswith(".csv"), reference)
        start = time.process_time()
        tables = read_raw_dir(raw, published=True)  # the published responders, by exact name
        read_s = time.process_time() - start
        timings: dict[str, float] = {}
        built = build_tables(tables, timings=timings)
        build_s = sum(timings.values())
        print(f"{len(tables)} raw files ({sum(len(t) for t in tables.values())} rows) from {raw}")
        print(f"read {read_s:.2f} s, build 24 tables {build_s:.2f} s, total {read_s + build_s:.2f} s CPU (one core)")
        for name, seconds in sorted(timings.items(), key=lambda kv: -kv[1])[:6]:
            print(f"  {seconds:6.3f} s  {name}")
        if args.figures:
            from eval.paper.figures import draw

            start = time.process_time()
            for spec in TABLES:
                if spec.figure:
                    draw(spec.name, built[spec.name], Path(tmp) / "figures" / f"{spec.name}.png")
            print(f"figures {time.process_time() - start:.2f} s CPU")
        if reference.is_dir():
            problems, loose = compare(built, reference)
            print(f"compared with {reference}: {len(problems)} problem(s); largest loose-column difference "
                  f"{loose:.2e} ({', '.join(c for cs in LOOSE_COLUMNS.values() for c in cs)})")
            for line in problems[:20]:
                print("  " + line)
        if args.side_by_side:
            official = official_dir(args, Path(tmp))
            if official is None:
                print("side by side skipped: no official script; pass --official DIR (the analyses/ folder of "
                      "NVIDIA/Spatial-IQ), set SPATIAL_IQ_OFFICIAL, or give --from-git")
            else:
                side_by_side(raw, official, args.runs, Path(tmp))


if __name__ == "__main__":
    main()
