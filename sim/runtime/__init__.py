"""The process around a command: signals, progress, the simulated-time watchdog."""
