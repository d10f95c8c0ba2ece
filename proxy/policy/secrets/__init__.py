"""Secrets stopped by content where they enter the model (DESIGN invariant 11): the texts a client sends back
to the model (tool results, the files it inlines) are scanned with gitleaks' rules kept as data (`rules`,
gitleaks.toml and local.toml beside it), and each secret is replaced by `[redacted: TYPE]` (`redact`), the same
bytes for the same text. Which parts of a request are such texts is the request side's (proxy/enforce/secrets.py)."""

from proxy.policy.secrets.detect import Finding, find_secrets, present_keywords, shannon_entropy
from proxy.policy.secrets.redact import Redacted, redact_texts, replacement
from proxy.policy.secrets.rules import RuleSet, compile_pattern, load_rules

__all__ = ["Finding", "Redacted", "RuleSet", "compile_pattern", "find_secrets", "load_rules", "present_keywords",
           "redact_texts", "replacement", "shannon_entropy"]
