# Held-out generalization on the CPU configuration of tests/bench/test_train_draft.py (issue 17, session 5):
# the recorded run's options (64 prompts, 12 held out, 48 tokens, batch 4, lr 5e-3) for 16 epochs with the
# held-out accept length after every epoch, without and with AdamW weight decay 0.1. Run from the worktree.
set -e
PY=/work/team/venv/bin/python
M=/tmp/sgx/gen/tiny_cpu
D=bench/results/train_draft_cpu/generalization
$PY -c "
from bench.tinymodel import TinyModelSpec, write_model_dirs
write_model_dirs('$M', TinyModelSpec(layers=4, hidden=128, heads=2, routed_experts=8, experts_per_tok=2, moe_intermediate=64, dense_intermediate=256, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32, vocab=10000))"
for wd in 0 0.1; do
  $PY -m bench train-draft $M --device cpu --prompts 64 --eval-prompts 12 --new-tokens 48 --epochs 16 --batch 4 \
    --lr 5e-3 --train-seconds 900 --weight-decay $wd --eval-each-epoch --out $M/draft_wd$wd > $D/log-wd$wd.txt 2>&1
  cp $M/draft_wd$wd/train.json $D/train-wd$wd.json
done
