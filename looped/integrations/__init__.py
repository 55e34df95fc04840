"""Optional integrations with other tools (each needs its extra)."""
