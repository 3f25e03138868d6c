"""Schema-level constraints (JSON Schema / YAML -> regex, Vegas fragments) and the command line.

For now it holds the ``canonmerge`` command line; the schema compiler arrives with the Vegas issue.
"""
