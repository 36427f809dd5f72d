"""An endpoint request of the stdlib model server (``examples/inference/model_server.py``)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

MODEL = Path(__file__).resolve().parents[2] / "examples" / "inference" / "model_server.py"


def model_command() -> str:
    """The model server as a startup command (no file to mount: it travels encoded)."""
    code = base64.b64encode(MODEL.read_bytes()).decode()
    return f"exec python3 -c \"import base64; exec(base64.b64decode('{code}'))\""


def endpoint_request(name: str, image: str, **extra: Any) -> dict[str, Any]:
    """One small replica of the model server on ``model:http:8000``, checked every second."""
    replica = {
        "image": image,
        "resources": {"cpu": "0.25", "mem": "256m"},
        "startup_command": model_command(),
        "service_ports": ["model:http:8000"],
        "env": {"MODEL_VERSION": "1"},
    }
    return {"name": name, "replica": replica, "health_path": "/health",
            "health_interval": 1, **extra}  # fmt: skip
