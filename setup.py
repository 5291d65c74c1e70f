"""tensat_tf: equality-saturation graph superoptimizer for TensorFlow SavedModels.

passes/ and rules/ live at the top of the repository (the pipeline is visible in the folder names) but install inside
the package as tensat_tf.passes and tensat_tf.rules: top-level modules named `passes` or `rules` would clash with
anything else on a user's path.
"""
from setuptools import setup

PACKAGES = {
    "tensat_tf": "tensat_tf",
    "tensat_tf.cli": "tensat_tf/cli",
    "tensat_tf.cost": "tensat_tf/cost",
    "tensat_tf.egraph": "tensat_tf/egraph",
    "tensat_tf.extract": "tensat_tf/extract",
    "tensat_tf.io": "tensat_tf/io",
    "tensat_tf.zoo": "tensat_tf/zoo",
    "tensat_tf.passes": "passes",
    "tensat_tf.rules": "rules",
}

setup(
    name="tensat_tf",
    version="0.1.0",
    description="Equality-saturation (TENSAT) graph superoptimizer for TensorFlow SavedModels",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.12",
    packages=list(PACKAGES),
    package_dir=PACKAGES,
    package_data={"tensat_tf.rules": ["*.rules"]},
    install_requires=[
        "tensorflow==2.21.0",
        # 13.2 is the newest egglog for Python 3.11 (14.0 needs 3.12); private export APIs are used, so pin exactly.
        "egglog==13.2.0",
        # PuLP 4 no longer bundles CBC.
        "pulp>=3.3,<4",
        "networkx>=3.2",
        "absl-py>=2.1",
        "tf2onnx==1.17.0",
        # PredictionLog/PredictRequest protos of the TF Serving warm-up records (serving mode); same version as TF,
        # it brings nothing else (grpcio, protobuf and tensorflow are already here).
        "tensorflow-serving-api==2.21.0",
        "numpy>=1.26",
    ],
    extras_require={
        "test": ["pytest>=8", "onnxruntime>=1.20", "highspy>=1.7"],
        "highs": ["highspy>=1.7"],
        "onnx": ["onnxruntime>=1.20"],      # --emit_onnx checks the ONNX file with onnxruntime
        # tools/bench.py's peer runtimes (ONNX Runtime, OpenVINO reading SavedModels); not needed by CI's tests
        "bench": ["onnxruntime>=1.20", "openvino==2026.4.1"],
    },
    entry_points={"console_scripts": ["tensat_tf=tensat_tf.cli.main:run"]},
)
