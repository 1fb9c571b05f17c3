"""sglang-overlay: named local patches on a pinned SGLang release, toggled safely, checked, launched, measured.

The Python API is `sglang_overlay.api` (docs/api.md); the command line is `sglang-overlay` (the console script)
or `python apply.py` in a checkout. `switch.switch` is the one path that changes a tree.
"""

__version__ = "0.1.0"
