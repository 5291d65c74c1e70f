"""`bert_taso`: the BERT of the TASO/TENSAT benchmarks (seq 64, hidden 1024, 8 layers, 16 heads); see _bert.

TASO's example keeps only the attention MatMuls (no softmax, LayerNorm or FFN, and its final linear reads the layer
input); this is the full encoder layer in raw TF ops, with FFN 4096 and the erf GELU, so the same Q/K/V
"merge MatMuls sharing an input" opportunity sits in a real graph. ~101 M parameters, ~400 MB on disk (slow).
"""
from tensat_tf.zoo import _bert

SEED = 909
CONFIG = _bert.Config(seq=64, hidden=1024, heads=16, layers=8, intermediate=4096)


def build(export_dir: str) -> None:
    _bert.build(export_dir, CONFIG, "bert_taso", SEED)
