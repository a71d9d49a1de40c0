#!/usr/bin/env python3
"""Write tiny GGUF models (random weights, the 480-token byte-level BPE vocab of make_tiny_models.py) of four
DeepSeek architectures as llama.cpp b11312 defines them, for golden tests:

  deepseek    DeepSeek-MoE 16B / DeepSeek-V1 MoE: plain multi-head attention (NORM RoPE, no YaRN), dense leading
              block, MoE with softmax routing (no renormalisation) + shared experts
  deepseek2   "legacy" (pre-absorption) MLA layout: one attn_kv_b per block, no key_length_mla/value_length_mla keys,
              head_count_kv = n_head, run by upstream as plain MHA over decompressed heads; DeepSeek-V3 routing
              (sigmoid + exp_probs_b selection bias, expert groups, top-k renormalisation, routed scale), YaRN
  deepseek32  DeepSeek-V3.2 (DSA): absorbed MLA + lightning indexer (top-k token selection), V3 routing, YaRN
  deepseek4   DeepSeek-V4: 4-stream hyper-connections (Sinkhorn), shared-KV MQA with per-head q RMS norm,
              attention sinks, sliding window, CSA (ratio-4 overlapping compressor + lightning indexer top-k over
              compressed blocks) and HCA (ratio-128 compressor) layers, grouped low-rank output projection,
              sqrt-softplus MoE with hash routing (tid2eid) in the first layers, SwiGLU clamp, YaRN on
              compressed layers

Each model is written in F32 (deterministic: a rebuild is byte-identical); llama-quantize makes the other types.
The layouts follow conversion/deepseek.py of llama.cpp b11312 (and, for the legacy deepseek2 file, the
converter before MLA absorption). tests/data/README.md says how these files are quantized and used.

usage: make_tiny_deepseek_family.py OUT_DIR [NAME ...]
"""
import math
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import vocab, SPECIALS  # noqa: E402

T = gguf.MODEL_TENSOR


def tn(t, bid=None, suffix=".weight"):
    name = gguf.TENSOR_NAMES[t]
    if bid is not None:
        name = name.format(bid=bid)
    return name + suffix


# ---------------------------------------------------------------------------------------------------------------
# model definitions (the seed-1 family: tests/data/deepseek-family)
# ---------------------------------------------------------------------------------------------------------------

PUBLIC = {
    "tiny-deepseek-moe": dict(
        arch="deepseek", seed=1, router_seed=11, pre="deepseek-llm",
        n_embd=256, n_layer=2, n_head=4, n_head_kv=4, head_dim=64, n_ctx=4096,
        n_ff=256, n_dense_lead=1,
        n_expert=8, n_expert_used=2, n_expert_shared=2, n_ff_exp=32,
        rope_base=10000.0, eps=1e-6, router_gain=2.0,
    ),
    "tiny-deepseek2-legacy": dict(
        arch="deepseek2", seed=1, router_seed=6, pre="deepseek-v3",
        n_embd=256, n_layer=2, n_head=4, n_ctx=163840,
        q_lora_rank=128, kv_lora_rank=128, qk_nope=96, qk_rope=32, v_head=64,
        n_ff=256, n_dense_lead=1,
        n_expert=16, n_expert_used=4, n_expert_shared=1, n_ff_exp=32,
        n_group=4, topk_group=2, weights_scale=2.5, weights_norm=True, bias_std=0.2,
        rope_base=10000.0, eps=1e-6, router_gain=2.0,
        yarn=dict(factor=40.0, orig_ctx=4096, mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0),
    ),
    "tiny-deepseek32": dict(
        arch="deepseek32", seed=1, router_seed=54, pre="deepseek-v3",
        n_embd=256, n_layer=2, n_head=4, n_ctx=163840,
        q_lora_rank=128, kv_lora_rank=128, qk_nope=96, qk_rope=32, v_head=64,
        n_ff=256, n_dense_lead=1,
        n_expert=8, n_expert_used=3, n_expert_shared=1, n_ff_exp=32,
        n_group=2, topk_group=1, weights_scale=2.5, weights_norm=True, bias_std=0.2,
        idx_heads=8, idx_head_dim=64, idx_top_k=8, idx_seed=54,
        rope_base=10000.0, eps=1e-6, router_gain=2.0,
        yarn=dict(factor=40.0, orig_ctx=4096, mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0),
    ),
    "tiny-deepseek4": dict(
        arch="deepseek4", seed=1, router_seed=2, pre="deepseek-v3",
        n_embd=256, n_layer=3, n_head=4, head_dim=128, qk_rope=32, n_ctx=1048576,
        q_lora_rank=128, o_groups=2, o_lora_rank=64,
        n_swa=16, compress_ratios=[0, 4, 128], compress_rope_base=160000.0,
        idx_heads=8, idx_head_dim=64, idx_top_k=4, idx_seed=2,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        n_expert=8, n_expert_used=2, n_expert_shared=1, n_ff_exp=32, n_hash_layers=1,
        weights_scale=1.5, weights_norm=True, bias_std=0.2, swiglu_limit=2.0,
        rope_base=10000.0, eps=1e-6, router_gain=2.0,
        yarn=dict(factor=16.0, orig_ctx=65536, beta_fast=32.0, beta_slow=1.0),
    ),
}



