"""Readers of job descriptions users already have: Megatron-LM launch scripts, argument
lists and training logs, Megatron-Bridge / NeMo configs and torchtitan job TOML."""
