"""eval.plaincsv reads what the csv module reads, or declines (None) so the csv path decides."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from eval.plaincsv import read_plain
from eval.rawcsv import RawCsvError, read_raw_csv

HEADER = ("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,task2,task2_pred,task2_gt,main,"
          "main_pred,main_gt")


def _via_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
@pytest.mark.parametrize("final", [True, False])
def test_cells_and_integers_equal_the_csv_module(tmp_path: Path, ending: str, final: bool) -> None:
    rows = ["a b,cube, 7,,0012,-0,1,-16,3,,x y,007", "v/2,,1,2,3,4,0,5,5,1,,0"]
    path = tmp_path / "f.csv"
    path.write_bytes((ending.join(["h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12", *rows]) + (ending if final else ""))
                     .encode())
    plain = read_plain(path)
    assert plain is not None
    expected = _via_csv(path)
    assert plain.header == expected[0]
    for j in range(12):
        assert plain.strings(j) == [r[j] for r in expected[1:]]
    assert read_plain(path).integers([2]) is None  # " 7": the csv path strips it
    assert plain.integers([4, 5, 7, 9]).tolist()[:2] == [[12.0, 3.0], [-0.0, 4.0]]
    got = plain.integers([5, 6, 7, 8, 9, 11])
    want = [[float(r[j]) if r[j] else np.nan for r in expected[1:]] for j in (5, 6, 7, 8, 9, 11)]
    assert np.array_equal(got, np.array(want), equal_nan=True)
    assert np.signbit(got[0, 0])  # "-0" is -0.0, as float("-0")
    assert plain.integers([10]) is None


@pytest.mark.parametrize("text", [
    'h1,h2\n"a",1\n',       # quotes
    "h1,h2\n\na,1\n",        # blank line
    "h1,h2\na,1\rb,2\n",     # lone carriage return
    "h1,h2\na,1,3\n",        # wrong field count
    "h1,h2\na\n",
    "h1,h2\n",               # header only
    "",
    "h1,h2\nä,1\n",          # not ASCII
])
def test_files_outside_the_plain_form_are_declined(tmp_path: Path, text: str) -> None:
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode())
    assert read_plain(path) is None


def test_raw_file_read_plainly_equals_the_csv_path_and_bad_cells_are_named(tmp_path: Path) -> None:
    """read_raw_csv on a plain file gives what the csv path gives; a bad cell still gets the csv path's message."""
    import eval.rawcsv as rawcsv

    rows = ["v1,cube,5,1,2,2,1,3,3,0,4,5", "v2,,6,-1,2,3,,,3,1,6,6", "v3,NA,7,0,3,3,0,2,3,1,7,7"]
    path = tmp_path / "eval_raw_m_text.csv"
    path.write_text("\r\n".join([HEADER, *rows]) + "\r\n")
    fast = read_raw_csv(path)
    header, data, lines = rawcsv._read_rows(path)
    slow = rawcsv._table_of(path, "m", header, data, lines)
    assert fast.views == slow.views and fast.object_type == slow.object_type
    for part in ("meta", "correct", "pred", "gt"):
        a, b = getattr(fast, part), getattr(slow, part)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    path.write_text("\n".join([HEADER, *rows[:2], "v3,NA,7,0,3,3,2,2,3,1,7,7"]) + "\n")
    with pytest.raises(RawCsvError, match="line 4, column 'task2': correctness must be 0, 1 or empty"):
        read_raw_csv(path)
    path.write_text("\n".join([HEADER, *rows[:2], "v3,NA,7,0,3,3,0,2,3,1,7,7.5"]) + "\n")
    with pytest.raises(RawCsvError, match="line 4, column 'main_gt'"):
        read_raw_csv(path)
