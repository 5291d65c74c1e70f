"""The JSON report of a conversion on disk: where it goes by default and how it is written, and what readers of it
(the printed table, tools/golden.py) derive from it.

`OUT.report.json` sits beside the SavedModel folder OUT, never inside it (the SavedModel holds only what TF reads).
`tensat_tf batch` counts a model as finished once its report exists (tensat_tf/batch.py), so the report is written
after the publish, and atomically.
"""
from __future__ import annotations

import json
import os
from typing import Optional


def default_path(output_dir: str) -> str:
    return os.path.abspath(output_dir).rstrip("/") + ".report.json"


def write(report: dict, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


def probes_cut_short(egraph: dict) -> list[tuple[int, str]]:
    """(iteration, probe_status) of the probes that did not prove their extraction, when saturation stopped for no
    gain on them (passes/tensat.py): a probe stopped by its work or its clock may report a worse cost than the
    e-graph holds, and end saturation early. Empty otherwise (a saturated stop decided nothing on the probes)."""
    return [(i["index"], i["probe_status"]) for i in _probed(egraph) if i.get("probe_status") not in (None, "optimal")]


def probes_clocked(egraph: dict) -> list[int]:
    """The iterations whose probe the wall clock cut short, when saturation stopped for no gain on them: where it
    stopped may then depend on the machine's speed. Reports written before the work limit have no probe_clocked
    entries: their unproven probes were all stopped by the clock."""
    return [i["index"] for i in _probed(egraph)
            if i.get("probe_clocked") or ("probe_clocked" not in i and i.get("probe_status") == "time_limit")]


def _probed(egraph: dict) -> list[dict]:
    if egraph.get("stop_reason") != "no_gain":
        return []
    return (egraph.get("saturation") or {}).get("per_iteration", [])


def clock_dependence(report: dict) -> Optional[str]:
    """Why a conversion's output could depend on the machine's speed (one line), or None: its saturation stopped on
    its time budget, a probe the wall clock cut short ended it for no gain, or the wall clock cut its extraction
    short. Work limits stop the same way on every machine (tensat_tf/extract/solvers.py) and do not count. Reports
    written before the work limit have no `clocked` entries: an unproven extraction there was the clock's."""
    for name, sig in sorted(report["signatures"].items()):
        eg, ex = sig.get("egraph") or {}, sig.get("extraction") or {}
        if eg.get("stop_reason") == "time_limit":
            return f"{name}: saturation stopped on its time budget"
        clocked = probes_clocked(eg)
        if clocked:
            return f"{name}: saturation stopped for no gain after the clock cut short the probe of iteration " \
                   f"{clocked[-1]}"
        if ex.get("clocked") or ("clocked" not in ex and ex.get("status", "optimal") not in ("optimal", "work_limit")):
            return f"{name}: the clock cut extraction short (it ended {ex.get('status')})"
    return None
