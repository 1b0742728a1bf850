"""Cluster descriptions: topology YAML files, hardware specs, the cluster graph."""
