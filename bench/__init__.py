"""bench: A/B, ablation and bisection of sglang-overlay patch sets on a real SGLang server.

Entry point: ``python -m bench <command>`` (see ``bench/__main__.py``). Heavy dependencies (scipy,
matplotlib, torch, tokenizers) are imported only inside the functions that need them, so
``python -m bench --help`` and the runner's bookkeeping stay fast.
"""
