"""`convert --noprofile` writes the bytes recorded in tests/data/golden_noprofile.json (tools/golden.py): a refactor
that was meant to change nothing changed nothing. A change meant to change the output re-records the file
(`python tools/golden.py --out=tests/data/golden_noprofile.json`) and says why in its commit."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import golden  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "golden_noprofile.json")
with open(REFERENCE) as f:
    REF = json.load(f)
QUICK = {"mlp", "bert_tiny", "keras_cnn"}


def test_reference_covers_the_quick_models():
    assert QUICK <= set(REF["models"])
    assert set(REF["models"]).isdisjoint(REF["skipped"])


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow)
                                  for n in sorted(REF["models"])])
def test_output_bytes_as_recorded(name, zoo_cache):
    if REF["environment"] != golden.environment():
        pytest.skip(f"reference recorded under {REF['environment']}, not {golden.environment()}")
    files, why = golden.record_one(name)
    if files is None:
        pytest.skip(f"this run depended on the machine's speed ({why}): not comparable")
    changed = sorted(k for k in set(files) | set(REF["models"][name]) if files.get(k) != REF["models"][name].get(k))
    assert changed == [], f"{name}: these files differ from the recorded bytes"


def test_a_stop_for_no_gain_after_a_probe_the_clock_cut_short_depends_on_the_machine():
    def report(stop, statuses):
        its = [{"index": k + 1, "probe_cost": 1.0, **({"probe_status": st} if st else {})}
               for k, st in enumerate(statuses)]
        return {"signatures": {"s": {"egraph": {"stop_reason": stop, "saturation": {"per_iteration": its}},
                                     "extraction": {"status": "optimal"}}}}
    assert golden.timing_dependence(report("no_gain", [None, "optimal", "optimal"])) is None
    # a report written before the work limit: its unproven probes were the clock's
    assert "iteration 3" in golden.timing_dependence(report("no_gain", [None, "optimal", "time_limit"]))
    # the work limit stops a probe the same way on every machine; the clock does not
    worked = report("no_gain", [None, "optimal", "work_limit"])
    worked["signatures"]["s"]["egraph"]["saturation"]["per_iteration"][2]["probe_clocked"] = False
    assert golden.timing_dependence(worked) is None
    worked["signatures"]["s"]["egraph"]["saturation"]["per_iteration"][2]["probe_clocked"] = True
    assert "iteration 3" in golden.timing_dependence(worked)
    # saturated: the probes decided nothing (the final e-graph is the last one)
    assert golden.timing_dependence(report("saturated", [None, "time_limit"])) is None


def test_an_extraction_the_clock_cut_short_depends_on_the_machine_and_one_the_work_limit_stopped_does_not():
    def report(extraction):
        return {"signatures": {"s": {"egraph": {"stop_reason": "saturated"}, "extraction": extraction}}}
    assert golden.timing_dependence(report({"status": "work_limit", "clocked": False})) is None
    assert "clock" in golden.timing_dependence(report({"status": "optimal", "clocked": True}))
    # written before the work limit: a time_limit status was the clock's
    assert "time_limit" in golden.timing_dependence(report({"status": "time_limit"}))
