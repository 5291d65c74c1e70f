"""A pass that fails keeps its input graph (verified and published, the report says FAILED), unless --strict
(Options.strict): then the conversion stops with errors.InternalError (exit 30) and writes nothing."""
import os

import pytest

from conftest import save_dense_gelu
from tensat_tf import errors
from tensat_tf.convert import convert
from tensat_tf.options import Options
from tensat_tf.passes.tensat import TensatPass


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_dense_gelu(str(tmp_path_factory.mktemp("strict") / "m"), 8, 16)


@pytest.fixture()
def failing_pass(monkeypatch):
    def boom(self, graph_def, item):
        raise RuntimeError("an engine bug")
    monkeypatch.setattr(TensatPass, "optimize", boom)


def test_a_failing_pass_keeps_its_input(model, tmp_path, failing_pass):
    out = str(tmp_path / "out")
    report = convert(model, out, Options(profile=False))
    passes = report["signatures"]["serving_default"]["passes"]
    tensat = [p for p in passes if p["name"] == "tensat"]
    assert tensat and not tensat[0]["ok"] and "an engine bug" in tensat[0]["error"]
    assert report["verification"]["passed"] and os.path.isfile(os.path.join(out, "saved_model.pb"))


def test_strict_stops_and_writes_nothing(model, tmp_path, failing_pass):
    out = str(tmp_path / "out")
    with pytest.raises(errors.InternalError, match="pass tensat failed .--strict.: RuntimeError: an engine bug"):
        convert(model, out, Options(profile=False, strict=True))
    assert not os.path.exists(out) and not [p for p in os.listdir(tmp_path) if p != "out"]


def test_strict_converts_when_every_pass_succeeds(model, tmp_path):
    report = convert(model, str(tmp_path / "out"), Options(profile=False, strict=True))
    assert all(p["ok"] for p in report["signatures"]["serving_default"]["passes"])


def test_strict_says_the_pass_error_in_one_line(model, tmp_path, monkeypatch):
    """The CLI prints an error as one line: a pass's reason that runs to many (an egglog panic) is cut to its first."""
    def boom(self, graph_def, item):
        raise RuntimeError("first line\nsecond line")
    monkeypatch.setattr(TensatPass, "optimize", boom)
    with pytest.raises(errors.InternalError) as e:
        convert(model, str(tmp_path / "out"), Options(profile=False, strict=True))
    assert str(e.value).endswith("RuntimeError: first line") and "\n" not in str(e.value)
