"""End-to-end tests that drive the real OpenCode CLI through the proxy."""
