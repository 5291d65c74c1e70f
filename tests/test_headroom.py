"""tools/headroom.py: a served call's kernel time split into contractions and the rest (run as a script: its absl
flags would clash with other tools' in one test process)."""
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "headroom.py")


class _Model(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.random.RandomState(0).standard_normal((64, 64)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def __call__(self, x):
        # a softmax never fuses into the matmul: one contraction and one other kernel at least
        return {"y": tf.nn.softmax(tf.matmul(x, self.w))}


def test_headroom_splits_contractions_from_the_rest(tmp_path):
    m = _Model()
    path = str(tmp_path / "sm")
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    proc = subprocess.run([sys.executable, TOOL, f"--paths={path}", "--blocks=2", "--runs=3", "--traced=2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"| {path} |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    wall, kernels, contractions = (float(c) for c in cells[1:4])
    share, headroom, others = float(cells[4].rstrip("%")) / 100, float(cells[5].rstrip("x")), cells[6]
    assert wall > 0 and 0 < contractions < kernels
    assert 0 < share < 1 and headroom > 1
    assert abs(share - 1 / headroom) <= 0.01           # both printed rounded
    assert "Softmax" in others and "MatMul" not in others
