"""Fuzzing the input: bit flips, truncation and zeroed ranges in zoo:mlp's saved_model.pb and variables files.

Every run goes through the real CLI in a subprocess (with a per-run timeout) and must either refuse with one line
and a documented exit code (10-19 bad input, 20 verification failed: never 30 internal error, never a traceback,
never a crash or a hang), or write an output that verifies against the (mutated) original, checked here again
independently of the converter's own verification. Cases are seeded: the same case id mutates the same bytes.
The default run has a few cases; `-m slow` runs many more.
"""
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tensat_tf import zoo

CLI = [sys.executable, "-m", "tensat_tf.cli.main"]
TARGETS = ("saved_model.pb", "variables/variables.index", "variables/variables.data-00000-of-00001")
KINDS = ("flip", "truncate", "zero")
ALLOWED = set(range(10, 20)) | {20}
RUN_TIMEOUT_S = 240


def mutate(path: str, case: int) -> str:
    """Mutate one file of the SavedModel at `path` in place, chosen by `case`; -> a description."""
    rng = random.Random(case)
    target = TARGETS[case % len(TARGETS)]
    kind = KINDS[(case // len(TARGETS)) % len(KINDS)]
    file = os.path.join(path, target)
    data = bytearray(open(file, "rb").read())
    if kind == "flip":
        bits = [rng.randrange(len(data) * 8) for _ in range(rng.randint(1, 3))]   # few: more of them still parse
        for b in bits:
            data[b // 8] ^= 1 << (b % 8)
        what = f"flip bits {bits}"
    elif kind == "truncate":
        n = rng.randrange(len(data))
        data = data[:n]
        what = f"truncate to {n} bytes"
    else:
        start = rng.randrange(len(data))
        length = rng.randint(1, 256)
        data[start:start + length] = bytes(len(data[start:start + length]))
        what = f"zero bytes {start}..{start + length}"
    with open(file, "wb") as f:
        f.write(bytes(data))
    return f"case {case}: {target}: {what}"


def outputs_match(src: str, out: str) -> None:
    """Both SavedModels give the same outputs (NaN where the other has NaN) on seeded random inputs."""
    import tensorflow as tf

    from tensat_tf import verify
    from tensat_tf.io.load import TensorSpec
    a, b = tf.saved_model.load(src), tf.saved_model.load(out)
    assert sorted(a.signatures) == sorted(b.signatures)
    for name, fn in a.signatures.items():
        specs = [TensorSpec(k, k, s.dtype, tuple(-1 if d is None else d for d in s.shape.as_list()))
                 for k, s in sorted(fn.structured_input_signature[1].items())]
        for batch in (1, 3):
            feeds = verify.random_inputs(specs, batch, 123 + batch)
            ra, rb = fn(**feeds), b.signatures[name](**feeds)
            for key in ra:
                x, y = ra[key].numpy(), rb[key].numpy()
                assert x.shape == y.shape and np.array_equal(np.isnan(x), np.isnan(y)), (name, key)
                finite = np.isfinite(x)
                np.testing.assert_allclose(y[finite], x[finite], rtol=1e-4, atol=1e-5 * max(1.0, np.abs(x[finite]).max(
                    initial=0.0)), err_msg=f"{name}/{key}")


def run_case(case: int, src_root: str, work: str) -> tuple[str, subprocess.CompletedProcess, str]:
    src = os.path.join(work, f"in{case}")
    out = os.path.join(work, f"out{case}")
    shutil.copytree(src_root, src)
    what = mutate(src, case)
    try:
        proc = subprocess.run(CLI + ["convert", src, f"--output_dir={out}", "--noprofile", "--noprogress"],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: no answer within {RUN_TIMEOUT_S} s")
    return what, proc, out


def check_case(case: int, src_root: str, work: str) -> None:
    what, proc, out = run_case(case, src_root, work)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 0:
        outputs_match(os.path.join(work, f"in{case}"), out)
        return
    assert proc.returncode in ALLOWED, f"{what}: exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert len(lines) == 1 and lines[0].startswith("tensat_tf: error:"), f"{what}: {proc.stderr[-2000:]}"
    assert not os.path.exists(out), what
    assert not [f for f in os.listdir(work) if f.startswith(".tensat_tf-")], what


@pytest.fixture(scope="module")
def mlp_src(zoo_cache):
    return zoo.resolve("zoo:mlp")


# one case per file (index, data, saved_model.pb) and per kind of damage
FAST_CASES = [0, 4, 8]
SLOW_CASES = range(9, 9 + 45)


@pytest.mark.parametrize("case", FAST_CASES)
def test_fuzz_fast(mlp_src, tmp_path, case):
    check_case(case, mlp_src, str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES)
def test_fuzz_slow(mlp_src, tmp_path, case):
    check_case(case, mlp_src, str(tmp_path))


def test_mutation_is_deterministic(mlp_src, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    shutil.copytree(mlp_src, a)
    shutil.copytree(mlp_src, b)
    assert mutate(a, 7) == mutate(b, 7)
    target = TARGETS[7 % len(TARGETS)]
    assert open(os.path.join(a, target), "rb").read() == open(os.path.join(b, target), "rb").read()
    assert open(os.path.join(a, target), "rb").read() != open(os.path.join(mlp_src, target), "rb").read()
