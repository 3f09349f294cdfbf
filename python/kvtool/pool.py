"""Placeholder: filled by the pool bindings."""
__all__ = []
