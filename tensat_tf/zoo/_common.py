"""Helpers shared by the zoo builders: seeded weight draws and export-directory checks.

Every builder draws its weights from a numpy RandomState with a fixed seed, never from TF's or Keras' global
generators, so the same name always yields the same weights, whatever else ran in the process before.
"""
import os

import numpy as np


def rng(seed: int) -> np.random.RandomState:
    """A private generator: RandomState's stream is frozen by numpy's compatibility policy, unlike default_rng's."""
    return np.random.RandomState(seed)


def he_normal(r: np.random.RandomState, shape, fan_in: int, gain: float = 2.0) -> np.ndarray:
    """N(0, gain / fan_in): gain 2 (He) keeps activations O(1) through ReLU layers, gain 1 through linear ones."""
    return (r.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)


def small(r: np.random.RandomState, shape, scale: float = 0.1) -> np.ndarray:
    """Non-zero biases/offsets: a zero bias would be dropped by constant folding and hide BiasAdd from the rewrites."""
    return (r.standard_normal(shape) * scale).astype(np.float32)


def around_one(r: np.random.RandomState, shape) -> np.ndarray:
    """Scales in [0.5, 1.5): never the identity 1 (foldable) and never near 0 (would kill the signal)."""
    return r.uniform(0.5, 1.5, shape).astype(np.float32)


def prepare_export_dir(export_dir: str) -> None:
    """A SavedModel is written into export_dir; refuse to mix it with files already there."""
    if os.path.exists(export_dir):
        if not os.path.isdir(export_dir) or os.listdir(export_dir):
            raise FileExistsError(f"export_dir {export_dir!r} exists and is not an empty directory")
    else:
        os.makedirs(export_dir)
