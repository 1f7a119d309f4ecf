"""Mapping profiles to source: the source index, anchoring, attribution and heat."""
