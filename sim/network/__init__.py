"""Network models: how long each collective and point-to-point transfer takes."""
