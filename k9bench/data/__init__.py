"""The questions: loading and validating rows (dataset), the bundled demo set (demo; its rows are
the package data file ``demo.jsonl``), question subsets (subset), the paper's published numbers (published)."""
