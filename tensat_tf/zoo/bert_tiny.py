"""`bert_tiny`: a 2-layer BERT-style encoder written in raw TF ops (tf.Module, no Keras); see _bert.

Seq 32, hidden 64, 4 heads, FFN 128; the input is float32 embeddings [None, 32, 64].
"""
from tensat_tf.zoo import _bert

SEED = 303
CONFIG = _bert.Config(seq=32, hidden=64, heads=4, layers=2, intermediate=128)


def build(export_dir: str) -> None:
    _bert.build(export_dir, CONFIG, "bert_tiny", SEED)
