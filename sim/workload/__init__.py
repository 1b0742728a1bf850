"""Workload files → one typed workload model (:mod:`sim.program.workload`)."""
