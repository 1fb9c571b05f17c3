"""sglang-overlay: named local patches on a pinned SGLang release, toggled safely, checked, launched, measured.

The commands in `sglang_overlay.commands` double as the Python API; `switch.switch` is the one path that
changes a tree.
"""

__version__ = "0.1.0"
