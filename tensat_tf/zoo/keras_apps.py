"""The real-exports suite's CNNs: keras.applications models, exported by Keras 3 with model.export().

Users bring such exports, not hand-written graphs: the batch dim is dynamic (-1 in the signature), BatchNorm is
unfused Mul/AddV2 by [1,1,1,C] constants after freezing, and preprocessing layers (Rescaling, Normalization) stay in
the graph. Weights are redrawn from a seeded generator (tensat_tf/zoo/_keras.py); nothing is downloaded. Inputs are
small (each application's minimum or 64x64) so that building and converting stay in seconds to a minute on 2 cores.
Importing this module is cheap: keras is imported only when a model is built.
"""

# zoo name -> (keras.applications constructor, square input side, seed, extra constructor kwargs).
# Sides: 64 where the application accepts it; Xception needs >= 71 and InceptionResNetV2 >= 75.
# ResNet101 and VGG16 build and convert too, but each exports ~350 MB (44 M and 40 M parameters) and adds minutes to
# the suite's tests without a new pattern (ResNet50V2, and the older zoo's resnet50 and vgg19 cover them).
APPS = {
    "real_convnext_tiny": ("ConvNeXtTiny", 64, 1101, {}),
    "real_densenet121": ("DenseNet121", 64, 1102, {}),
    "real_efficientnet_b0": ("EfficientNetB0", 64, 1103, {}),
    "real_efficientnetv2_b0": ("EfficientNetV2B0", 64, 1104, {}),
    "real_inception_resnet_v2": ("InceptionResNetV2", 75, 1105, {}),
    "real_mobilenet": ("MobileNet", 64, 1106, {}),
    "real_mobilenetv3_small": ("MobileNetV3Small", 64, 1107, {}),
    "real_nasnet_mobile": ("NASNetMobile", 64, 1108, {}),
    "real_resnet50v2": ("ResNet50V2", 64, 1109, {}),
    "real_xception": ("Xception", 71, 1111, {}),
    "real_densenet169": ("DenseNet169", 64, 1112, {}),
    "real_mobilenetv3_large": ("MobileNetV3Large", 64, 1113, {}),
}

DESCRIPTIONS = {name: f"keras.applications.{ctor} {side}x{side}x3, dynamic batch, random weights (real export)"
                for name, (ctor, side, _, _) in APPS.items()}


def input_shape(name: str) -> tuple:
    side = APPS[name][1]
    return (side, side, 3)


def build(name: str, export_dir: str) -> None:
    import keras

    from tensat_tf.zoo import _keras
    ctor, side, seed, kwargs = APPS[name]
    _keras.export_application(getattr(keras.applications, ctor), (side, side, 3), seed, export_dir, **kwargs)
