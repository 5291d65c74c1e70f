"""`inception_v3`: the real keras.applications.InceptionV3 (299x299, as in TASO's example) with seeded random weights.

Slow (23.9 M parameters, 94 convs, each Conv2D + BatchNorm + Relu; Keras' export stores each variable twice, ~190
MB): the realistic case of the Inception blocks whose 1x1 convs share an input (TENSAT's "merge convs" case).
"""
import keras

from tensat_tf.zoo import _keras

SEED = 1313


def build(export_dir: str) -> None:
    _keras.export_application(keras.applications.InceptionV3, (299, 299, 3), SEED, export_dir)
