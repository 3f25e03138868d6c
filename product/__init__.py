"""Constraint x canonical automaton: token-level guides, masks and generation (arrives with CartesianMerge)."""
