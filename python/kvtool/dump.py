"""Placeholder: filled by the dump bindings."""
__all__ = []
