"""The vocabulary of model-driven workloads: model specs, per-GPU sizes, operators, rows and
importers of model descriptions."""
