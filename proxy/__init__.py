"""allowlist-proxy: an OpenAI-compatible reverse proxy that judges every tool call against a policy."""

__version__ = "0.1.0"
