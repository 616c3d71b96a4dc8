#!/usr/bin/env bash
# The device check under its former name: see device_check.sh (any accelerator JAX runs on, GPU or TPU).
exec bash "$(dirname "$0")/device_check.sh" "$@"
