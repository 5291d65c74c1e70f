"""tools/bench_forms.py: alternative forms of one computation timed side by side (run as a script: its absl flags
would clash with other tools' in one test process)."""
import os
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "bench_forms.py")


def _rows(args):
    proc = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in proc.stdout.splitlines()
            if ln.startswith("| ") and not ln.startswith("| pattern")]


def test_each_candidate_is_timed_against_the_reference_and_checked():
    rows = _rows(["--experiments=position_gather", "--blocks=3", "--runs=2"])
    assert len(rows) == 4                                  # two table sizes: the reference row, then the candidate
    for ref, cand in (rows[0:2], rows[2:4]):
        assert ref[1] == "GatherV2 (reference)" and "GatherV2 6" in ref[5]
        assert cand[1] == "GatherV2 / Slice"
        assert "Slice 6" in cand[5] and "GatherV2" not in cand[5]      # what TF ran, from the trace
        assert float(cand[2]) > 0 and float(cand[3]) > 0
        ratio = float(cand[4].split()[0])
        assert 0.2 < ratio < 5
        assert cand[4].split()[-1] in ("faster", "slower", "difference")     # the paired decision's verdict
        assert float(cand[6]) == 0.0                        # a slice of the table is exactly its gather


def test_unknown_experiment_is_refused():
    proc = subprocess.run([sys.executable, TOOL, "--experiments=nonesuch"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "unknown experiments: nonesuch" in proc.stderr
