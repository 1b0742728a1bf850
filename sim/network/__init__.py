"""Network models: how long each collective and point-to-point transfer takes.

- :mod:`sim.network.base`: the engine ↔ network interface.
- :mod:`sim.network.flow`: the contention-aware flow model (:func:`build_network`).
- :mod:`sim.network.simple`: closed-form models without contention.
- :mod:`sim.network.predict`: the nccl-tests-style predictor (``simrun collective``).
"""

from sim.network.factory import build_network, parse_algorithm

__all__ = ["build_network", "parse_algorithm"]
