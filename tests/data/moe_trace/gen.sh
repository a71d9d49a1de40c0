#!/usr/bin/env bash
# Regenerates, with llama.cpp b11312 on this machine, each quantized MoE fixture's golden logits
# (golden/MODEL.json + .f32, by tests/data/gen/golden.c) and its router trace (golden/MODEL.router,
# by gen_trace.c) from the same build, so that the trace belongs to the run the logits come from.
# (Upstream's own logits for these models differ between machines: an expert choice on a
# near-tie flips.) The work is scripts/regenerate-references.sh's `moe` stage; this writes the
# results into the working tree. LLAMA / BUILD (optional) = a llama.cpp b11312 source tree and
# its build directory, else the script downloads and builds them.
# usage: [LLAMA=... BUILD=...] tests/data/moe_trace/gen.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
exec env ${LLAMA:+LLAMA_CPP_SRC=$LLAMA} ${BUILD:+UPSTREAM_BUILD=$BUILD} scripts/regenerate-references.sh --in-place moe
