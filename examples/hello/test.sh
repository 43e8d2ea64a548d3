#!/bin/sh
# Checks greet.sh's output.
set -e
out=$(./greet.sh)
[ "$out" = "hello, world" ] || { echo "unexpected output: $out"; exit 1; }
echo ok
