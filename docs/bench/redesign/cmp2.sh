#!/bin/bash
MLP="--model mlp --layers 784,1024,1024,10 --data synthetic-mlp --batch 256 --optimizer sgd --lr 0.01 --momentum 0.9 --lr-schedule constant --steps 60 --warmup-steps 10"
for round in 1 2 3; do
  for b in old new; do
    echo "== round $round $b mlp"
    /tmp/troupe-$b bench train $MLP --worlds dp1,dp2,procs2 --threads 1 --json --log-level warn
  done
done
