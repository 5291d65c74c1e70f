"""tensat_tf.options: importable without TensorFlow or egglog, checked before any work, handed on as plain data."""
import json
import os
import subprocess
import sys

import pytest

from tensat_tf import errors, report
from tensat_tf.options import Budget, EngineOptions, Options

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]


def test_import_needs_neither_tensorflow_nor_egglog():
    code = ("import sys, tensat_tf.options, tensat_tf.report; "
            "assert 'tensorflow' not in sys.modules and 'egglog' not in sys.modules, sorted(sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_round_trip_as_json_data():
    o = Options(signatures=("serving_default",), verify_batch_sizes=(2, 3), rtol=1e-4, tags=("serve", "gpu"),
                engine=EngineOptions(enable_rules=("merge",), rules_files=("x.rules",), method="greedy",
                                     budget=Budget(iterations=3, match_limit=None, seconds=7.5)),
                profile=True, profile_batch_sizes=(8,), warmup=True, warmup_model_name="m",
                progress=lambda text: None)
    data = json.loads(json.dumps(o.to_json()))          # what a worker process receives
    assert "progress" not in data and data["engine"]["budget"]["iterations"] == 3
    back = Options.from_json(data)
    assert back == o and back.progress is None
    assert isinstance(back.engine.budget, Budget) and back.engine.enable_rules == ("merge",)
    assert Options.from_json(Options().to_json()) == Options()


def test_warmup_name_defaults_to_the_output_folder():
    assert Options().warmup_name("/models/bert/2/") == "2"
    assert Options(warmup_model_name="bert").warmup_name("/models/bert/2") == "bert"
    assert Options().warmup_name("/") == "model"


def test_report_path_is_beside_the_output():
    assert report.default_path("/out/mlp/") == "/out/mlp.report.json"


@pytest.mark.parametrize("options, error, fragment", [
    (Options(engine=EngineOptions(budget=Budget(iterations=0))), errors.BadInput, "--iterations must be >= 1"),
    (Options(engine=EngineOptions(batch_size=0)), errors.BadInput, "--batch_size must be >= 1"),
    (Options(engine=EngineOptions(unknown_dim=0)), errors.BadInput, "--unknown_dim must be >= 1"),
    (Options(engine=EngineOptions(budget=Budget(match_limit=-1))), errors.BadInput, "--match_limit"),
    (Options(engine=EngineOptions(budget=Budget(seconds=0.0))), errors.BadInput, "--saturation_seconds"),
    (Options(engine=EngineOptions(method="annealing")), errors.BadInput, "--method must be one of ilp, greedy"),
    (Options(engine=EngineOptions(ilp_work=0)), errors.BadInput, "--ilp_work and --probe_work must be >= 1"),
    (Options(engine=EngineOptions(probe_work=0)), errors.BadInput, "--ilp_work and --probe_work must be >= 1"),
    (Options(engine=EngineOptions(rel_gap=1.0)), errors.BadInput, "--rel_gap must be >= 0 and < 1"),
    (Options(engine=EngineOptions(rel_gap=-0.01)), errors.BadInput, "--rel_gap must be >= 0 and < 1"),
    (Options(engine=EngineOptions(min_gain=-0.01)), errors.BadInput, "--min_gain must be >= 0 and < 1"),
    (Options(engine=EngineOptions(enable_rules=("no-such-rule",))), errors.UnknownName, "no-such-rule"),
    (Options(engine=EngineOptions(rules_files=("/nonexistent.rules",))), errors.BadInput, "--rules_file"),
    (Options(profile_threads=()), errors.BadInput, "--profile_threads needs at least one setting"),
    (Options(profile_margin=-0.1), errors.BadInput, "--profile_margin not negative"),
])
def test_check_rejects(options, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        options.check()
    assert type(info.value) is error


def test_check_accepts_the_defaults():
    assert Options().check() == Options()
    assert Options(engine=EngineOptions(budget=Budget(patience=None, match_limit=None))).check()


def test_flags_become_one_checked_options():
    from absl import flags

    from tensat_tf.cli import convert_cmd
    FLAGS = flags.FLAGS
    try:
        FLAGS.unparse_flags()
        FLAGS(["prog", "--rules=merge,tf-fold", "--noprofile", "--verify_batch_sizes=2,5", "--iterations=4",
               "--profile_threads=default", "--warmup", "--signatures=serving_default", "--unknown_dim=128",
               "--min_variable_elements=4096", "--ilp_work=900", "--probe_work=30", "--rel_gap=0.01",
               "--min_gain=0.02", "--strict"])
        o = convert_cmd.options_from_flags()
        assert o == Options(signatures=("serving_default",), verify_batch_sizes=(2, 5), profile=False,
                            profile_threads=(0,), warmup=True, strict=True, served_check=True,     # the CLI's default
                            engine=EngineOptions(enable_rules=("merge", "tf-fold"), unknown_dim=128,
                                                 min_variable_elements=4096, ilp_work=900, probe_work=30,
                                                 rel_gap=0.01, min_gain=0.02,
                                                 budget=Budget(iterations=4, seconds=60.0)))
        assert Options.from_json(json.loads(json.dumps(o.to_json()))) == o
        older = o.to_json()                      # as written before min_variable_elements was an engine option
        older["min_variable_elements"] = older["engine"].pop("min_variable_elements")
        assert Options.from_json(json.loads(json.dumps(older))) == o
        FLAGS.unparse_flags()
        FLAGS(["prog", "--ilp_seconds=0"])
        with pytest.raises(errors.BadInput, match="--ilp_seconds must be > 0"):
            convert_cmd.options_from_flags()
        FLAGS.unparse_flags()
        FLAGS(["prog", "--min_variable_elements=0"])
        with pytest.raises(errors.BadInput, match="--min_variable_elements must be >= 1"):
            convert_cmd.options_from_flags()
    finally:
        FLAGS.unparse_flags()


def _one_line_error(proc, code, fragment):
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensat_tf: error:") and fragment in lines[0], proc.stderr


def test_convert_rejects_bad_options_before_any_work(tmp_path):
    src = tmp_path / "model"
    src.mkdir()                                 # not a SavedModel: loading it would fail with exit 11 instead
    out = tmp_path / "out"
    proc = subprocess.run(CLI + ["convert", str(src), f"--output_dir={out}", "--rules=no-such-rule"],
                          capture_output=True, text=True, timeout=120)
    _one_line_error(proc, errors.UnknownName.exit_code, "no-such-rule")
    proc = subprocess.run(CLI + ["convert", str(src), f"--output_dir={out}", "--patience=0"],
                          capture_output=True, text=True, timeout=120)
    _one_line_error(proc, errors.BadInput.exit_code, "--patience must be >= 1")
    assert not out.exists()


def test_batch_rejects_bad_options_once_before_any_worker(tmp_path):
    """Before, each worker found the bad option and the batch failed model by model (exit 40)."""
    root = tmp_path / "root"
    proc = subprocess.run(CLI + ["batch", "--input_glob=zoo:mlp", "--input_glob=zoo:lstm", f"--output_root={root}",
                                 "--iterations=0"], capture_output=True, text=True, timeout=120)
    _one_line_error(proc, errors.BadInput.exit_code, "--iterations must be >= 1")
    assert not proc.stdout.strip()              # no per-model result line: no worker ran
    assert not os.path.exists(root)
