"""simrun: discrete-event simulation of one training iteration on a GPU cluster.

Internal time unit: integer nanoseconds (``*_ns``); reported in seconds (``*_s``).
Sizes: integer bytes (``*_bytes``). Bandwidths: ``*_GBps`` = 1e9 bytes per second.
"""

__version__ = "0.1.0"
