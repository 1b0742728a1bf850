"""Which option applies to which input (no silent what-ifs)."""
