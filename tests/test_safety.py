"""A model is code, and conversion runs it: unsafe ops and assets are refused before anything runs (exit 17, 18), a
model TF itself cannot run is named as such (19), and Ctrl-C leaves nothing behind (130)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from conftest import tree_digest
from tensat_tf import errors, zoo
from tensat_tf.convert import convert
from tensat_tf.options import Options
from tensat_tf.io import load, save, scan

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]
FAST = Options(profile=False)


def run_cli(*args, timeout=300):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout)


def one_line(proc, code, *fragments):
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tensat_tf: error:"), lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def no_staging(parent):
    return not [f for f in os.listdir(parent) if f.startswith(".tensat_tf-")]


def pb(path):
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return sm


# --- models with effects outside the graph ------------------------------------------------------------------------

class _Effects(tf.Module):
    """One dense signature plus one effect, chosen by `kind`."""

    def __init__(self, kind, target=""):
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], seed=[1, 2]))
        self.kind, self.target = kind, target
        if kind == "helper_writes":     # a traced function that no signature calls
            def helper():
                tf.io.write_file(target, "pwned")
            self.helper = tf.function(helper)
            self.helper.get_concrete_function()

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def serve(self, x):
        y = tf.matmul(x, self.w)
        if self.kind == "write":
            with tf.control_dependencies([tf.io.write_file(self.target, "pwned")]):
                y = tf.identity(y)
        elif self.kind == "read":
            y = y + tf.cast(tf.strings.length(tf.io.read_file(self.target)), tf.float32) * 0.0
        elif self.kind == "print":
            with tf.control_dependencies([tf.print("hello from the model")]):
                y = tf.identity(y)
        elif self.kind == "save":
            with tf.control_dependencies([tf.raw_ops.SaveV2(prefix=self.target, tensor_names=["w"],
                                                            shape_and_slices=[""], tensors=[self.w])]):
                y = tf.identity(y)
        return {"y": y}


def build(path, kind, target=""):
    m = _Effects(kind, target)
    tf.saved_model.save(m, str(path), signatures={"serving_default": m.serve})
    return str(path)


def test_zoo_models_scan_clean(zoo_cache):
    """The SavedModels' own save/restore functions hold SaveV2/RestoreV2/MergeV2Checkpoints: not refused."""
    for name in ("mlp", "keras_cnn", "lstm"):
        sm = pb(zoo.resolve(f"zoo:{name}"))
        ops = {n.op for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def}
        assert {"SaveV2", "RestoreV2", "MergeV2Checkpoints"} <= ops
        assert scan.find_unsafe(sm) == {}, name


def test_tf1_saved_model_scans_clean(tmp_path):
    """A TF1 SavedModel keeps its saver (save/SaveV2, save/RestoreV2) as graph nodes that saver_def names."""
    path = str(tmp_path / "tf1")
    with tf.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as sess:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.get_variable("w", [4, 4])
        y = tf.matmul(x, w, name="y")
        sess.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(path)
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={
            "serving_default": tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})})
        builder.save()
    sm = pb(path)
    assert {"SaveV2", "RestoreV2"} <= {n.op for n in sm.meta_graphs[0].graph_def.node}
    assert scan.find_unsafe(sm) == {}


def _saved_model_cli_denylist():
    """saved_model_cli's deny-list read from its source: importing that module defines absl flags (e.g. `worker`)
    in the global registry, which clash with ours once tensat_tf.cli is imported in the same process."""
    import ast
    import importlib.util
    source = open(importlib.util.find_spec("tensorflow.python.tools.saved_model_cli").origin).read()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_OP_DENYLIST" for t in node.targets):
            return set(ast.literal_eval(node.value.args[0]))
    raise AssertionError("saved_model_cli no longer declares _OP_DENYLIST")


