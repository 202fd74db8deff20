// Prints LMDeploy TurboMind's own per-layer KV block size (block::Layout::layer_size, v0.15.0
// src/turbomind/kernels/attention/block.h) for the configurations given on stdin: head_dim kv_heads block_len t_bits q_bits
#include "src/turbomind/kernels/attention/block.h"
#include <cstdio>
using namespace turbomind;
struct Cfg {  // the same fields as BlockConfig in unified_attention_layer.cc:63
    int head_dim_, head_num_, block_len_, t_bits_, q_bits_; bool share_kv_;
    int t_bits() const { return t_bits_; } int q_bits() const { return q_bits_; }
    int head_dim() const { return head_dim_; } int head_num() const { return head_num_; }
    int block_len() const { return block_len_; } bool is_share_kv() const { return share_kv_; }
};
int main() {
    int d, h, b, t, q;
    while (std::scanf("%d %d %d %d %d", &d, &h, &b, &t, &q) == 5) {
        block::Layout layout{Cfg{d, h, b, t, q, d == 576}};
        std::printf("%d %d %d %d %d %d\n", d, h, b, t, q, layout.layer_size());
    }
}
