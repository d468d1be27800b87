"""Preflight: an SGLang launch command parsed, and the verdicts on whether it would start on a
host (the rules about SGLang on SM120 as data)."""
