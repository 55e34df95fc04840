"""Reproduction recipes: grids of architecture x corpus/task x seed, resumable runners, reports."""
