"""Progress display: a redrawn line on a terminal only, nothing in a log file, off with --noprogress."""
import io

from tensat_tf.progress import Progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_tty_line_is_redrawn_rate_limited_and_erased():
    out, clock = FakeTTY(), Clock()
    p = Progress(True, stream=out, prefix="t: ", tick=0, clock=clock)
    p.stage("loading")
    clock.t = 2.5
    p.status("batch 1/3 done")
    p.status("batch 1/3 done, again")                      # within min_interval: not drawn
    clock.t = 3.0
    p.status("batch 2/3")
    p.close()
    text = out.getvalue()
    assert "\n" not in text
    frames = text.split("\r")
    assert "t: loading (0.0 s)" in frames
    assert any(f.startswith("t: batch 1/3 done") for f in frames)
    assert not any("again" in f for f in frames)
    assert any(f.startswith("t: batch 2/3") for f in frames)
    assert frames[-1] == "" and frames[-2].strip() == ""   # erased at the end


def test_print_does_not_tear_the_line():
    err, out, clock = FakeTTY(), io.StringIO(), Clock()
    p = Progress(True, stream=err, tick=0, clock=clock)
    p.stage("working")
    p.print('{"model": "m"}', file=out)
    p.close()
    assert out.getvalue() == '{"model": "m"}\n'
    assert err.getvalue().count("working") == 2            # erased before the line, drawn again after it


def test_not_a_tty_or_disabled_writes_nothing():
    for enabled, stream in ((True, io.StringIO()), (False, FakeTTY())):
        p = Progress(enabled, stream=stream)
        p.stage("loading")
        p.status("batch 1/2")
        p.close()
        assert stream.getvalue() == ""


def test_convert_reports_its_stages(zoo_cache, tmp_path):
    from tensat_tf.convert import convert
    from tensat_tf.options import Options
    stages = []
    convert("zoo:mlp", str(tmp_path / "out"), Options(profile=False, warmup=True, progress=stages.append))
    assert stages[0] == "loading zoo:mlp"
    assert any(s.startswith("optimizing signature logits (1/2)") for s in stages)
    assert any(s.startswith("optimizing signature serving_default (2/2)") for s in stages)
    assert "saving and verifying" in stages and any("warm-up" in s for s in stages)
    assert stages[-1].startswith("publishing")