# ---------------------------------------------------------------------------------------------------------------

class Gen:
    """random tensors: N(0, gain^2/fan_in) matrices, norms 1 +- 0.1"""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def mat(self, *shape, fan_in=None, gain=1.0):
        fan_in = fan_in or shape[-1]
        return (self.rng.standard_normal(shape, dtype=np.float32) * (gain / math.sqrt(fan_in))).astype(np.float32)

    def vec(self, n, mean, std):
        return (mean + self.rng.standard_normal(n, dtype=np.float32) * std).astype(np.float32)


def common_header(w, name, hp, n_vocab):
    w.add_name(name)
    w.add_block_count(hp["n_layer"])
    w.add_context_length(hp["n_ctx"])
    w.add_embedding_length(hp["n_embd"])
    w.add_head_count(hp["n_head"])


def tokenizer(w, pre, tokens, types, merges):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(SPECIALS[0]))
    w.add_eos_token_id(tokens.index(SPECIALS[1]))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def yarn_keys(w, y):
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(y["factor"])
    w.add_rope_scaling_orig_ctx_len(y["orig_ctx"])
    w.add_rope_scaling_yarn_beta_fast(y["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(y["beta_slow"])


def moe_tensors(w, g, r, i, hp, E, bias=True, gate_name=True):
    """router (own stream r), optional selection bias, stacked experts, shared expert(s)"""
    NE, FE, NS = hp["n_expert"], hp["n_ff_exp"], hp["n_expert_shared"]
    w.add_tensor(tn(T.FFN_GATE_INP, i),
                 (r.standard_normal((NE, E), dtype=np.float32) * (hp["router_gain"] / math.sqrt(E))).astype(np.float32))
    if bias:
        w.add_tensor(tn(T.FFN_EXP_PROBS_B, i, ".bias"),
                     (r.standard_normal(NE, dtype=np.float32) * hp["bias_std"]).astype(np.float32))
    w.add_tensor(tn(T.FFN_GATE_EXP, i), g.mat(NE, FE, E, gain=1.3))
    w.add_tensor(tn(T.FFN_UP_EXP, i), g.mat(NE, FE, E, gain=1.3))
    w.add_tensor(tn(T.FFN_DOWN_EXP, i), g.mat(NE, E, FE, gain=0.8))
    w.add_tensor(tn(T.FFN_GATE_SHEXP, i), g.mat(FE * NS, E, gain=1.3))
    w.add_tensor(tn(T.FFN_UP_SHEXP, i), g.mat(FE * NS, E, gain=1.3))
    w.add_tensor(tn(T.FFN_DOWN_SHEXP, i), g.mat(E, FE * NS, gain=0.8))


def dense_ffn(w, g, i, E, FF):
    w.add_tensor(tn(T.FFN_GATE, i), g.mat(FF, E, gain=1.3))
    w.add_tensor(tn(T.FFN_UP, i), g.mat(FF, E, gain=1.3))
    w.add_tensor(tn(T.FFN_DOWN, i), g.mat(E, FF, gain=0.8))


# --- deepseek (V1 MoE) ------------------------------------------------------------------------------------------

def write_deepseek(w, hp, g, r, n_vocab):
    E, L, H, HKV, D = hp["n_embd"], hp["n_layer"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    assert H * D == E
    # conversion/base.py TextModel.set_gguf_parameters + conversion/deepseek.py DeepseekModel.set_gguf_parameters
    w.add_feed_forward_length(hp["n_ff"])
    w.add_head_count_kv(HKV)
    w.add_rope_freq_base(hp["rope_base"])
    w.add_layer_norm_rms_eps(hp["eps"])
    w.add_expert_count(hp["n_expert"])
    w.add_expert_used_count(hp["n_expert_used"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_rope_dimension_count(D)
    w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
    w.add_leading_dense_block_count(hp["n_dense_lead"])
    w.add_vocab_size(n_vocab)
    w.add_expert_feed_forward_length(hp["n_ff_exp"])
    w.add_expert_weights_scale(1.0)
    w.add_expert_shared_count(hp["n_expert_shared"])

    w.add_tensor(tn(T.TOKEN_EMBD), g.vec(n_vocab * E, 0.0, 0.5).reshape(n_vocab, E))
    for i in range(L):
        w.add_tensor(tn(T.ATTN_NORM, i), g.vec(E, 1.0, 0.1))
        # stored as llama.cpp wants them: the converter permutes HF q_proj/k_proj rows for NORM RoPE
        w.add_tensor(tn(T.ATTN_Q, i), g.mat(H * D, E))
        w.add_tensor(tn(T.ATTN_K, i), g.mat(HKV * D, E))
        w.add_tensor(tn(T.ATTN_V, i), g.mat(HKV * D, E))
        w.add_tensor(tn(T.ATTN_OUT, i), g.mat(E, H * D, gain=0.7))
        w.add_tensor(tn(T.FFN_NORM, i), g.vec(E, 1.0, 0.1))
        if i < hp["n_dense_lead"]:
            dense_ffn(w, g, i, E, hp["n_ff"])
        else:
            moe_tensors(w, g, r, i, hp, E, bias=False)
    w.add_tensor(tn(T.OUTPUT_NORM), g.vec(E, 1.0, 0.1))
    w.add_tensor(tn(T.OUTPUT), g.mat(n_vocab, E, gain=2.5))


# --- deepseek2 legacy (non-absorbed MLA) and deepseek32 (absorbed MLA + DSA indexer) ---------------------------

def mla_keys(w, hp, n_vocab, legacy):
    H = hp["n_head"]
    NOPE, ROPE, V, KVL = hp["qk_nope"], hp["qk_rope"], hp["v_head"], hp["kv_lora_rank"]
    w.add_feed_forward_length(hp["n_ff"])
    if legacy:
        # old converter: num_key_value_heads from the HF config (= n_head), per-head key/value sizes
        w.add_head_count_kv(H)
    else:
        w.add_head_count_kv(1)
    yarn_keys(w, hp["yarn"])
    w.add_rope_freq_base(hp["rope_base"])
    w.add_layer_norm_rms_eps(hp["eps"])
    w.add_expert_count(hp["n_expert"])
    w.add_expert_used_count(hp["n_expert_used"])
    w.add_expert_group_count(hp["n_group"])
    w.add_expert_group_used_count(hp["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_leading_dense_block_count(hp["n_dense_lead"])
    w.add_vocab_size(n_vocab)
    w.add_q_lora_rank(hp["q_lora_rank"])
    w.add_kv_lora_rank(KVL)
    if legacy:
        w.add_key_length(NOPE + ROPE)
        w.add_value_length(V)
    else:
        w.add_key_length(KVL + ROPE)
        w.add_value_length(KVL)
        w.add_key_length_mla(NOPE + ROPE)
        w.add_value_length_mla(V)
    w.add_expert_feed_forward_length(hp["n_ff_exp"])
    w.add_expert_shared_count(hp["n_expert_shared"])
    w.add_expert_weights_scale(hp["weights_scale"])
    if hp["weights_norm"]:
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(ROPE)
    # [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: the converter stores 0.1 * mscale_all_dim
    w.add_rope_scaling_yarn_log_mul(0.1 * hp["yarn"]["mscale_all_dim"])


def write_mla(w, hp, g, r, ig, n_vocab, legacy, dsa):
    E, L, H = hp["n_embd"], hp["n_layer"], hp["n_head"]
    QL, KVL = hp["q_lora_rank"], hp["kv_lora_rank"]
    NOPE, ROPE, V = hp["qk_nope"], hp["qk_rope"], hp["v_head"]
    mla_keys(w, hp, n_vocab, legacy)
    if dsa:
        w.add_indexer_head_count(hp["idx_heads"])
        w.add_indexer_key_length(hp["idx_head_dim"])
        w.add_indexer_top_k(hp["idx_top_k"])

    w.add_tensor(tn(T.TOKEN_EMBD), g.vec(n_vocab * E, 0.0, 0.5).reshape(n_vocab, E))
    for i in range(L):
        w.add_tensor(tn(T.ATTN_NORM, i), g.vec(E, 1.0, 0.1))
        w.add_tensor(tn(T.ATTN_Q_A, i), g.mat(QL, E))
        w.add_tensor(tn(T.ATTN_Q_A_NORM, i), g.vec(QL, 1.0, 0.1))
        w.add_tensor(tn(T.ATTN_Q_B, i), g.mat(H * (NOPE + ROPE), QL))
        w.add_tensor(tn(T.ATTN_KV_A_MQA, i), g.mat(KVL + ROPE, E))
        w.add_tensor(tn(T.ATTN_KV_A_NORM, i), g.vec(KVL, 1.0, 0.1))
        # HF kv_b_proj.weight: (H*(NOPE+V), KVL), rows per head [k_nope (NOPE) | v (V)]
        kv_b = g.mat(H, NOPE + V, KVL)
        if legacy:
            w.add_tensor(tn(T.ATTN_KV_B, i), kv_b.reshape(H * (NOPE + V), KVL))
        else:
            w.add_tensor(tn(T.ATTN_K_B, i), np.ascontiguousarray(kv_b[:, :NOPE, :].transpose(0, 2, 1)))
            w.add_tensor(tn(T.ATTN_V_B, i), np.ascontiguousarray(kv_b[:, NOPE:, :]))
        w.add_tensor(tn(T.ATTN_OUT, i), g.mat(E, H * V, gain=0.7))
        if dsa:
            IH, IHD = hp["idx_heads"], hp["idx_head_dim"]
            # indexer weights come from their own stream (idx_seed), chosen so that no top-k boundary is a near tie
            w.add_tensor(tn(T.INDEXER_K_NORM, i), ig.vec(IHD, 1.0, 0.1))
            w.add_tensor(tn(T.INDEXER_K_NORM, i, ".bias"), ig.vec(IHD, 0.0, 0.1))
            w.add_tensor(tn(T.INDEXER_PROJ, i), ig.mat(IH, E, gain=2.0))
            w.add_tensor(tn(T.INDEXER_ATTN_K, i), ig.mat(IHD, E))
            w.add_tensor(tn(T.INDEXER_ATTN_Q_B, i), ig.mat(IH * IHD, QL))
        w.add_tensor(tn(T.FFN_NORM, i), g.vec(E, 1.0, 0.1))
        if i < hp["n_dense_lead"]:
            dense_ffn(w, g, i, E, hp["n_ff"])
        else:
            moe_tensors(w, g, r, i, hp, E, bias=True)
    w.add_tensor(tn(T.OUTPUT_NORM), g.vec(E, 1.0, 0.1))
    w.add_tensor(tn(T.OUTPUT), g.mat(n_vocab, E, gain=2.5))


# --- deepseek4 ----------------------------------------------------------------------------------------------------

def write_deepseek4(w, hp, g, r, ig, n_vocab):
    E, L, H, D, R = hp["n_embd"], hp["n_layer"], hp["n_head"], hp["head_dim"], hp["qk_rope"]
    QL, G, OL = hp["q_lora_rank"], hp["o_groups"], hp["o_lora_rank"]
    HC = hp["hc_mult"]
    MIX = (2 + HC) * HC
    IH, IHD = hp["idx_heads"], hp["idx_head_dim"]
    NE, NU = hp["n_expert"], hp["n_expert_used"]
    ratios = hp["compress_ratios"]
    assert len(ratios) == L and H % G == 0 and HC == 4
    # conversion/base.py TextModel.set_gguf_parameters (num_key_value_heads = 1, head_dim -> key/value length)
    w.add_head_count_kv(1)
    yarn_keys(w, hp["yarn"])
    w.add_rope_freq_base(hp["rope_base"])
    w.add_layer_norm_rms_eps(hp["eps"])
    w.add_expert_count(NE)
    w.add_expert_used_count(NU)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SQRTSOFTPLUS)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # conversion/deepseek.py DeepseekV4Model.set_gguf_parameters
    w.add_rope_dimension_count(R)
    w.add_q_lora_rank(QL)
    w.add_sliding_window(hp["n_swa"])
    w.add_expert_feed_forward_length(hp["n_ff_exp"])
    w.add_expert_shared_count(hp["n_expert_shared"])
    w.add_expert_weights_scale(hp["weights_scale"])
    w.add_expert_weights_norm(hp["weights_norm"])
    w.add_swiglu_clamp_exp([hp["swiglu_limit"]] * L)
    w.add_swiglu_clamp_shexp([hp["swiglu_limit"]] * L)
    w.add_indexer_head_count(IH)
    w.add_indexer_key_length(IHD)
    w.add_indexer_top_k(hp["idx_top_k"])
    w.add_attention_output_group_count(G)
    w.add_attention_output_lora_rank(OL)
    w.add_attention_compress_ratios(ratios)
    w.add_attention_compress_rope_freq_base(hp["compress_rope_base"])
    w.add_hyper_connection_count(HC)
    w.add_hyper_connection_sinkhorn_iterations(hp["hc_sinkhorn_iters"])
    w.add_hyper_connection_epsilon(hp["hc_eps"])
    w.add_hash_layer_count(hp["n_hash_layers"])
    w.add_embedding_length_out(E * HC)

    def hc_block(kind, i):
        fn_t, base_t, scale_t = {
            "attn": (T.HC_ATTN_FN, T.HC_ATTN_BASE, T.HC_ATTN_SCALE),
            "ffn": (T.HC_FFN_FN, T.HC_FFN_BASE, T.HC_FFN_SCALE)}[kind]
        w.add_tensor(tn(fn_t, i), g.mat(MIX, HC * E, gain=1.0))
        # base: [pre (HC) | post (HC) | comb (HC*HC, dst fastest)]; comb biased towards the identity
        base = np.concatenate([g.vec(HC, 0.5, 0.5), g.vec(HC, 0.0, 0.5),
                               (2.0 * np.eye(HC, dtype=np.float32) + g.vec(HC * HC, 0.0, 0.5).reshape(HC, HC)).reshape(-1)])
        w.add_tensor(tn(base_t, i), base.astype(np.float32))
        w.add_tensor(tn(scale_t, i), g.vec(3, 0.5, 0.1))

    w.add_tensor(tn(T.TOKEN_EMBD), g.vec(n_vocab * E, 0.0, 0.5).reshape(n_vocab, E))
    for i in range(L):
        ratio = ratios[i]
        w.add_tensor(tn(T.ATTN_NORM, i), g.vec(E, 1.0, 0.1))
        w.add_tensor(tn(T.ATTN_SINKS, i), g.vec(H, 0.0, 1.0))
        w.add_tensor(tn(T.ATTN_Q_A, i), g.mat(QL, E))
        w.add_tensor(tn(T.ATTN_Q_A_NORM, i), g.vec(QL, 1.0, 0.1))
        w.add_tensor(tn(T.ATTN_Q_B, i), g.mat(H * D, QL))
        w.add_tensor(tn(T.ATTN_KV, i), g.mat(D, E))
        w.add_tensor(tn(T.ATTN_KV_NORM, i), g.vec(D, 1.0, 0.1))
        # file shape ne {H*D/G, OL*G}; group gg uses rows gg*OL .. gg*OL+OL-1
        w.add_tensor(tn(T.ATTN_OUT_A, i), g.mat(G * OL, H * D // G))
        w.add_tensor(tn(T.ATTN_OUT_B, i), g.mat(E, G * OL, gain=0.7))
        hc_block("attn", i)
        hc_block("ffn", i)
        if ratio:
            coff = 2 if ratio == 4 else 1
            w.add_tensor(tn(T.ATTN_COMPRESSOR_WKV, i), g.mat(coff * D, E))
            w.add_tensor(tn(T.ATTN_COMPRESSOR_WGATE, i), g.mat(coff * D, E, gain=2.0))
            w.add_tensor(tn(T.ATTN_COMPRESSOR_APE, i), g.mat(ratio, coff * D, fan_in=1, gain=0.5))
            w.add_tensor(tn(T.ATTN_COMPRESSOR_NORM, i), g.vec(D, 1.0, 0.1))
            if ratio == 4:
                # lightning indexer: own stream (idx_seed), see write_mla
                w.add_tensor(tn(T.INDEXER_PROJ, i), ig.mat(IH, E, gain=2.0))
                w.add_tensor(tn(T.INDEXER_ATTN_Q_B, i), ig.mat(IH * IHD, QL))
                w.add_tensor(tn(T.INDEXER_COMPRESSOR_WKV, i), ig.mat(2 * IHD, E))
                w.add_tensor(tn(T.INDEXER_COMPRESSOR_WGATE, i), ig.mat(2 * IHD, E, gain=2.0))
                w.add_tensor(tn(T.INDEXER_COMPRESSOR_APE, i), ig.mat(ratio, 2 * IHD, fan_in=1, gain=0.5))
                w.add_tensor(tn(T.INDEXER_COMPRESSOR_NORM, i), ig.vec(IHD, 1.0, 0.1))
        w.add_tensor(tn(T.FFN_NORM, i), g.vec(E, 1.0, 0.1))
        if i < hp["n_hash_layers"]:
            # hash routing: token id -> n_expert_used distinct expert ids (I32, ne {n_expert_used, n_vocab})
            tid2eid = np.stack([r.permutation(NE)[:NU] for _ in range(n_vocab)]).astype(np.int32)
            w.add_tensor(tn(T.FFN_GATE_TID2EID, i), tid2eid)
            moe_tensors(w, g, r, i, hp, E, bias=False)
        else:
            moe_tensors(w, g, r, i, hp, E, bias=True)
    w.add_tensor(tn(T.OUTPUT_NORM), g.vec(E, 1.0, 0.1))
    w.add_tensor(tn(T.OUTPUT), g.mat(n_vocab, E, gain=2.5))
    w.add_tensor(tn(T.HC_HEAD_FN), g.mat(HC, HC * E, gain=1.0))
    w.add_tensor(tn(T.HC_HEAD_BASE), g.vec(HC, 0.0, 0.5))
    w.add_tensor(tn(T.HC_HEAD_SCALE), g.vec(1, 0.5, 0.1))


# ---------------------------------------------------------------------------------------------------------------

def write(path, name, hp):
    tokens, types, merges = vocab()
    n_vocab = len(tokens)
    g = Gen(hp["seed"])
    r = np.random.default_rng(1000 + hp["router_seed"])
    ig = Gen(2000 + hp.get("idx_seed", 0))
    arch = hp["arch"]
    w = gguf.GGUFWriter(path, arch)
    common_header(w, name, hp, n_vocab)
    if arch == "deepseek":
        write_deepseek(w, hp, g, r, n_vocab)
    elif arch == "deepseek2":
        write_mla(w, hp, g, r, ig, n_vocab, legacy=True, dsa=False)
    elif arch == "deepseek32":
        write_mla(w, hp, g, r, ig, n_vocab, legacy=False, dsa=True)
    elif arch == "deepseek4":
        write_deepseek4(w, hp, g, r, ig, n_vocab)
    else:
        raise ValueError(arch)
    tokenizer(w, hp["pre"], tokens, types, merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_vocab


if __name__ == "__main__":
    args = sys.argv[1:]
    out = args[0] if args else "."
    only = args[1:]
    for name, hp in PUBLIC.items():
        if only and name not in only:
            continue
        write(f"{out}/{name}-f32.gguf", name, hp)
        print(name, os.path.getsize(f"{out}/{name}-f32.gguf"))
