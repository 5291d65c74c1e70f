"""absl flags of the e-graph engine (rules, saturation budgets, extraction, cost model), shared by the commands that
run the tensat pass, and their translation into tensat_tf.options.EngineOptions."""
from __future__ import annotations

from absl import flags

from tensat_tf.options import MIN_VARIABLE_ELEMENTS, UNKNOWN_DIM, Budget, EngineOptions

FLAGS = flags.FLAGS
flags.DEFINE_list("rules", None, "Rule names or families to enable (default: tensat, tf-fold, merge, einsum).")
flags.DEFINE_list("disable_rules", [], "Rule names or families to disable.")
flags.DEFINE_list("rules_file", [], "Extra rule files (rules syntax, see `tensat_tf rules --help`).")
flags.DEFINE_integer("iterations", 15, "Saturation: at most this many iterations.")
flags.DEFINE_integer("node_limit", 50_000, "Saturation: never exceed this many e-nodes (an iteration that would is "
                                           "rolled back and its most-matching rule banned). Unless set, the limit is "
                                           "20x the input's e-nodes (at least 2,000), capped at this value.")
flags.DEFINE_integer("saturation_work", Budget().work, "Saturation: work budget, in e-nodes searched (each iteration "
                     "searches the e-graph it starts from): where saturation stops, the same on every machine. Unless "
                     "set, 40 per input e-node (at least 20,000), capped at this value.")
flags.DEFINE_float("saturation_seconds", 60.0, "Saturation: wall-clock budget in seconds, the backstop (a stop on it "
                                               "depends on the machine). Unless set, 15 ms per input e-node (at least "
                                               "6 s), capped at this value.")
flags.DEFINE_integer("k_multi", 1, "Saturation: multi-pattern rules run only in the first k iterations.")
flags.DEFINE_integer("match_limit", 1_000, "Saturation backoff: a rule matching more than match_limit << times_banned "
                                           "times in an iteration is not applied and is banned for ban_length << "
                                           "times_banned iterations (egg's BackoffScheduler). 0: no backoff.")
flags.DEFINE_integer("ban_length", 5, "Saturation backoff: base ban length in iterations.")
flags.DEFINE_float("probe_seconds", EngineOptions().probe_seconds, "Saturation: after each iteration, extract "
                  "(within --probe_work, and at most this many seconds of wall clock) and stop once the best cost "
                  "has not improved for --patience iterations. 0: no probe.")
flags.DEFINE_integer("probe_work", EngineOptions().probe_work, "Saturation: the probe's work limit (as --ilp_work).")
flags.DEFINE_integer("patience", Budget().patience, "Saturation: iterations without a better probe cost before "
                                                   "stopping (the e-graph is then rolled back to the best one).")
flags.DEFINE_enum("method", "ilp", ["ilp", "greedy"], "Extraction method.")
flags.DEFINE_float("ilp_seconds", EngineOptions().ilp_seconds, "Extraction: hard wall-clock limit of the ILP, the "
                  "backstop of --ilp_work (the best choice found is kept when it runs out; the report says "
                  "'clocked', and another machine may choose otherwise).")
flags.DEFINE_integer("ilp_work", EngineOptions().ilp_work, "Extraction: work limit of the ILP, in solver limit checks "
                     "(HiGHS) or nodes (CBC): where an unproven search stops, the same on every machine (a check "
                     "costs 3-100 ms on a 2-core server).")
flags.DEFINE_float("rel_gap", EngineOptions().rel_gap, "Extraction: the probes and the last extraction stop once "
                  "their choice is proven within this relative gap of a lower bound.")
flags.DEFINE_float("min_gain", EngineOptions().min_gain, "The pass changes a signature's graph only where the whole "
                  "call is predicted at least this fraction faster (0: any predicted gain).")
flags.DEFINE_enum("solver", "auto", ["auto", "cbc", "highs"], "ILP solver (auto: HiGHS when installed, else CBC).")
flags.DEFINE_enum("cost_model", "analytic", ["analytic", "measured"],
                  "Cost of each e-node: analytic (FLOPs, bytes, per-op overhead) or measured on this device "
                  "(cached; see `tensat_tf calibrate`).")
flags.DEFINE_string("device", "auto", "What the cost model prices for: auto (this machine's CPU runtime: TF with "
                    "oneDNN's ops, profile cpu (cpu-frozen where TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1), or without, "
                    "profile cpu-eigen; TF decides per CPU, or TF_ENABLE_ONEDNN_OPTS), or a profile: cpu, "
                    "cpu-frozen, cpu-eigen, gpu-t4, gpu-h100. Name the serving machine's when it differs from this "
                    "one.")
flags.DEFINE_integer("batch_size", 1, "Batch size at which costs are evaluated (for unknown leading dimensions).")
flags.DEFINE_integer("unknown_dim", UNKNOWN_DIM, "Length of every other unknown dimension (a sequence length) at which "
                                                 "costs are evaluated and, in a conversion, verification and the "
                                                 "profile decision feed inputs. Set it to the length the model is "
                                                 "served at: what extraction prefers depends on it.")
flags.DEFINE_integer("min_variable_elements", MIN_VARIABLE_ELEMENTS, "Constants with at least this many elements are "
                     "saved as variables (the rest stay constants in the graph); costs price a served call's reads "
                     "of them.")


def engine_options() -> EngineOptions:
    """The EngineOptions of the flags, checked (EngineOptions.check: errors.BadInput, errors.UnknownName)."""
    return engine_from_flags().check()


def engine_from_flags() -> EngineOptions:
    """The EngineOptions of the flags, unchecked (convert_cmd.options_from_flags checks the whole Options)."""
    return EngineOptions(
        enable_rules=None if FLAGS.rules is None else tuple(FLAGS.rules), disable_rules=tuple(FLAGS.disable_rules),
        rules_files=tuple(FLAGS.rules_file), budget=budget_from_flags(),
        method=FLAGS.method, ilp_seconds=FLAGS.ilp_seconds, ilp_work=FLAGS.ilp_work, probe_seconds=FLAGS.probe_seconds,
        probe_work=FLAGS.probe_work, rel_gap=FLAGS.rel_gap, min_gain=FLAGS.min_gain, solver=FLAGS.solver,
        cost_model=FLAGS.cost_model, device=FLAGS.device, batch_size=FLAGS.batch_size, unknown_dim=FLAGS.unknown_dim,
        min_variable_elements=FLAGS.min_variable_elements)


def budget_from_flags() -> Budget:
    """A limit the user set wins over the one scaled to the input (Budget.limits)."""
    default = Budget()
    return Budget(
        FLAGS.iterations, FLAGS.node_limit, FLAGS.saturation_seconds, FLAGS.k_multi,
        match_limit=FLAGS.match_limit or None, ban_length=FLAGS.ban_length, patience=FLAGS.patience,
        nodes_per_enode=None if FLAGS["node_limit"].present else default.nodes_per_enode,
        work=FLAGS.saturation_work,
        work_per_enode=None if FLAGS["saturation_work"].present else default.work_per_enode,
        seconds_per_enode=None if FLAGS["saturation_seconds"].present else default.seconds_per_enode)
