"""`convert --noprofile` writes the bytes recorded in tests/data/golden_noprofile.json (tools/golden.py): a refactor
that was meant to change nothing changed nothing. A change meant to change the output re-records the file
(`python tools/golden.py --out=tests/data/golden_noprofile.json`) and says why in its commit."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import golden  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "golden_noprofile.json")
with open(REFERENCE) as f:
    REF = json.load(f)
QUICK = {"mlp", "bert_tiny", "keras_cnn"}


def test_reference_covers_the_quick_models():
    assert QUICK <= set(REF["models"])
    assert set(REF["models"]).isdisjoint(REF["skipped"])


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow)
                                  for n in sorted(REF["models"])])
def test_output_bytes_as_recorded(name, zoo_cache):
    if REF["environment"] != golden.environment():
        pytest.skip(f"reference recorded under {REF['environment']}, not {golden.environment()}")
    files, why = golden.record_one(name)
    if files is None:
        pytest.skip(f"this run depended on the machine's speed ({why}): not comparable")
    if not golden.comparable(files, REF["models"][name]):
        pytest.skip("the zoo built another input on this machine (tools/golden.py INPUT): not comparable")
    changed = sorted(k for k in set(files) | set(REF["models"][name]) if files.get(k) != REF["models"][name].get(k))
    assert changed == [], f"{name}: these files differ from the recorded bytes"
