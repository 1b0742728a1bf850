"""The parallel layout of a run: sizes, the model-driven config, the pipeline split, the placement
of ranks on GPUs and the classes of identical ranks."""
