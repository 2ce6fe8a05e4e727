/*
 * ld_ops_attn.h - the differentiable ops of a MultiHeadAttention layer
 * (Keras 3 semantics): batched matrix products, scaled dot-product
 * attention with an optional causal mask, and the head split/merge.
 *
 *     ld_tensor *qh = ld_split_heads(q, heads);           // [N, T, H*d] -> [N*H, T, d]
 *     ld_tensor *w = NULL;
 *     ld_tensor *o = ld_attention(qh, kh, vh, LD_CAUSAL, 0, &w);   // scale 0: 1/sqrt(d)
 *     ld_tensor *y = ld_merge_heads(o, heads);            // [N, T, H*d]
 *
 * Each op checks its arguments (ld_fail naming the op and the shapes), runs
 * the kernels of its operands' device, and records a tape node (ld_ops.h).
 * All take float32 tensors on one device; views are accepted.
 */
#ifndef LD_OPS_ATTN_H
#define LD_OPS_ATTN_H

#include "ld_device.h"

/* Batched product over the leading axes: a [..., M, K] (ta: [..., K, M]),
   b [..., K, N] (tb: [..., N, K]), the same leading axes (no broadcasting)
   -> [..., M, N]. Differentiable in both. A view whose matrices are
   row-major or transposed at a constant stride is used where it lies. */
ld_tensor *ld_bmm(ld_tensor *a, ld_tensor *b, int ta, int tb);

/* The causal flag of ld_attention:
   LD_CAUSAL      Keras' causal mask: query i sees keys j <= i (a lower
                  triangle from the top-left corner, also when T != S,
                  as keras.layers.MultiHeadAttention's _compute_causal_mask).
   LD_CAUSAL_END  the triangle aligned to the bottom-right corner: query i
                  sees keys j <= i + (S - T) (a query block at the end of a
                  longer key sequence, as a decoder with a cache). A query
                  row that sees no key gets uniform weights (Keras' -1e9
                  adder gives the same). */
#define LD_CAUSAL_NONE 0
#define LD_CAUSAL 1
#define LD_CAUSAL_END 2

/* softmax(q k^T * scale + mask) v for q [B, T, dk], k [B, S, dk],
   v [B, S, dv] -> [B, T, dv] (B folds batch and heads). scale 0 means
   1/sqrt(dk), Keras' default. Differentiable in q, k and v. One fused
   masked-softmax kernel between two batched products; backward keeps only
   the weights. weights_out (may be NULL) receives the attention weights
   [B, T, S] (a new reference, differentiable in q and k; it shares memory
   with what the backward pass reads: do not write into it). */
ld_tensor *ld_attention(ld_tensor *q, ld_tensor *k, ld_tensor *v, int causal, float scale,
                        ld_tensor **weights_out);
/* Whether ld_attention runs the fused kernel (flash_attention: an online
   softmax, no [B, T, S] matrix in memory) where it can: no weights_out,
   float32, query/key and value of one width, 16, 32 or 64.
   LD_FUSED_ON takes it on every device. LD_FUSED_AUTO (the default) keeps
   the unfused path for now: on CPUs its BLAS products are faster, and the
   CUDA kernel is to become the GPUs' default once it has run on one.
   LDIST_FUSED_ATTENTION=auto|on|off sets the mode a process starts with.
   Returns the mode before the call; mode -1 only reads it. */
enum { LD_FUSED_AUTO = 0, LD_FUSED_ON, LD_FUSED_OFF };
int ld_attention_fused(int mode);
/* The attention weights alone, softmax(q k^T * scale + mask) [B, T, S],
   differentiable in q and k: for a layer that applies dropout to them
   before ld_bmm(weights, v, 0, 0), as Keras' MultiHeadAttention does. */
ld_tensor *ld_attention_weights(ld_tensor *q, ld_tensor *k, int causal, float scale);

/* [N, T, H*d] -> [N*H, T, d] (head h of item n at n*H + h), and back.
   Differentiable; each is the other's backward. */
ld_tensor *ld_split_heads(ld_tensor *x, int heads);
ld_tensor *ld_merge_heads(ld_tensor *x, int heads);

#endif
