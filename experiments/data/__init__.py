"""Layer 2, the data: feature-store sessions -> frame tables at the label rate (no imports; docs/development.md)."""
