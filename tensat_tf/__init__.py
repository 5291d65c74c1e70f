"""tensat_tf: TENSAT-style equality saturation for TensorFlow SavedModels."""
__version__ = "0.1.0"
