"""Latency profiling: the worker's numbers, the A/A test of the paired decision on real timings, and convert --profile
publishing the user's graph for a signature that is not measured faster."""
import subprocess
import sys
import time

import pytest

from tensat_tf import latency, speedup, zoo
from tensat_tf.convert import convert, profile_batch_sizes
from tensat_tf.options import Options


def test_aa_same_model_is_not_faster(zoo_cache):
    """The same SavedModel on both sides, real timings in the worker, both thread settings: never "faster", on a
    machine that other processes load at the same time (this is what the decision is for)."""
    path = zoo.resolve("zoo:mlp")
    r = latency.decide([path, path], "serving_default", [1], threads=(1, 0), seconds=2.0)
    assert r["device"] in ("CPU", "GPU")
    verdicts = [s["decision"]["verdict"] for s in r["settings"]]
    assert "faster" not in verdicts and r["keep"] is False, r
    for s in r["settings"]:
        d = s["decision"]
        assert s["batch_size"] == 1 and s["threads"] in ("1", "default")
        assert d["blocks"] == len(s["original"]["block_medians"]) == len(s["candidate"]["block_medians"]) > 0
        assert d["low"] is None or d["low"] <= d["ratio"]
    assert r["per_test_level"] == pytest.approx(speedup.per_test_level(latency.LEVEL, 2 * latency.LOOKS))


def test_measure(zoo_cache):
    # (the default thread setting: test_profile_command_prints_each_signature)
    path = zoo.resolve("zoo:mlp")
    r = latency.measure([path, path], "logits", 2, blocks=3, runs=3, threads=1)
    assert r["threads"] == 1 and r["batch_size"] == 2
    assert all(x["ms"] > 0 and len(x["block_medians"]) == 3 for x in r["tf"]) and len(r["tf"]) == 2


def test_profile_batch_sizes_default_to_one_and_the_verification_sizes():
    assert profile_batch_sizes(Options(verify_batch_sizes=(4, 2))) == [1, 2, 4]
    assert profile_batch_sizes(Options(profile_batch_sizes=(8,))) == [8]


def _fake_decide(keep: bool):
    def decide(paths, signature, batch_sizes, threads=(1, 0), **kwargs):
        verdict = "faster" if keep else "no difference"
        settings = [{"batch_size": b, "threads": latency.threads_label(t), "runs": 3,
                     "decision": speedup.Decision(1.2 if keep else 1.0, 1.1 if keep else 0.9, 1.3, 12,
                                                  verdict).to_json(),
                     "original": {"ms": 1.0}, "candidate": {"ms": 1.0}} for b in batch_sizes for t in threads]
        return {"device": "CPU", "keep": keep, "settings": settings, "seconds": 0.0, "stopped": {},
                "reason": "stubbed decision"}
    return decide


@pytest.mark.parametrize("name", ["lstm", "mlp"])
def test_not_faster_publishes_the_original_graph(zoo_cache, tmp_path, monkeypatch, name):
    """The fall-back is the user's graph: the signature's frozen graph as loaded, not our clean-up of it. zoo:lstm's
    While body is a library function that Grappler rewrote in the optimized graph: writing the original in the same
    process must not register a conflicting function of the same name."""
    monkeypatch.setattr(latency, "decide", _fake_decide(False))
    out = str(tmp_path / "o")
    rep = convert(f"zoo:{name}", out, Options(profile=True))
    assert rep["verification"]["passed"]
    from tensat_tf.io import load as load_mod
    source = load_mod.load(zoo.resolve(f"zoo:{name}"))
    published = load_mod.load(out)
    for sig_name, sig in rep["signatures"].items():
        prof = sig["profile"]
        assert prof["kept_original"] and prof["published"] == "original" and prof["reason"]
        assert sig["nodes_after"] == sig["nodes_before"] and sig["ops_after"] == sig["ops_before"]
        # what was published, frozen again, is the original's graph: the same ops, the same function bodies' ops
        mine, theirs = published.signatures[sig_name].graph_def, source.signatures[sig_name].graph_def
        assert _ops(mine) == _ops(theirs)
        assert sorted(_ops_in_library(mine)) == sorted(_ops_in_library(theirs))


def _ops(gd):
    from collections import Counter
    return Counter(n.op for n in gd.node if n.op not in ("Placeholder", "Const", "Identity", "ReadVariableOp", "NoOp"))


def _ops_in_library(gd):
    return [tuple(sorted(n.op for n in f.node_def if n.op not in ("Identity", "NoOp"))) for f in gd.library.function]


