"""Record (or check) the bytes `convert --noprofile` writes for each zoo model: the reference a refactor is held to.

    python tools/golden.py --out=tests/data/golden_noprofile.json          # record, at the revision to be kept
    python tools/golden.py --check=tests/data/golden_noprofile.json        # compare the working tree against it

A model is recorded only when its conversion did not stop on wall-clock time: no signature's saturation stopped on its
time budget, no probe that ended it for no gain and no extraction was cut short by the clock (their work limits
stop them the same way on every machine: tensat_tf/extract/solvers.py). Others are listed under "skipped" with the
reason, so the file says what it does not cover. tests/test_golden.py checks the recorded models in CI.

Each model's entry also holds a digest of its input (INPUT: the frozen graphs of the SavedModel the zoo built). The zoo
builds with Keras on the machine at hand, and that build is not the same everywhere: VGG19's head is calibrated on
features of 16 convolutions at 224 pixels, whose last bits differ between machines, and its converted bytes with
them. Where the input differs, the output is not comparable, and the check says so instead of failing.
"""
import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile

from tensat_tf import report as report_file
from tensat_tf import zoo
from tensat_tf.convert import convert
from tensat_tf.options import Options

INPUT = "(input: frozen signatures)"      # the key of the input's digest in a model's entry


def environment() -> dict:
    """What the bytes depend on besides the code: a reference recorded elsewhere is not comparable."""
    return {"tensorflow": _dist_version("tensorflow"), "egglog": _dist_version("egglog"), "pulp": _dist_version("pulp"),
            "machine": platform.machine(), "cpu": _cpu_features(), "python": ".".join(platform.python_version_tuple()[:2])}


def _cpu_features() -> str:
    """The vector extensions TF's CPU kernels choose between: constant folding runs them, and the folded weights'
    last bits can differ across them."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "fma")
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    return ",".join(w for w in wanted if w in flags) or "none"


def _dist_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


def digests(path: str) -> dict[str, str]:
    """relative path -> sha256 of every file under path, sorted."""
    out = {}
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(out.items()))


def input_digest(report: dict) -> str:
    """sha256 over a conversion's signatures: each name and the digest of the frozen graph it converted (the
    report's frozen_digest, which convert computes anyway)."""
    h = hashlib.sha256()
    for name, sig in sorted(report["signatures"].items()):
        h.update(f"{name}:{sig['frozen_digest']};".encode())
    return h.hexdigest()


def comparable(files: dict, recorded: dict) -> bool:
    """Whether a conversion's digests can be held to a recorded entry: the same input (or an entry without one)."""
    return INPUT not in recorded or files.get(INPUT) == recorded[INPUT]


def _convert_here(name: str) -> tuple[dict | None, str | None]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        report = convert(f"zoo:{name}", out, Options(profile=False))
        why = report_file.clock_dependence(report)
        return (None, why) if why else (dict(digests(out), **{INPUT: input_digest(report)}), None)


def record_one(name: str) -> tuple[dict | None, str | None]:
    """(file digests, None), or (None, why the run depended on the machine's speed). The model is built and converted
    in a fresh process with an empty zoo cache: Keras names layers from a process-wide counter, so a model built after
    others in the same process (or taken from a cache built that way) has other node names, and other bytes."""
    with tempfile.TemporaryDirectory() as cache:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--one={name}"], capture_output=True,
                              text=True, env=dict(os.environ, **{zoo.CACHE_ENV: cache}), timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"converting zoo:{name} failed: {proc.stderr.strip().splitlines()[-1:]}")
    files, why = json.loads(proc.stdout.strip().splitlines()[-1])
    return files, why


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the reference here")
    ap.add_argument("--check", help="compare against this reference")
    ap.add_argument("--models", default=",".join(zoo.NAMES), help="comma-separated zoo names")
    ap.add_argument("--one", help=argparse.SUPPRESS)      # internal: convert this model here, print the JSON result
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(_convert_here(args.one)))
        return 0
    if bool(args.out) == bool(args.check):
        ap.error("give exactly one of --out and --check")
    names = [n for n in args.models.split(",") if n]
    if args.out:
        ref = {"environment": environment(), "models": {}, "skipped": {}}
        for name in names:
            files, why = record_one(name)
            if files is None:
                ref["skipped"][name] = why
            else:
                ref["models"][name] = files
            print(name, "skipped: " + why if why else "recorded", flush=True)
        with open(args.out, "w") as f:
            json.dump(ref, f, indent=1, sort_keys=True)
            f.write("\n")
        return 0
    with open(args.check) as f:
        ref = json.load(f)
    if ref["environment"] != environment():
        print(f"reference recorded under {ref['environment']}, this is {environment()}: not comparable")
        return 2
    bad = 0
    for name in [n for n in names if n in ref["models"]]:
        files, why = record_one(name)
        if files is not None and not comparable(files, ref["models"][name]):
            print(name, "not comparable: the zoo built another input here", flush=True)
            continue
        same = files == ref["models"][name]
        bad += not same
        print(name, "same" if same else f"DIFFERENT ({why or 'bytes'})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
