set -e
cd /work/main
.venv-ci/bin/python -c "
from bench.tinymodel import TinyModelSpec, write_model_dirs
write_model_dirs('/tmp/s5/tiny_cpu', TinyModelSpec(layers=4, hidden=128, heads=2, routed_experts=8, experts_per_tok=2, moe_intermediate=64, dense_intermediate=256, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32, vocab=10000))"
for steps in 3 5; do
  .venv-ci/bin/python -m bench train-draft /tmp/s5/tiny_cpu --out /tmp/s5/tiny_cpu/draft${steps}_trained --steps $steps --device cpu --prompts 64 --eval-prompts 12 --new-tokens 48 --epochs 12 --batch 4 --lr 5e-3 --train-seconds 3600 > /tmp/s5/log-steps$steps.txt 2>&1
done
