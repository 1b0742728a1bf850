"""simrun: discrete-event simulation of one training iteration on a GPU cluster.

Internal time unit: integer nanoseconds (``*_ns``); reported in seconds (``*_s``).
Sizes: integer bytes (``*_bytes``). Bandwidths: ``*_GBps`` = 1e9 bytes per second.
"""

__version__ = "0.1.0"

# The Python API (sim.api), re-exported on first use: `import sim` stays light
_API = ("ComputeOptions", "FaultOptions", "LayoutRequest", "ModelSpec", "NetworkOptions",
        "Outcome", "Prepared", "SimulationOptions", "Topology", "Training", "WorkloadInput",
        "load_model", "load_topology", "prepare_model", "prepare_workload", "run")


def __getattr__(name: str):
    """``sim.prepare_model``, ``sim.run``, …: the names of :mod:`sim.api`."""
    if name in _API:
        from sim import api

        return getattr(api, name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