def test_faster_publishes_the_optimized_graph(zoo_cache, tmp_path, monkeypatch):
    calls = []
    fake = _fake_decide(True)
    monkeypatch.setattr(latency, "decide", lambda paths, signature, *a, **k: calls.append(signature) or fake(
        paths, signature, *a, **k))
    rep = convert("zoo:keras_cnn", str(tmp_path / "o"), Options(profile=True))
    # Keras' serve and serving_default: the same original and optimized graphs, measured once, one decision
    assert calls == ["serve"] and rep["signatures"]["serving_default"]["profile"]["same_as"] == "serve"
    for sig in rep["signatures"].values():
        assert sig["profile"]["published"] == "optimized" and not sig["profile"]["kept_original"]
        tensat = [p for p in sig["passes"] if p["name"] == "tensat"][0]
        assert sig["nodes_after"] == tensat["nodes_after"] < sig["nodes_before"]
        assert len(sig["profile"]["settings"]) == 4            # batch 1 and 4, one thread and default threads


@pytest.mark.slow
def test_convert_profile_reports_every_setting(zoo_cache, tmp_path):
    rep = convert("zoo:bert_tiny", str(tmp_path / "o"), Options(profile=True, profile_seconds=1.0,
                                                                profile_threads=(1,), verify_batch_sizes=(1, 2)))
    prof = rep["signatures"]["serving_default"]["profile"]
    assert prof["device"] in ("CPU", "GPU") and "profile" in rep["timing_s"]
    verdicts = [s["decision"]["verdict"] for s in prof["settings"]]
    assert [(s["batch_size"], s["threads"]) for s in prof["settings"]] == [(1, "1"), (2, "1")]
    assert prof["published"] == ("optimized" if speedup.keep(verdicts) else "original")
    assert prof["kept_original"] == (prof["published"] == "original")
    assert prof["speedup"] == min(s["decision"]["ratio"] for s in prof["settings"])
    for s in prof["settings"]:
        assert s["decision"]["blocks"] == len(s["original"]["block_medians"])


