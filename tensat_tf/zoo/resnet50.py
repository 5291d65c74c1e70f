"""`resnet50`: the real keras.applications.ResNet50 (224x224) with seeded random weights.

Slow and large (25.6 M parameters; Keras' export stores each variable twice, about 200 MB): the realistic case for
Conv+BiasAdd+BN folding and residual AddV2 + Relu chains.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 808


def build(export_dir: str) -> None:
    _keras.export_application(keras.applications.ResNet50, (224, 224, 3), SEED, export_dir)
