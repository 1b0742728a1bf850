"""Predicted against measured iteration times of published runs."""
