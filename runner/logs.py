"""Logging: text for people, JSON (one object a line) for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
import time

_EXTRA = ("object", "ident")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _EXTRA:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    numeric = getattr(logging, level.upper(), None) if not level.isdigit() else int(level)
    root.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
    for noisy in ("aiohttp.access", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