@pytest.mark.slow
def test_profile_command_prints_each_signature(zoo_cache):
    proc = subprocess.run([sys.executable, "-m", "tensat_tf.cli.main", "profile", zoo.resolve("zoo:mlp"),
                           "--threads=default"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all(" ms " in line and "threads default" in line for line in lines)
    assert {line.split(" ")[0] for line in lines} == {"logits", "serving_default"}


# --- counterbalanced load order ------------------------------------------------------------------------------------
def test_reverse_groups_reverses_each_runtime_and_is_its_own_inverse():
    items = ["tf0", "tf1", "tf2", "onnx0", "onnx1", "ov0"]
    sizes = [3, 2, 1]
    assert latency.reverse_groups(items, sizes) == ["tf2", "tf1", "tf0", "onnx1", "onnx0", "ov0"]
    assert latency.reverse_groups(latency.reverse_groups(items, sizes), sizes) == items
    assert latency.reorders([2, 0]) and not latency.reorders([1, 1, 0])


def test_the_first_look_runs_whatever_the_budget():
    """Blocks.run with no budget reaches its target however long the blocks take; with one it stops early."""
    calls = []

    def subjects(feeds):
        def slow():
            calls.append(1)
            time.sleep(0.002)
        return [slow, slow]

    blocks = latency.Blocks({"batch_sizes": [1], "runs": 1, "warmup": 0}, lambda b: None, subjects)
    r = blocks.run(12, None)
    assert r["blocks"] == 12 and not r["budget"]
    r = blocks.run(24, 1e-6)
    assert r["budget"] and r["blocks"] == 12


def test_warm_up_of_a_slow_subject_stops_on_time():
    """warm(): a subject whose calls add up to `seconds` stops warming after two calls and probing after the probes
    that took that long; a fast one gets every warm-up call and probe."""
    calls = {"slow": 0, "fast": 0}

    def slow():
        calls["slow"] += 1
        time.sleep(0.01)

    def fast():
        calls["fast"] += 1

    slowest = latency.warm([slow, fast], warmup=5, probes=5, seconds=0.015)
    assert calls == {"slow": 2 + 2, "fast": 5 + 5}
    assert slowest >= 10.0


def test_balance_takes_geometric_means_of_the_blocks_both_orders_have():
    a = {"ms": 1.0, "p10": 1.0, "p90": 4.0, "block_medians": [1.0, 4.0, 2.0], "compile_s": 1.0}
    b = {"ms": 4.0, "p10": 4.0, "p90": 9.0, "block_medians": [4.0, 1.0], "compile_s": 3.0}
    x = latency.balance(a, b)
    assert x["block_medians"] == [2.0, 2.0] and x["ms"] == 2.0
    assert x["p10"] == pytest.approx(2.0) and x["p90"] == pytest.approx(6.0) and x["compile_s"] == 2.0


def _biased_ms(path: str, position: int, count: int) -> float:
    """A fake machine where the SavedModel loaded last runs 20 % faster than it is (the bias the two load orders
    cancel); 'slow' paths take twice as long."""
    return (2.0 if "slow" in path else 1.0) * (0.8 if position == count - 1 else 1.0)


def _fake_latency(ms: float, blocks: int) -> dict:
    return {"ms": ms, "p10": ms, "p90": ms, "block_medians": [ms * (1 + 0.01 * (i % 3)) for i in range(blocks)]}


def test_measure_cancels_a_load_order_bias(monkeypatch):
    requests = []

    def run_worker(module, request, timeout_s, what, error=None, tail_chars=None):
        requests.append(request)
        paths = request["paths"]
        return {"device": "CPU", "tf": [_fake_latency(_biased_ms(p, j, len(paths)), request["blocks"])
                                        for j, p in enumerate(paths)]}

    monkeypatch.setattr(latency, "run_worker", run_worker)
    r = latency.measure(["/m/a", "/m/b"], "s", blocks=4)
    assert [q["paths"] for q in requests] == [["/m/a", "/m/b"], ["/m/b", "/m/a"]]
    ratios = {x / y for x, y in zip(r["tf"][0]["block_medians"], r["tf"][1]["block_medians"])}
    assert ratios == {1.0}                      # A/B: the 20 % bias is gone in every block
    requests.clear()
    r = latency.measure(["/m/slow", "/m/a"], "s", blocks=4)
    assert [round(x / y, 4) for x, y in zip(r["tf"][0]["block_medians"], r["tf"][1]["block_medians"])] == [2.0] * 4
    requests.clear()
    latency.measure(["/m/a"], "s", blocks=4)
    assert len(requests) == 1                   # one subject: one load order


def test_peers_measure_cancels_a_load_order_bias(monkeypatch):
    from tensat_tf import peers

    def run_worker(module, request, timeout_s, what, error=None, tail_chars=None):
        paths = request["tf"]
        subjects = [{"runtime": "tf", "path": p,
                     "block_ms": _fake_latency(_biased_ms(p, j, len(paths)), 4)["block_medians"]}
                    for j, p in enumerate(paths)]
        subjects.append({"runtime": "onnxruntime", "path": request["onnx"][0], "block_ms": [1.0] * 4})
        if request["tf"][0] == "/m/b":          # the peer fails in the second load order only
            subjects[-1] = {"runtime": "onnxruntime", "path": request["onnx"][0], "error": "ValueError: no"}
        return {"signature": "s", "batch_size": 1, "threads": 1, "runs": 3, "blocks": 4, "subjects": subjects}

    monkeypatch.setattr(latency, "run_worker", run_worker)
    m = peers.measure(["/m/a", "/m/b"], "s", onnx=["/m/x.onnx"])
    a, b, ort = m["subjects"]
    assert (a["path"], b["path"]) == ("/m/a", "/m/b")
    assert [x / y for x, y in zip(a["block_ms"], b["block_ms"])] == [1.0] * 4 and a["ms"] == b["ms"]
    assert ort["error"] == "ValueError: no" and "block_ms" not in ort


class _FakeWorker:
    """decide()'s worker protocol on the fake machine of _biased_ms."""
    started: list = []
    budgets: list = []

    def __init__(self, request: dict):
        self.request, self.n, self.replies = request, 0, [{"ready": True, "device": "CPU"}]
        _FakeWorker.started.append(request)

    def send(self, message: dict) -> None:
        if "to" in message:
            _FakeWorker.budgets.append(message["seconds"])
            self.n = max(self.n, message["to"])
            paths = self.request["paths"]
            self.replies.append({"blocks": self.n, "seconds": 0.01 * self.n, "budget": False, "settings": [
                {"batch_size": b, "runs": 3, "latency": [_fake_latency(_biased_ms(p, j, len(paths)), self.n)
                                                         for j, p in enumerate(paths)]}
                for b in self.request["batch_sizes"]]})

    def receive(self, deadline: float) -> dict:
        return self.replies.pop(0)

    def close(self) -> None:
        pass


def test_decide_cancels_a_load_order_bias(monkeypatch):
    monkeypatch.setattr(latency, "_Worker", _FakeWorker)
    _FakeWorker.started, _FakeWorker.budgets = [], []
    r = latency.decide(["/m/a", "/m/a2"], "s", [1], threads=(1,), seconds=1.0)
    assert [q["paths"] for q in _FakeWorker.started] == [["/m/a", "/m/a2"], ["/m/a2", "/m/a"]]
    (s,) = r["settings"]
    # in one load order the candidate would be 1.25x "faster" on every block
    assert s["decision"]["ratio"] == 1.0 and s["decision"]["verdict"] == "no difference" and r["keep"] is False
    assert s["decision"]["blocks"] == r["looks"][-1] and r["stopped"] == {"1": "looks"}
    # the first look is run whatever the budget (both load orders), the later ones within it
    assert _FakeWorker.budgets[:2] == [None, None] and all(b is not None for b in _FakeWorker.budgets[2:])
    _FakeWorker.started = []
    r = latency.decide(["/m/a", "/m/slow"], "s", [1, 4], threads=(1, 0), seconds=1.0)
    assert len(_FakeWorker.started) == 4
    # slower in the first thread setting: the second is not measured, and the candidate is not kept
    assert [s["decision"]["verdict"] for s in r["settings"]] == ["slower", "slower"] and r["keep"] is False
    assert r["stopped"] == {"1": "settled"} and "slower in batch 1 threads 1" in r["reason"]
