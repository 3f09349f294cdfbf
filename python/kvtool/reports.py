"""Placeholder: filled by the reports bindings."""
__all__ = []
