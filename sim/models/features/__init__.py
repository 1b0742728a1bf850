"""Training features of a generated workload (FP8, FSDP, MoE, RoPE, overlap...): each one's rows,
memory and checks."""
