"""Findings, reports and the pre-benchmark checklist, computed from observe/ samples."""
