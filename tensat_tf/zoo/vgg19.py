"""`vgg19`: keras.applications.VGG19's convolutional part (224x224) with a small head, seeded random weights.

TENSAT benchmarks the ONNX model zoo's vgg19-7: 16 Conv2D + BiasAdd + Relu in 5 blocks with max pools, then three
fully connected layers (25088 -> 4096 -> 4096 -> 1000). Those FC layers hold 124 M of its 144 M parameters and no
rewrite opportunity, and the full model was too heavy for the zoo: 1.15 GB on disk (Keras' export stores each
variable twice) and, on 2 cores, a `tensat_tf convert` of 8.5 minutes peaking at 19 GB of memory. So the
convolutional part is exactly VGG19's (include_top=False) and the head is global average pooling + one Dense(1000)
+ softmax: 20.5 M parameters, ~165 MB on disk.
"""
import keras

from tensat_tf.zoo import _keras

SEED = 1414
SHAPE = (224, 224, 3)
CLASSES = 1000


def build(export_dir: str) -> None:
    image = keras.Input(SHAPE, name="image")  # a fixed input name, as in _keras.export_application
    features = keras.applications.VGG19(input_tensor=image, weights=None, include_top=False, pooling="avg")
    probs = keras.layers.Dense(CLASSES, activation="softmax", name="predictions")(features.output)
    _keras.export(keras.Model(image, probs, name="vgg19"), SHAPE, SEED, export_dir)
