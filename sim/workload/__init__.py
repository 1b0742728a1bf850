"""Workload files → one typed workload model (:mod:`sim.workload.model`)."""
