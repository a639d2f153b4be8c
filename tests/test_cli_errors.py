"""One CLI error path (issue 9.4) and the smaller message fixes of issue 15.7.

Bad input raises UserError (or a subclass) anywhere; the command group prints one ``error: ...`` line
and exits 2 (bad input) or 1 (a job that ran and failed); the traceback only under --verbose.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from spatialiq_train.cli import _Commands, app
from spatialiq_train.core.errors import (
    EXIT_FAILURE,
    EXIT_USAGE,
    InputError,
    JobFailure,
    UserError,
    describe_error,
    describe_os_error,
)

CLI_DIR = Path(__file__).resolve().parents[1] / "spatialiq_train" / "cli"


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _toy_app(exc: BaseException) -> typer.Typer:
    """An app with the project's command group whose one command raises ``exc``."""
    toy = typer.Typer(cls=_Commands)

    @toy.callback()
    def _root(ctx: typer.Context, verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
        from spatialiq_train.cli import VERBOSE_KEY

        ctx.meta[VERBOSE_KEY] = verbose

    @toy.command("boom")
    def boom() -> None:
        raise exc

    return toy


def test_command_modules_have_no_other_error_path() -> None:
    """No `_fail` helpers, typer.BadParameter or bare typer.Exit(code) left in the command modules."""
    offenders = []
    for path in sorted(CLI_DIR.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in (r"def _fail\b", r"BadParameter", r"typer\.Exit\(\s*[12]\s*\)", r"raise typer\.Exit\((?!code)"):
            offenders += [f"{path.name}: {pattern}" for _ in re.finditer(pattern, text)]
    assert offenders == []


@pytest.mark.parametrize(("exc", "code"), [
    (UserError("--thing: give a positive number"), EXIT_USAGE),
    (InputError("rows.csv: line 3: 'x' is not a number"), EXIT_USAGE),
    (JobFailure("render of view 3 failed"), EXIT_FAILURE),
    (UserError("odd", exit_code=EXIT_FAILURE), EXIT_FAILURE),
])
def test_user_errors_render_as_one_line_with_their_exit_code(exc: UserError, code: int) -> None:
    res = CliRunner().invoke(_toy_app(exc), ["boom"])
    assert res.exit_code == code
    assert _error_lines(res.output) == [f"error: {exc.message}"]
    assert "Traceback" not in res.output


def test_verbose_keeps_the_traceback_and_argv_does_not_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    res = CliRunner().invoke(_toy_app(UserError("bad --x")), ["--verbose", "boom"])
    assert isinstance(res.exception, UserError) and _error_lines(res.output) == []
    # a -v in the process's own argv (pytest -v) is not the command's --verbose
    monkeypatch.setattr(sys, "argv", ["pytest", "-v"])
    res = CliRunner().invoke(_toy_app(UserError("bad --x")), ["boom"])
    assert res.exit_code == EXIT_USAGE and _error_lines(res.output) == ["error: bad --x"]


def test_a_bug_keeps_its_traceback() -> None:
    res = CliRunner().invoke(_toy_app(ZeroDivisionError("division by zero")), ["boom"])
    assert isinstance(res.exception, ZeroDivisionError)
    assert describe_error(RuntimeError("x")) is None


def test_os_errors_become_sentences() -> None:
    exists = FileExistsError(errno.EEXIST, "File exists", "afile")
    assert "Errno" not in describe_os_error(exists)
    assert describe_os_error(exists).startswith("afile already exists")
    assert describe_os_error(IsADirectoryError(errno.EISDIR, "Is a directory", "runs")).startswith(
        "runs is a directory")
    assert describe_error(FileNotFoundError(errno.ENOENT, "No such file or directory", "x.yaml")) == (
        "x.yaml does not exist", EXIT_USAGE)
    assert describe_error(OSError(errno.ENOSPC, "No space left on device", "out/a.parquet"))[1] == EXIT_FAILURE
    moved = describe_os_error(OSError(errno.ENOTEMPTY, "Directory not empty", "a.tmp", None, "a"))
    assert moved == "cannot move a.tmp to a: directory not empty"
    res = CliRunner().invoke(_toy_app(exists), ["boom"])
    assert res.exit_code == EXIT_USAGE and _error_lines(res.output) == [
        "error: afile already exists (remove it or choose another path)"]


def test_library_error_types_are_user_errors_with_the_right_code() -> None:
    from data_gen.config import GenerationError
    from data_gen.render.base import RenderError
    from eval.rawcsv import RawCsvError
    from spatialiq_train.core.dataset import DatasetError, DatasetNotFoundError, GroundTruthError
    from spatialiq_train.core.recipes import RecipeError
    from spatialiq_train.core.traces import TraceError

    for cls in (RecipeError, TraceError, GroundTruthError, DatasetError, RawCsvError, InputError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError) and cls("m").exit_code == EXIT_USAGE, cls
    assert issubclass(DatasetNotFoundError, FileNotFoundError)
    for cls in (GenerationError, RenderError):
        assert issubclass(cls, UserError) and issubclass(cls, RuntimeError) and cls("m").exit_code == EXIT_FAILURE
    assert GenerationError("--render-variant x", exit_code=EXIT_USAGE).exit_code == EXIT_USAGE


def test_recipe_path_that_is_a_directory_says_so(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["recipes", "show", str(tmp_path)])
    assert res.exit_code == EXIT_USAGE
    assert _error_lines(res.output) == [_error_lines(res.output)[0]] and "is a directory" in res.output
    assert "does not exist" not in res.output


def test_recipe_with_invalid_utf8_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("model:\n  name_or_path: caf\xe9\n".encode("latin-1"))
    res = CliRunner().invoke(app, ["recipes", "show", str(bad)])
    assert res.exit_code == EXIT_USAGE
    assert _error_lines(res.output) == [f"error: recipe {bad}: not UTF-8 text (byte 0xe9 at offset 26 is invalid: "
                                        "invalid continuation byte); save the file as UTF-8"]


def test_reward_score_bad_input_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["reward", "score", "-c", "<answer>3</answer>", "-a", "3", "-r", '{"default": 1,,}'])
    assert res.exit_code == EXIT_USAGE
    assert _error_lines(res.output) == [
        "error: --reward (a JSON weight mapping): invalid JSON at column 15: Expecting property name enclosed in "
        'double quotes, at {"default": 1,<<here>>,}']
    gt = tmp_path / "gt.json"
    gt.write_text("[1, 2]")
    res = CliRunner().invoke(app, ["reward", "score", "-c", "x", "--gt", str(gt)])
    assert res.exit_code == EXIT_USAGE and "Usage:" not in res.output
    assert _error_lines(res.output) == [f"error: --gt {gt}: expected a JSON object of ground-truth fields, got list"]


def test_demo_refuses_a_directory_recipe_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--recipe", str(tmp_path)])
    assert res.exit_code == EXIT_USAGE and len(_error_lines(res.output)) == 1
    assert _error_lines(res.output)[0].startswith(f"error: recipe path {tmp_path} is a directory; give a recipe YAML")


# --- issue 15.7: JSON errors mid-file, duplicate warnings -------------------------------------------------------


def test_json_error_mid_file_shows_line_column_and_the_text_there(tmp_path: Path) -> None:
    from spatialiq_train.core.io import read_json

    rows = [{"view": f"v{i}", "count": i} for i in range(40)]
    text = json.dumps(rows, indent=1).replace('"count": 20', '"count": 20 21', 1)
    path = tmp_path / "big.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_json(path)
    line = text[:text.index(" 21")].count("\n") + 1
    assert info.value.message.startswith(f"{path}: invalid JSON at line {line}, column 15: Expecting ',' delimiter")
    assert info.value.message.endswith('at   "count": 20 <<here>>21')
    assert "\n" not in info.value.message


def test_json_snippet_is_a_window_on_a_long_line(tmp_path: Path) -> None:
    from spatialiq_train.core.io import loads_json

    text = json.dumps({f"k{i}": i for i in range(200)}).replace('"k100": 100', '"k100": 100x', 1)
    with pytest.raises(InputError) as info:
        loads_json(text, "metrics.json")
    message = info.value.message
    assert "invalid JSON at line 1, column" in message and "<<here>>x," in message and len(message) < 200
    assert message.count("...") == 2


def test_json_cut_short_says_so(tmp_path: Path) -> None:
    from spatialiq_train.core.io import read_json

    path = tmp_path / "gt.json"
    path.write_text('{\n  "task2": 3,\n  "task3": [1, 2')
    with pytest.raises(InputError, match=r"gt\.json: invalid JSON at line 3, column 17: .*the text ends before the "
                                         r"JSON value does \(a file cut short\?\), it stops at '  \"task3\": \[1, 2'"):
        read_json(path)


def test_invalid_utf8_json_names_the_file(tmp_path: Path) -> None:
    from spatialiq_train.core.io import read_json

    path = tmp_path / "scene.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError, match=r"scene\.json: not UTF-8 text \(byte 0xff at offset 7"):
        read_json(path)


def test_many_repeated_completions_give_one_warning_with_the_count(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from eval.completions import load_completions

    path = tmp_path / "c.jsonl"
    line = json.dumps({"view": "v", "task": "task_main", "sample": 0, "text": "a"})
    first = json.dumps({"view": "v", "task": "task_main", "sample": 0, "text": "first"})
    path.write_text("\n".join([first] + [line] * 256) + "\n")
    with caplog.at_level(logging.WARNING, logger="eval.completions"):
        records = load_completions(path)
    assert records[("v", "task_main", 0)].text == "first"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0] == (f"{path}: 256 line(s) repeat an earlier (view, task, sample) key (first: line 2, "
                           "('v', 'task_main', 0) and 255 more line(s)); keeping the first completion of each key")


def test_completions_line_with_bad_json_names_file_line_and_spot(tmp_path: Path) -> None:
    from eval.completions import load_completions

    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"view": "v", "task": "t", "sample": 0, "text": "a"}) + "\n" + '{"view": "v", oops}\n')
    with pytest.raises(InputError, match=r"c\.jsonl: line 2: invalid JSON at column 15: .*<<here>>oops\}"):
        load_completions(path)
