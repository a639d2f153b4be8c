"""Fixture rows in SpatialChain's test-split format and a local stand-in for an OpenAI-compatible judge."""

from __future__ import annotations

import csv
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GRAPH = {"objects": {"1": {"name": "fence", "x": 1, "y": 2, "w": 3, "h": 4, "attributes": ["black"],
                           "relations": [{"name": "to the left of", "object": "2"}]},
                     "2": {"name": "person", "x": 5, "y": 6, "w": 7, "h": 8, "attributes": [], "relations": []}}}
ROWS: list[dict[str, str]] = [
    {"imageId": "2347569", "question": "Is there a fence to the left of the person?",
     "fullAnswer": "Yes, there is a fence to the left of the person.",
     "thinking": "Looking at the image, I can see a person. To the left of this person there is a black fence.",
     "scene_graph": json.dumps(GRAPH), "relation": "left_of", "spatial": "yes"},
    {"imageId": "2359192", "question": "Do you see any skateboards to the right of the person?",
     "fullAnswer": "No, there is a can to the right of the boy.",
     "thinking": "I can identify a boy on the left side. To the right of this person I see red cans, no skateboards.",
     "scene_graph": json.dumps(GRAPH), "relation": "right_of", "spatial": "yes"},
    {"imageId": "2325221", "question": "What is the color of the towel to the right of the people?",
     "fullAnswer": "The towel is white.", "thinking": "The towel on the right side is white.",
     "scene_graph": json.dumps(GRAPH), "relation": "right_of", "spatial": "yes"},
]


def write_spatialchain(root: Path, rows: list[dict[str, str]] = ROWS, columns: list[str] | None = None) -> Path:
    """``root/test.csv`` and ``root/images/IMAGEID.jpg`` (small pictures drawn with PIL); returns root."""
    from PIL import Image, ImageDraw

    (root / "images").mkdir(parents=True, exist_ok=True)
    for i, row in enumerate(rows):
        im = Image.new("RGB", (64, 48), (200, 200, 200))
        ImageDraw.Draw(im).rectangle([4 + 10 * i, 8, 20 + 10 * i, 40], fill=(20, 20, 20))
        im.save(root / "images" / f"{row['imageId']}.jpg")
    columns = columns or list(rows[0])
    with (root / "test.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return root


@contextmanager
def judge_server(reply: Callable[[dict[str, Any]], str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A chat-completions endpoint on 127.0.0.1 answering ``reply(request body)``; yields (base URL, requests seen
    with their headers). Stops when the block ends (daemon thread, so never outlives the test process)."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply(body)}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
