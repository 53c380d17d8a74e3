"""Helpers that every training script needs: reproducibility (repro) and device choice (device)."""
