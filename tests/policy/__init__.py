"""Tests of the policy engine (proxy/policy)."""
