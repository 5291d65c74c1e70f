"""Cost models: a cost in milliseconds for every e-node of an exported e-graph, for extraction.

Two models with the same semantics (structural nodes 0, nodes folded into constants 0, an opaque Op one overhead):
  analytic   roofline per op from FLOPs and bytes at the e-graph's shapes, device constants in a Device;
             instant and deterministic, needs no device.
  measured   each distinct (op, literals, input shapes) timed on this machine once and cached on disk; the analytic
             model covers what cannot be timed. `tensat_tf calibrate` fills the cache ahead of time.
get_model() is the one entry point the engine needs; both models answer `.costs(exp) -> list[float]`.
"""
from __future__ import annotations

from typing import Optional, Protocol

from tensat_tf.cost import analytic
from tensat_tf.cost.analytic import CPU, GPU, DEVICES, Device, constant_classes, node_cost, device_named
from tensat_tf.egraph.data import Fused
from tensat_tf.egraph.export import Exported
from tensat_tf.options import MIN_VARIABLE_ELEMENTS, UNKNOWN_DIM


MODELS = ("analytic", "measured")

__all__ = ["CPU", "GPU", "DEVICES", "Device", "CostModel", "AnalyticCostModel", "MODELS", "get_model",
           "constant_classes", "node_cost"]


class CostModel(Protocol):
    def costs(self, exp: Exported, batch_size: Optional[int] = None) -> list[float]:
        """One cost (ms) per e-node of exp.egraph, index-aligned with exp.egraph.nodes."""

    def priced(self, exp: Exported, batch_size: Optional[int] = None) -> tuple[list[float], dict[int, Fused]]:
        """costs() and, for each node priced as a fused epilogue, what its fusion needs of the extracted program
        (EGraphData.fused)."""


class AnalyticCostModel:
    """analytic.costs bound to a batch size, the length of other unknown dims, a Device and the size from which
    constants are saved as variables (the object form get_model returns)."""

    def __init__(self, batch_size: int = 1, device: Device | str = CPU, unknown_dim: int = UNKNOWN_DIM,
                 min_variable_elements: int = MIN_VARIABLE_ELEMENTS):
        self.batch_size = batch_size
        self.device = device_named(device)
        self.unknown_dim = unknown_dim
        self.min_variable_elements = min_variable_elements

    def costs(self, exp: Exported, batch_size: Optional[int] = None) -> list[float]:
        return analytic.costs(exp, self.batch_size if batch_size is None else batch_size, self.device,
                              unknown_dim=self.unknown_dim, min_variable_elements=self.min_variable_elements)

    def priced(self, exp: Exported, batch_size: Optional[int] = None) -> tuple[list[float], dict[int, Fused]]:
        return analytic.priced(exp, self.batch_size if batch_size is None else batch_size, self.device,
                               self.unknown_dim, self.min_variable_elements)


def get_model(name: str = "analytic", batch_size: int = 1, device: Device | str | None = None,
              cache_path: Optional[str] = None, unknown_dim: int = UNKNOWN_DIM,
              min_variable_elements: int = MIN_VARIABLE_ELEMENTS) -> CostModel:
    """The cost model called `name` ('analytic' or 'measured'), pricing at `batch_size` and every other unknown dim
    at `unknown_dim` (options.EngineOptions.unknown_dim); the analytic model prices a served call's reads of the
    constants the output saves as variables (min_variable_elements; the measured one times ops on constants).

    device: a Device, a name in DEVICES ('cpu', 'cpu-eigen', 'gpu', 'gpu-t4', 'gpu-h100') or 'auto'; by default
    ('auto', None) the CPU profile of the TF runtime in this process (analytic.runtime_cpu) for the analytic model
    and, for the measured one, the Device of the machine it runs on (used for its fallbacks).
    cache_path: the measured model's cache file (default: see tensat_tf.cost.measured.default_cache_path).
    """
    if name == "analytic":
        return AnalyticCostModel(batch_size, analytic.AUTO if device is None else device, unknown_dim,
                                 min_variable_elements)
    if name == "measured":
        from tensat_tf.cost.measured import MeasuredCostModel   # imports TensorFlow
        return MeasuredCostModel(cache_path, batch_size,
                                 None if device in (None, analytic.AUTO) else device_named(device),
                                 unknown_dim)
    raise ValueError(f"unknown cost model {name!r}; choose one of {', '.join(MODELS)}")
