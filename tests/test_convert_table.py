"""The before/after table `tensat_tf convert` prints (tensat_tf/cli/convert_cmd.py _table), from a report."""
from __future__ import annotations

from tensat_tf import report as report_file
from tensat_tf.cli import convert_cmd


def _report(stop: str, statuses: list, clocked: bool = False) -> dict:
    its = [{"index": k + 1, "probe_cost": None if st is None else 1.0, **({"probe_status": st} if st else {}),
            **({"probe_clocked": clocked} if st else {})} for k, st in enumerate(statuses)]
    sig = {"nodes_before": 10, "nodes_after": 8, "verification": {"max_rel_diff": 1e-6, "passed": True},
           "egraph": {"enodes": 40, "eclasses": 30, "iterations": len(its), "stop_reason": stop,
                      "saturation": {"per_iteration": its}},
           "extraction": {"method": "ilp", "status": "optimal", "cost_before": 2.0, "cost_after": 1.5},
           "passes": [], "ops_before": {"Mul": 2}, "ops_after": {"Mul": 1}}
    return {"signatures": {"serving_default": sig}, "timing_s": {"total": 1.0}}


def test_the_table_says_when_saturation_stopped_on_an_unproven_probe():
    text = convert_cmd._table(_report("no_gain", [None, "optimal", "work_limit"]))
    assert "unproven probes (after iteration 3): a larger --probe_work" in text
    text = convert_cmd._table(_report("no_gain", [None, "optimal", "time_limit"], clocked=True))
    assert "unproven probes (after iteration 3): a larger --probe_seconds" in text
    assert "unproven probes" not in convert_cmd._table(_report("no_gain", [None, "optimal", "optimal"]))
    # saturated: the probes decided nothing
    assert "unproven probes" not in convert_cmd._table(_report("saturated", [None, "time_limit"], clocked=True))


def test_the_table_says_how_to_serve_variable_weights_on_onednn():
    report = _report("saturated", [None])
    report["signatures"]["serving_default"]["extraction"]["device"] = "cpu"
    report["weights"] = {"variables": 12, "min_variable_elements": 1024}
    text = convert_cmd._table(report)
    assert "serving: 12 weights are variables" in text and "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1" in text
    # no variables, or priced for a runtime without oneDNN's kernels: nothing to say
    report["weights"]["variables"] = 1
    assert "serving: 1 weight is a variable;" in convert_cmd._table(report)
    report["weights"]["variables"] = 0
    assert "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS" not in convert_cmd._table(report)
    report["weights"]["variables"] = 12
    report["signatures"]["serving_default"]["extraction"]["device"] = "cpu-eigen"
    assert "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS" not in convert_cmd._table(report)


def test_a_signature_that_reuses_another_ones_graph_is_one_line():
    import copy
    report = _report("no_gain", [None, "optimal"])
    first = report["signatures"]["serving_default"]
    report["signatures"] = {"serve": first, "serving_default": dict(copy.deepcopy(first), same_as="serve")}
    text = convert_cmd._table(report)
    assert "the same graph, inputs and outputs as serve: optimized once" in text
    assert text.count("e-graph 40 e-nodes") == 1 and text.count("signature serving_default: nodes 10 -> 8") == 1


def test_a_stop_for_no_gain_after_a_probe_the_clock_cut_short_depends_on_the_machine():
    def report(stop, statuses):
        its = [{"index": k + 1, "probe_cost": 1.0, **({"probe_status": st} if st else {})}
               for k, st in enumerate(statuses)]
        return {"signatures": {"s": {"egraph": {"stop_reason": stop, "saturation": {"per_iteration": its}},
                                     "extraction": {"status": "optimal"}}}}
    assert report_file.clock_dependence(report("no_gain", [None, "optimal", "optimal"])) is None
    # a report written before the work limit: its unproven probes were the clock's
    assert "iteration 3" in report_file.clock_dependence(report("no_gain", [None, "optimal", "time_limit"]))
    # the work limit stops a probe the same way on every machine; the clock does not
    worked = report("no_gain", [None, "optimal", "work_limit"])
    worked["signatures"]["s"]["egraph"]["saturation"]["per_iteration"][2]["probe_clocked"] = False
    assert report_file.clock_dependence(worked) is None
    worked["signatures"]["s"]["egraph"]["saturation"]["per_iteration"][2]["probe_clocked"] = True
    assert "iteration 3" in report_file.clock_dependence(worked)
    # saturated: the probes decided nothing (the final e-graph is the last one)
    assert report_file.clock_dependence(report("saturated", [None, "time_limit"])) is None


def test_an_extraction_the_clock_cut_short_depends_on_the_machine_and_one_the_work_limit_stopped_does_not():
    def report(extraction):
        return {"signatures": {"s": {"egraph": {"stop_reason": "saturated"}, "extraction": extraction}}}
    assert report_file.clock_dependence(report({"status": "work_limit", "clocked": False})) is None
    assert "clock" in report_file.clock_dependence(report({"status": "optimal", "clocked": True}))
    # written before the work limit: a time_limit status was the clock's
    assert "time_limit" in report_file.clock_dependence(report({"status": "time_limit"}))


def test_the_table_says_when_the_clock_decided_part_of_the_conversion():
    report = _report("saturated", [None])
    assert "reproducibility" not in convert_cmd._table(report)
    report["signatures"]["serving_default"]["extraction"]["clocked"] = True
    assert "reproducibility: the wall clock decided part of this conversion (serving_default: the clock cut " \
           "extraction short" in convert_cmd._table(report)


def test_the_table_gives_the_whole_calls_predicted_speed_up_beside_the_costs():
    report = _report("saturated", [None])
    assert "predicted cost 2.0 -> 1.5 ms\n" in convert_cmd._table(report) + "\n"     # an old report: no gain
    report["signatures"]["serving_default"]["extraction"]["predicted_gain"] = 1.104
    assert "predicted cost 2.0 -> 1.5 ms (the call 1.104x as fast)" in convert_cmd._table(report)
    # kept under --min_gain: the reason gives the gain, the costs are equal
    report["signatures"]["serving_default"]["extraction"].update(cost_after=2.0, predicted_gain=1.002,
                                                                 kept_input="extracted graph is predicted only ...")
    assert "predicted cost 2.0 -> 2.0 ms (kept input: extracted graph" in convert_cmd._table(report)
