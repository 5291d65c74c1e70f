"""`mobilenet_v2`: the real keras.applications.MobileNetV2 (224x224, alpha 1.0) with seeded random weights.

The slow entry of the zoo (export traces ~150 layers): the realistic case for Conv+BN folding, Relu6, Pad and
depthwise convs. weights=None would leave zero biases and identity BN, so the export redraws every weight.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 707


def build(export_dir: str) -> None:
    _keras.export_application(keras.applications.MobileNetV2, (224, 224, 3), SEED, export_dir, alpha=1.0)
