"""Bad input: one clear line on stderr, a distinct exit code, nothing written, the input untouched."""
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import tree_digest
from tensat_tf import errors, zoo

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]


class _TableModel(tf.Module):
    """A lookup-table signature, a string-input signature and a plain numeric one."""

    def __init__(self):
        init = tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64))
        self.table = tf.lookup.StaticHashTable(init, -1)
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="ids")])
    def uses_table(self, ids):
        return {"n": tf.cast(self.table.lookup(tf.strings.as_string(ids)), tf.float32)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def strlen(self, text):
        return {"len": tf.strings.length(text)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def dense(self, x):
        return {"y": tf.matmul(x, self.w)}


@pytest.fixture(scope="module")
def table_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("table") / "model")
    m = _TableModel()
    tf.saved_model.save(m, path, signatures={"uses_table": m.uses_table, "strlen": m.strlen, "dense": m.dense})
    return path


@pytest.fixture()
def mlp_copy(zoo_cache, tmp_path):
    path = str(tmp_path / "mlp")
    shutil.copytree(zoo.resolve("zoo:mlp"), path)
    return path


def run_cli(*args):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def assert_clean_failure(proc, code, fragment, out, src=None, digest=None):
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tensat_tf: error:") and fragment in lines[0], lines[0]
    assert not os.path.exists(out)
    parent = os.path.dirname(out)
    assert not [f for f in os.listdir(parent) if f.startswith(".tensat_tf-")], "staging folder left behind"
    if src is not None:
        assert tree_digest(src) == digest, "the input was modified"


def test_missing_path(tmp_path):
    out = str(tmp_path / "out")
    assert_clean_failure(run_cli("convert", str(tmp_path / "nope"), f"--output_dir={out}"),
                         errors.MissingPath.exit_code, "no such file", out)


def test_not_a_saved_model(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello")
    out = str(tmp_path / "out")
    digest = tree_digest(str(src))
    assert_clean_failure(run_cli("convert", str(src), f"--output_dir={out}"),
                         errors.NotASavedModel.exit_code, "not a SavedModel", out, str(src), digest)


def test_corrupt_saved_model_pb(mlp_copy, tmp_path):
    with open(os.path.join(mlp_copy, "saved_model.pb"), "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff\xff\xff garbage \x00\x07" * 4)
    out = str(tmp_path / "out")
    digest = tree_digest(mlp_copy)
    assert_clean_failure(run_cli("convert", mlp_copy, f"--output_dir={out}"),
                         errors.CorruptSavedModel.exit_code, "corrupt saved_model.pb", out, mlp_copy, digest)


def test_truncated_variables(mlp_copy, tmp_path):
    data = [f for f in os.listdir(os.path.join(mlp_copy, "variables")) if f.startswith("variables.data")][0]
    path = os.path.join(mlp_copy, "variables", data)
    os.truncate(path, os.path.getsize(path) // 2)
    out = str(tmp_path / "out")
    digest = tree_digest(mlp_copy)
    assert_clean_failure(run_cli("convert", mlp_copy, f"--output_dir={out}"),
                         errors.BadVariables.exit_code, "variables", out, mlp_copy, digest)


def test_missing_variables(mlp_copy, tmp_path):
    shutil.rmtree(os.path.join(mlp_copy, "variables"))
    out = str(tmp_path / "out")
    digest = tree_digest(mlp_copy)
    assert_clean_failure(run_cli("convert", mlp_copy, f"--output_dir={out}"),
                         errors.BadVariables.exit_code, "variables missing", out, mlp_copy, digest)


def test_output_exists_and_not_empty(mlp_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    proc = run_cli("convert", mlp_copy, f"--output_dir={out}")
    assert proc.returncode == errors.OutputExists.exit_code
    assert len(proc.stderr.strip().splitlines()) == 1 and "--overwrite" in proc.stderr
    assert os.listdir(out) == ["keep.txt"]


@pytest.mark.slow
class _ImpureModel(tf.Module):
    """Signatures that are not functions of their inputs: one samples (a VAE's z, raw tf.random.normal), one writes a
    variable on every call (a seed generator's state), and a plain one."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], seed=[1, 2]))
        self.calls = tf.Variable(0, dtype=tf.int64, name="calls")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def sample(self, x):
        m = tf.matmul(x, self.w)
        return {"mean": m, "z": m + tf.random.normal(tf.shape(m))}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def counted(self, x):
        self.calls.assign_add(1)
        return {"y": tf.matmul(x, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def dense(self, x):
        return {"y": tf.matmul(x, self.w)}


def test_a_signature_that_is_not_a_function_of_its_inputs_is_refused(tmp_path):
    """A random output's noise floor is as large as the output, so any conversion of it would have passed: refused
    by name (the original called twice on the same inputs). A signature that writes a variable failed to run once
    frozen, in a message about types; now it is refused as what it is. The plain one still converts."""
    src = str(tmp_path / "impure")
    m = _ImpureModel()
    tf.saved_model.save(m, src, signatures={"sample": m.sample, "counted": m.counted, "dense": m.dense})
    out = str(tmp_path / "out")
    digest = tree_digest(src)
    proc = run_cli("convert", src, f"--output_dir={out}", "--signatures=sample", "--noprofile")
    assert_clean_failure(proc, errors.UnsupportedSignature.exit_code, "output 'z' is not deterministic", out, src,
                         digest)
    assert "RandomStandardNormal" in proc.stderr
    assert_clean_failure(run_cli("convert", src, f"--output_dir={out}", "--signatures=counted", "--noprofile"),
                         errors.UnsupportedSignature.exit_code,
                         "writes its own variables when called (AssignAddVariableOp on calls:",
                         out, src, digest)
    proc = run_cli("convert", src, f"--output_dir={out}", "--signatures=dense", "--noprofile")
    assert proc.returncode == 0, proc.stderr
    assert tree_digest(src) == digest


def test_table_signature_refused_by_name(table_model, tmp_path):
    out = str(tmp_path / "out")
    digest = tree_digest(table_model)
    assert_clean_failure(run_cli("convert", table_model, f"--output_dir={out}"),
                         errors.UnsupportedSignature.exit_code, "'strlen'", out, table_model, digest)
    assert_clean_failure(run_cli("convert", table_model, f"--output_dir={out}", "--signatures=uses_table"),
                         errors.UnsupportedSignature.exit_code, "'uses_table'", out, table_model, digest)


def test_string_input_refused_by_name(table_model, tmp_path):
    out = str(tmp_path / "out")
    assert_clean_failure(run_cli("convert", table_model, f"--output_dir={out}", "--signatures=strlen"),
                         errors.UnsupportedSignature.exit_code, "string input 'text'", out)


@pytest.mark.slow
def test_other_signatures_convert_when_selected(table_model, tmp_path):
    out = str(tmp_path / "out")
    report = str(tmp_path / "report.json")
    proc = run_cli("convert", table_model, f"--output_dir={out}", "--signatures=dense", f"--report={report}")
    assert proc.returncode == 0, proc.stderr
    assert set(tf.saved_model.load(out).signatures) == {"dense"}
    assert os.path.exists(report)


def test_unknown_signature(table_model, tmp_path):
    out = str(tmp_path / "out")
    assert_clean_failure(run_cli("convert", table_model, f"--output_dir={out}", "--signatures=nope"),
                         errors.UnknownName.exit_code, "unknown signature", out)


def test_unknown_zoo_model(tmp_path):
    out = str(tmp_path / "out")
    assert_clean_failure(run_cli("convert", "zoo:nope", f"--output_dir={out}"),
                         errors.UnknownName.exit_code, "unknown zoo model", out)


def test_exit_codes_are_distinct():
    codes = list(errors.EXIT_CODES.values())
    assert len(codes) == len(set(codes)) and 0 not in codes


def test_safety_exit_codes_are_pinned():
    """Scripts rely on them (README "Exit codes"): unsafe ops, unsafe asset, original fails here, interrupted."""
    assert (errors.UnsafeOps.exit_code, errors.UnsafeAsset.exit_code, errors.OriginalFails.exit_code,
            errors.Interrupted.exit_code) == (17, 18, 19, 130)
    assert all(issubclass(c, errors.BadInput) for c in (errors.UnsafeOps, errors.UnsafeAsset, errors.OriginalFails))


def _catches(pid, sig):
    """Whether process pid has a handler for sig (SigCgt in /proc; Python itself catches SIGINT, not SIGTERM)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (int(sig) - 1) & 1)


@pytest.mark.parametrize("delay", [0.5, 1.5, 4.0])
def test_interrupt_before_the_command_runs_is_one_line(tmp_path, delay):
    """SIGINT while the CLI is still importing TF or loading (before any output): one line, exit 130, no traceback,
    nothing written. The delays land in different places of TF's import; an interrupt inside a native module's
    initialization once became "internal error: ImportError", was swallowed (the model was published), or made
    the process die by SIGINT (tensat_tf/interrupt.py)."""
    import signal
    import time
    proc = subprocess.Popen(CLI + ["convert", "zoo:mlp", f"--output_dir={tmp_path / 'out'}", "--noprogress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _catches(proc.pid, signal.SIGTERM):   # the CLI's handlers are in
        time.sleep(0.02)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == errors.Interrupted.exit_code, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tensat_tf: error: interrupted"), err
    assert not os.path.exists(tmp_path / "out")


def test_native_code_printing_an_interrupt_prints_nothing():
    """Native code prints a Python callback's exception with PyErr_Print (sys.excepthook): an interrupt that landed in
    protobuf's descriptor_pool.Default() during TF's import printed a traceback before the CLI's one line. Here
    PyRun_SimpleString plays the native caller: the KeyboardInterrupt is not printed, another error still is."""
    code = ("import ctypes; from tensat_tf.cli import main; main.install_signal_handlers(); "
            "ctypes.pythonapi.PyRun_SimpleString(b'raise KeyboardInterrupt'); "
            "ctypes.pythonapi.PyRun_SimpleString(b'raise ValueError(\\'still shown\\')')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "KeyboardInterrupt" not in proc.stderr and "ValueError: still shown" in proc.stderr, proc.stderr


def test_a_signal_during_the_import_of_save_is_an_interrupt(monkeypatch):
    """A signal that lands while tensat_tf.io.save is being imported (the module exists, committing() not yet): the
    handler asks to stop and raises KeyboardInterrupt; it once raised AttributeError ("internal error")."""
    import signal
    import types
    from tensat_tf import interrupt
    from tensat_tf.cli import main as cli_main
    monkeypatch.setitem(sys.modules, "tensat_tf.io.save", types.ModuleType("tensat_tf.io.save"))
    monkeypatch.setattr(interrupt, "_requested", False)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt):
            cli_main._on_signal(signal.SIGINT, None)
        assert interrupt.requested()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_an_error_caused_by_an_interrupt_is_reported_as_the_interrupt(monkeypatch, capsys):
    """Native code turns a KeyboardInterrupt into another exception (pybind: "ImportError: initialization failed");
    once the user asked to stop, the CLI reports the interrupt, not an internal error."""
    from tensat_tf import interrupt
    from tensat_tf.cli import convert_cmd, main as cli_main

    def fails(argv):
        raise ImportError("initialization failed")
    monkeypatch.setattr(convert_cmd, "main", fails)
    assert cli_main.main(["tensat_tf", "convert"]) == errors.InternalError.exit_code
    monkeypatch.setattr(interrupt, "_requested", True)
    assert cli_main.main(["tensat_tf", "convert"]) == errors.Interrupted.exit_code
    assert capsys.readouterr().err.strip().splitlines()[-1] == "tensat_tf: error: interrupted: nothing written"


def test_a_swallowed_interrupt_does_not_publish(tmp_path, monkeypatch):
    """An interrupt some library caught on the way leaves its flag: publish refuses before moving anything."""
    from tensat_tf import interrupt
    from tensat_tf.io import save
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "saved_model.pb").write_bytes(b"x")
    monkeypatch.setattr(interrupt, "_requested", True)
    monkeypatch.setattr(save, "_committing", False)      # a publish earlier in this process left it set
    with pytest.raises(KeyboardInterrupt):
        save.publish(str(staged), str(tmp_path / "out"), overwrite=False)
    assert not (tmp_path / "out").exists() and (staged / "saved_model.pb").exists() and not save.committing()
