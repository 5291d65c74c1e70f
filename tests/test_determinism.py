"""The same input and flags give the same output bytes, across processes."""
import os
import subprocess
import sys


def test_two_conversions_write_identical_bytes(zoo_cache, tmp_path):
    outs = []
    for i in range(2):
        out = str(tmp_path / f"out{i}")
        proc = subprocess.run([sys.executable, "-m", "tensat_tf.cli.main", "convert", "zoo:bert_tiny",
                               f"--output_dir={out}"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    for rel in ("saved_model.pb", os.path.join("variables", "variables.index")):
        with open(os.path.join(outs[0], rel), "rb") as a, open(os.path.join(outs[1], rel), "rb") as b:
            assert a.read() == b.read(), rel
