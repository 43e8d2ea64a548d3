#!/bin/sh
# Prints a greeting.
echo "hello, world"
