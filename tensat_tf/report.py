"""The JSON report of a conversion on disk: where it goes by default and how it is written.

`OUT.report.json` sits beside the SavedModel folder OUT, never inside it (the SavedModel holds only what TF reads).
`tensat_tf batch` counts a model as finished once its report exists (tensat_tf/batch.py), so the report is written
after the publish, and atomically.
"""
from __future__ import annotations

import json
import os


def default_path(output_dir: str) -> str:
    return os.path.abspath(output_dir).rstrip("/") + ".report.json"


def write(report: dict, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)