def test_denylist_covers_saved_model_cli():
    denylist = _saved_model_cli_denylist()
    assert {"WriteFile", "ReadFile", "PrintV2"} <= denylist
    assert denylist <= set(scan.DENYLIST)
    assert scan.CHECKPOINT_OPS <= set(scan.DENYLIST)


def test_write_file_refused_nothing_written(tmp_path):
    target = str(tmp_path / "pwned.txt")
    src = build(tmp_path / "m", "write", target)
    out = str(tmp_path / "out")
    digest = tree_digest(src)
    line = one_line(run_cli("convert", src, f"--output_dir={out}", "--noprofile", "--noprogress"),
                    errors.UnsafeOps.exit_code, "WriteFile", "--allow_ops=WriteFile", "__inference_serve")
    assert "nothing of it was run" in line
    assert not os.path.exists(target) and not os.path.exists(out) and no_staging(str(tmp_path))
    assert tree_digest(src) == digest


def test_allow_ops_lets_it_run(tmp_path):
    """--allow_ops lifts the refusal for the named op: the model then really writes its file (what was prevented)."""
    target = str(tmp_path / "written.txt")
    src = build(tmp_path / "m", "write", target)
    with pytest.raises(errors.UnsafeOps):
        convert(src, str(tmp_path / "o1"), Options(profile=False, allow_ops=("ReadFile",)))   # another op: no
    assert not os.path.exists(target)
    convert(src, str(tmp_path / "o2"), Options(profile=False, allow_ops=("WriteFile",)))
    assert open(target).read() == "pwned"


def test_read_file_of_host_refused(tmp_path):
    src = build(tmp_path / "m", "read", "/etc/hostname")
    with pytest.raises(errors.UnsafeOps, match=r"ReadFile \(reads files; in function __inference_serve"):
        load.load(src)


def test_print_and_checkpoint_write_in_signature_refused(tmp_path):
    with pytest.raises(errors.UnsafeOps, match="PrintV2"):
        load.load(build(tmp_path / "p", "print"))
    # SaveV2 in a signature is refused although the model's own checkpoint functions hold SaveV2 too
    with pytest.raises(errors.UnsafeOps, match=r"SaveV2 \(writes files; in function __inference_serve") as e:
        load.load(build(tmp_path / "s", "save", str(tmp_path / "ckpt")))
    assert "_traced_save" not in str(e.value)


def test_function_no_signature_calls_is_scanned(tmp_path):
    target = str(tmp_path / "pwned.txt")
    src = build(tmp_path / "m", "helper_writes", target)
    sm = pb(src)
    assert "WriteFile" not in {n.op for n in sm.meta_graphs[0].graph_def.node}
    with pytest.raises(errors.UnsafeOps, match="WriteFile"):
        convert(src, str(tmp_path / "out"), FAST)
    assert not os.path.exists(target)


def test_checkpoint_op_outside_saver_refused():
    """A RestoreV2 node in the graph itself, not among saver_def's nodes, is refused; the same op in the saver's
    subgraph is the SavedModel's own restore and is not."""
    sm = saved_model_pb2.SavedModel()
    mg = sm.meta_graphs.add()
    mg.graph_def.node.add(name="prefix", op="Const")
    mg.graph_def.node.add(name="restore", op="RestoreV2", input=["prefix"])
    assert scan.find_unsafe(sm) == {"RestoreV2": ["graph node restore"]}
    mg.saver_def.restore_op_name = "restore"
    assert scan.find_unsafe(sm) == {}
    # a function the saver calls is checkpoint code only while nothing else calls it, by attr or by op type
    fn = mg.graph_def.library.function.add()
    fn.signature.name = "traced_save"
    fn.node_def.add(name="save", op="SaveV2")
    assert scan.find_unsafe(sm) == {"SaveV2": ["function traced_save node save"]}      # reached from nothing
    mg.graph_def.node[1].attr["f"].func.name = "traced_save"                           # the restore node calls it
    assert scan.find_unsafe(sm) == {}
    mg.graph_def.node.add(name="serve", op="traced_save")                             # a call by op type
    assert scan.find_unsafe(sm) == {"SaveV2": ["function traced_save node save"]}
    del mg.graph_def.node[-1]
    node = mg.graph_def.node.add(name="proto", op="DecodeProtoV2")
    node.attr["descriptor_source"].s = b"local://"
    assert scan.find_unsafe(sm) == {}
    node.attr["descriptor_source"].s = b"/etc/descriptors.bin"
    assert list(scan.find_unsafe(sm)) == ["DecodeProtoV2"]


