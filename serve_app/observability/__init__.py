"""Metrics, structured logs, request ids and health figures: side channels every layer uses."""
