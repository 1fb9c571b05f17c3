# The GPU run's regime (memorization: training accuracy ~1, held-out ~1) in small: 8 training prompts, 60 epochs,
# without and with AdamW weight decay 0.1; the model dir of command.sh. Run from the worktree after command.sh.
set -e
PY=/work/team/venv/bin/python
M=/tmp/sgx/gen/tiny_cpu
D=bench/results/train_draft_cpu/generalization
for wd in 0 0.1; do
  PYTHONUNBUFFERED=1 $PY -m bench train-draft $M --device cpu --prompts 8 --eval-prompts 12 --new-tokens 48 --epochs 60 \
    --batch 4 --lr 5e-3 --train-seconds 900 --weight-decay $wd --eval-each-epoch --out $M/draft_mem_wd$wd \
    > $D/log-mem-wd$wd.txt 2>&1
  cp $M/draft_mem_wd$wd/train.json $D/train-mem-wd$wd.json
done