@pytest.mark.slow
def test_batch_refuses_in_its_worker(tmp_path):
    target = str(tmp_path / "pwned.txt")
    models = tmp_path / "models"
    models.mkdir()
    build(models / "bad", "write", target)
    proc = run_cli("batch", f"--input_glob={models}/*", f"--output_root={tmp_path / 'root'}", "--noprofile",
                   "--noprogress")
    assert proc.returncode == errors.BatchFailed.exit_code, proc.stderr
    assert '"exit_code": 17' in proc.stdout and "WriteFile" in proc.stdout
    assert not os.path.exists(target)
    proc = run_cli("batch", f"--input_glob={models}/*", f"--output_root={tmp_path / 'root'}", "--noprofile",
                   "--noprogress", "--allow_ops=WriteFile")       # the flag reaches the workers
    assert proc.returncode == 0, proc.stderr
    assert open(target).read() == "pwned"


def test_serving_mode_refuses(tmp_path):
    target = str(tmp_path / "pwned.txt")
    base = tmp_path / "base"
    base.mkdir()
    build(base / "1", "write", target)
    one_line(run_cli("convert", f"--model_base_path={base}", "--noprofile", "--noprogress"),
             errors.UnsafeOps.exit_code, "WriteFile")
    assert sorted(os.listdir(base)) == ["1"]
    assert not os.path.exists(target)


# --- assets ---------------------------------------------------------------------------------------------------------

@pytest.fixture()
def mlp_copy(zoo_cache, tmp_path):
    path = str(tmp_path / "mlp")
    shutil.copytree(zoo.resolve("zoo:mlp"), path)
    os.makedirs(os.path.join(path, "assets"), exist_ok=True)
    return path


@pytest.mark.parametrize("kind", ["host_file", "host_dir", "extra_folder_link", "fifo", "loop", "broken"])
def test_unsafe_assets_refused(mlp_copy, tmp_path, kind):
    assets = os.path.join(mlp_copy, "assets")
    if kind == "host_file":
        os.symlink("/etc/hostname", os.path.join(assets, "host"))
    elif kind == "host_dir":
        os.makedirs(os.path.join(assets, "sub"))
        os.symlink("/etc", os.path.join(assets, "sub", "etc"))
    elif kind == "extra_folder_link":
        os.symlink("/etc", os.path.join(mlp_copy, "assets.extra"))
    elif kind == "fifo":
        os.mkfifo(os.path.join(assets, "pipe"))
    elif kind == "loop":
        os.symlink("..", os.path.join(assets, "up"))         # assets/up -> the SavedModel folder, which holds assets
    elif kind == "broken":
        os.symlink("nothing-here", os.path.join(assets, "gone"))
    expected = {"host_file": "assets/host is a link to /etc/hostname", "host_dir": "assets/sub/etc is a link to /etc",
                "extra_folder_link": "assets.extra is a link to /etc", "fifo": "assets/pipe is a fifo",
                "loop": "(a loop)", "broken": "assets/gone is a broken link"}[kind]
    with pytest.raises(errors.UnsafeAsset) as e:
        load.check_saved_model_dir(mlp_copy)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_unsafe_asset_cli_nothing_written(mlp_copy, tmp_path):
    os.symlink("/etc", os.path.join(mlp_copy, "assets", "etc"))
    out = str(tmp_path / "out")
    one_line(run_cli("convert", mlp_copy, f"--output_dir={out}", "--noprofile", "--noprogress"),
             errors.UnsafeAsset.exit_code, "assets/etc is a link to /etc")
    assert not os.path.exists(out) and no_staging(str(tmp_path))


