"""A stand-in model server for an inference endpoint: the standard library only.

``GET /health`` answers 200 (500 while the file ``/tmp/sick`` exists: a way to see
a replica taken out of rotation); ``GET|POST /predict`` answers, after ``DELAY``
seconds (default 0.05, the "model"), with the replica's session id and
``MODEL_VERSION``. It listens on ``PORT`` (default 8000).
"""

import json
import os
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Model(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real model server
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

    def do_GET(self) -> None:
        if self.path == "/health":
            sick = Path("/tmp/sick").exists()
            self.reply(500 if sick else 200, {"healthy": not sick})
        elif self.path.startswith("/predict"):
            self.predict()
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.predict()

    def predict(self) -> None:
        time.sleep(float(os.environ.get("DELAY", "0.05")))
        version = os.environ.get("MODEL_VERSION", "1")
        replica = os.environ.get("BACKENDAI_SESSION_ID", socket.gethostname())
        self.reply(200, {"replica": replica, "version": version})

    def reply(self, status: int, data: dict) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would drown the replica's log


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8000"))), Model).serve_forever()
