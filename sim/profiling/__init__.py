"""Measuring kernels on a local GPU (``simrun profile``)."""
