"""Crash-safe file writes: write a temporary file, then rename it over the target."""

import contextlib
import json
import os
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
  """Yields a temporary path to write; on success renames it over `path` (atomic on POSIX),
  so a reader or a killed process never sees a half-written file."""
  tmp = f"{path}.tmp"
  yield tmp
  os.replace(tmp, path)


def write_text_atomic(path: str, text: str) -> None:
  with atomic_path(path) as tmp, open(tmp, "w") as f:
    f.write(text)


def write_json_atomic(path: str, payload) -> None:
  with atomic_path(path) as tmp, open(tmp, "w") as f:
    json.dump(payload, f, indent=1)
