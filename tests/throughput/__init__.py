"""Throughput tables and the vLLM log import."""
