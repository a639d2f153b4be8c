"""Issue 44, case 5: no interrupted image is kept. `gen` with the real Mitsuba renderer stops on SIGINT with exit 130
even when started as a background job (SIGINT inherited as ignored), a render Mitsuba winds down is never written,
and `gen --verify` renders a sample again and finds an image that is not what its record renders (docs/trust.md)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.dataset import shard_done_relpath
from spatialiq_train.core.errors import EXIT_FAILURE

pytest.importorskip("mitsuba")

REPO = Path(__file__).resolve().parents[1]
RES = "32"  # the tiniest resolution the generation tests render at


def _gen_args(out: Path, structures: int = 2) -> list[str]:
    return ["gen", "--out", str(out), "--structures", str(structures), "--seed", "4", "--split", "train",
            "--renderer", "mitsuba", "--resolution", RES, "--quiet", "--render-variant", "scalar_rgb"]


def _ignoring_sigint() -> None:
    """What a shell does to a background job (`cmd &` in a script): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_gen_started_in_the_background_stops_on_sigint_to_its_group_and_keeps_no_cut_image(tmp_path: Path) -> None:
    out = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-m", "spatialiq_train.cli", *_gen_args(out)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ignoring_sigint)
    assert proc.stderr is not None
    for line in proc.stderr:  # the renders start right after this line
        if "shard(s) to generate" in line:
            os.killpg(proc.pid, signal.SIGINT)  # the script's process group is signalled
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    assert "interrupted: every finished structure and shard" in rest and "Traceback" not in rest
    res = CliRunner().invoke(app, _gen_args(out))  # the resume finishes the run
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["gen", "--verify", "--out", str(out), "--rerender", "2"])  # every structure
    assert res.exit_code == 0, res.output
    assert "and 32 image(s) of 2 structure(s) against a fresh render: all match" in res.output


def test_a_render_mitsuba_winds_down_on_sigint_is_never_returned_as_an_image() -> None:
    from data_gen.camera import leaf_camera
    from data_gen.render.base import SceneSpec
    from data_gen.render.mitsuba_backend import MitsubaRenderer
    from spatialiq_train.core.views import LEAF_VIEWS

    renderer = MitsubaRenderer("scalar_rgb", spp=8)
    spec = SceneSpec(((1, 2), (3, 1)), leaf_camera(2, 2, 3, LEAF_VIEWS[0], 256), seed=3)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as inherited by a background job
    done = threading.Event()

    def interrupt() -> None:  # SIGINT until the render stops: one lands inside a Mitsuba render pass
        while not done.wait(0.02):
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="was interrupted; its partial image is not kept"):
            renderer.render(spec)
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)
    assert renderer.render(spec).rgb.shape == (256, 256, 3)  # the next render is whole again


def test_verify_renders_a_sample_again_and_finds_an_image_its_record_does_not_render(tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "d"
    assert CliRunner().invoke(app, _gen_args(out, structures=1)).exit_code == 0
    png = next(out.rglob("view.png"))
    with Image.open(png) as img:
        pixels = np.array(img)
    pixels[: pixels.shape[0] // 2] //= 2  # as a render cut short: part of the image darker than it should be
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    png.write_bytes(buf.getvalue())
    done = out / shard_done_relpath("train", 0, 1)  # and its sha256 recorded, as a kept image's was
    record = json.loads(done.read_text())
    rel = png.relative_to(out).as_posix()
    record["files"][rel] = hashlib.sha256(buf.getvalue()).hexdigest()
    done.write_text(json.dumps(record))
    res = CliRunner().invoke(app, ["gen", "--verify", "--out", str(out), "--rerender", "0"])
    assert res.exit_code == 0 and "all match" in res.output  # the recorded sha256s alone cannot see it
    res = CliRunner().invoke(app, ["gen", "--verify", "--out", str(out)])  # default: one structure per shard
    assert res.exit_code == EXIT_FAILURE, res.output
    assert f"MISMATCH {rel} (a fresh render of its record)" in res.output
    assert "1 image(s) differ from a fresh render of their record" in " ".join(res.output.split())