def test_links_inside_are_copied_as_content(mlp_copy, tmp_path):
    assets = os.path.join(mlp_copy, "assets")
    with open(os.path.join(assets, "vocab.txt"), "w") as f:
        f.write("a\nb\n")
    os.symlink("vocab.txt", os.path.join(assets, "alias.txt"))
    os.symlink("../variables", os.path.join(assets, "vars"))          # a folder inside the SavedModel
    out = str(tmp_path / "out")
    convert(mlp_copy, out, FAST)
    for name in ("alias.txt", "vars"):
        assert not os.path.islink(os.path.join(out, "assets", name))
    assert open(os.path.join(out, "assets", "alias.txt")).read() == "a\nb\n"
    assert sorted(os.listdir(os.path.join(out, "assets", "vars"))) == sorted(
        os.listdir(os.path.join(mlp_copy, "variables")))


def test_asset_file_def_outside_assets_refused(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\n")
    m = _Effects("none")
    m.vocab = tf.saved_model.Asset(str(vocab))
    src = str(tmp_path / "m")
    tf.saved_model.save(m, src, signatures={"serving_default": m.serve})
    load.check_saved_model_dir(src)
    sm = pb(src)
    assert len(sm.meta_graphs[0].asset_file_def) == 1
    sm.meta_graphs[0].asset_file_def[0].filename = "../../../etc/hostname"
    with open(os.path.join(src, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())
    with pytest.raises(errors.UnsafeAsset, match="names the asset file '../../../etc/hostname'"):
        load.check_saved_model_dir(src)


# --- the original cannot run here -----------------------------------------------------------------------------------

class _Raises(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def asserts(self, x):
        tf.debugging.assert_less(x, 0.0, message="x must be negative")     # random normal inputs are not
        return {"y": tf.matmul(x, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="x")])
    def gathers(self, x):
        return {"y": tf.gather(self.w[0], tf.cast(tf.abs(x) * 100.0, tf.int32))}     # indices out of range


@pytest.fixture(scope="module")
def raising_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("raises") / "model")
    m = _Raises()
    tf.saved_model.save(m, path, signatures={"asserts": m.asserts, "gathers": m.gathers})
    return path


def test_original_fails_named(raising_model, tmp_path):
    with pytest.raises(errors.OriginalFails, match=r"signature gathers, batch 1.*op GatherV2 \(node GatherV2\): "
                                                   r"InvalidArgumentError: indices\[0,0\] = \d+ is not in \[0, 4\)"):
        convert(raising_model, str(tmp_path / "o1"), Options(profile=False, signatures=["gathers"]))
    with pytest.raises(errors.OriginalFails, match=r"signature asserts.*op Assert .*x must be negative"):
        convert(raising_model, str(tmp_path / "o2"), Options(profile=False, signatures=["asserts"]))
    assert not os.path.exists(tmp_path / "o1") and not os.path.exists(tmp_path / "o2")


def test_original_fails_cli(raising_model, tmp_path):
    out = str(tmp_path / "out")
    one_line(run_cli("convert", raising_model, f"--output_dir={out}", "--signatures=gathers", "--noprofile",
                     "--noprogress"), errors.OriginalFails.exit_code, "op GatherV2", "fails in TensorFlow itself")
    assert not os.path.exists(out) and no_staging(str(tmp_path))


# --- interruption ---------------------------------------------------------------------------------------------------

class _Slow(tf.Module):
    """A long while loop of small matmuls, so a signal lands while the model runs in verification."""

    def __init__(self, steps: int):
        self.w = tf.Variable(tf.random.stateless_normal([64, 64], seed=[1, 2]) * 0.1)
        self.steps = steps

    @tf.function(input_signature=[tf.TensorSpec([None, 64], name="x")])
    def serve(self, x):
        y = tf.while_loop(lambda i, y: i < self.steps, lambda i, y: (i + 1, tf.tanh(tf.matmul(y, self.w))),
                          (0, x))[1]
        return {"y": y}


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """About a second per call on this machine, whatever its speed: 6,000 steps took a second on the first VM and
    30 ms on a later one, where verification (once its baselines ran before the output was staged) ended before
    the signal came."""
    probe, x = _Slow(6000), tf.ones([4, 64])
    probe.serve(x)
    t = time.perf_counter()
    probe.serve(x)
    steps = max(6000, int(6000 * 1.0 / max(time.perf_counter() - t, 1e-3)))
    path = str(tmp_path_factory.mktemp("slow") / "model")
    m = _Slow(steps)
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


def _interrupt_when_staging(args, parent, sig):
    proc = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    seen = None
    while time.monotonic() < deadline and proc.poll() is None:
        staged = [f for f in os.listdir(parent) if f.startswith(".tensat_tf-")]
        if staged:
            seen = staged[0]
            time.sleep(0.3)          # into verification: the model is running
            proc.send_signal(sig)
            break
        time.sleep(0.01)
    out, err = proc.communicate(timeout=120)
    assert seen is not None, f"no staging folder appeared; rc={proc.returncode} stderr={err}"
    assert f"-{proc.pid}@" in seen                 # the staging folder names its owner
    return proc, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_run_leaves_nothing(slow_model, tmp_path, sig):
    out = tmp_path / "out"
    proc, err = _interrupt_when_staging(["convert", slow_model, f"--output_dir={out}", "--noprofile", "--noprogress"],
                                        str(tmp_path), sig)
    assert proc.returncode == errors.Interrupted.exit_code, err
    assert err.strip().splitlines() == ["tensat_tf: error: interrupted: nothing written"], err
    assert not os.path.exists(out) and no_staging(str(tmp_path)), os.listdir(tmp_path)
    assert not os.path.exists(str(out) + ".onnx") and not os.path.exists(str(out) + ".report.json")


def test_stale_staging_removed_live_kept(mlp_copy, tmp_path):
    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "120"])
    try:
        names = {"dead": f".tensat_tf-{dead.pid}@{host}-abc123_x", "live": f".tensat_tf-{live.pid}@{host}-def456_y",
                 "other_host": f".tensat_tf-{dead.pid}@not-{host}-ghi789_z", "ownerless": ".tensat_tf-jkl012_w"}
        for n in names.values():
            os.makedirs(tmp_path / n / "variables")
            (tmp_path / n / "saved_model.pb").write_bytes(b"half-written")
        dead_onnx = f".tensat_tf-{dead.pid}@{host}-q1w2e3.onnx"      # a pending ONNX file of a killed run
        (tmp_path / dead_onnx).write_bytes(b"half-written")
        convert(mlp_copy, str(tmp_path / "out"), FAST)
        left = set(os.listdir(tmp_path))
        assert names["dead"] not in left and dead_onnx not in left
        assert {names["live"], names["other_host"], names["ownerless"]} <= left
    finally:
        live.kill()
        live.wait()
    assert save.remove_stale_staging(str(tmp_path)) == [names["live"]]      # its owner is gone now


@pytest.mark.parametrize("where", ["onnx_check", "publish"])
def test_interrupt_removes_staging_and_pending_onnx(mlp_copy, tmp_path, monkeypatch, where):
    """KeyboardInterrupt (what the CLI's handler raises) while the ONNX file is pending, or right at publishing:
    neither the staging folder nor the temporary ONNX file survives."""
    from tensat_tf import onnx_export

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(onnx_export if where == "onnx_check" else save,
                        "check" if where == "onnx_check" else "publish", interrupt)
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        convert(mlp_copy, out, Options(profile=False, emit_onnx=True))
    assert sorted(os.listdir(tmp_path)) == ["mlp"]
