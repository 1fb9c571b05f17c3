"""The bench: A/B, ablation and bisection of patch sets on a real SGLang server (`sglang-overlay bench`)."""
