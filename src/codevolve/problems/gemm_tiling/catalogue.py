"""The projections: the weight matrices of seven LLM families, as one GPU holds them.

Each projection is ``y = x @ W.T`` with W of shape [N, K] (nn.Linear layout). Sizes come from
each model's public ``config.json`` (hidden size, attention heads, key-value heads, head dim,
intermediate size, MoE expert size; docs/gemm_tiling.md lists the figures). Projections are
fused as vLLM fuses them (q, k and v into one qkv; gate and up into one gate_up) and sharded as
vLLM shards them under tensor parallelism (``_tpT`` in the name): qkv and gate_up split N, o and
down split K. A mixture-of-experts layer contributes one expert's gate_up and down: each expert
is its own GEMM over the tokens routed to it.

Two models sometimes hold the same (N, K) pair (Mistral-7B's projections are Llama-3.1-8B's;
Gemma-2-9B's qkv is Llama-3.1-70B's down at tensor parallel 8). The catalogue keeps every pair
once, under the first model that has it: a pair is one GEMM whatever model it serves, and a pair
listed twice could sit on both sides of the split.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Projection:
    """One weight matrix W [N, K] of a model, as one GPU holds it."""

    name: str  # "<model>.<projection>", e.g. "8B.qkv", "Qwen2.5-72B_tp4.down"
    n: int  # output features
    k: int  # input features
    family: str = "llama"  # the model family: a split holds out whole families

    @property
    def model(self) -> str:
        return self.name.rsplit(".", 1)[0]


# Llama-3.1 (meta-llama/llama-models, models/llama3_1): head dim 128, 8 kv heads throughout.
# 8B: hidden 4096, 32 heads, intermediate 14336, one GPU.
# 70B: hidden 8192, 64 heads, intermediate 28672, tensor parallel 8.
# 405B: hidden 16384, 128 heads, intermediate 53248, tensor parallel 8.
# The first eight are the projections the GPU problems measured (gemm-tiling-gpu's data).
LLAMA = (
    Projection("8B.qkv", 6144, 4096),  # (32 + 2*8) heads * 128
    Projection("8B.o", 4096, 4096),
    Projection("8B.gate_up", 28672, 4096),  # 2 * 14336
    Projection("8B.down", 4096, 14336),
    Projection("70B_tp8.qkv", 1280, 8192),  # (64 + 2*8) * 128 / 8
    Projection("70B_tp8.o", 8192, 1024),  # K = 64 * 128 / 8
    Projection("70B_tp8.gate_up", 7168, 8192),  # 2 * 28672 / 8
    Projection("70B_tp8.down", 8192, 3584),  # K = 28672 / 8
    Projection("405B_tp8.qkv", 2304, 16384),  # (128 + 2*8) * 128 / 8
    Projection("405B_tp8.o", 16384, 2048),  # K = 128 * 128 / 8
    Projection("405B_tp8.gate_up", 13312, 16384),  # 2 * 53248 / 8
    Projection("405B_tp8.down", 16384, 6656),  # K = 53248 / 8
)
MEASURED = LLAMA[:8]  # the projections of the stored H200 tables

# Qwen2.5 (Qwen/Qwen2.5-*/config.json): head dim 128.
# 7B: hidden 3584, 28 heads, 4 kv heads, intermediate 18944, one GPU.
# 72B: hidden 8192, 64 heads, 8 kv heads, intermediate 29568, tensor parallel 4.
# Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B/config.json): hidden 2048, 32 heads, 4 kv heads, head dim
# 128, 128 experts of intermediate 768, one GPU.
QWEN = (
    Projection("Qwen2.5-7B.qkv", 4608, 3584, "qwen"),  # (28 + 2*4) * 128
    Projection("Qwen2.5-7B.o", 3584, 3584, "qwen"),
    Projection("Qwen2.5-7B.gate_up", 37888, 3584, "qwen"),  # 2 * 18944
    Projection("Qwen2.5-7B.down", 3584, 18944, "qwen"),
    Projection("Qwen2.5-72B_tp4.qkv", 2560, 8192, "qwen"),  # (64 + 2*8) * 128 / 4
    Projection("Qwen2.5-72B_tp4.o", 8192, 2048, "qwen"),  # K = 64 * 128 / 4
    Projection("Qwen2.5-72B_tp4.gate_up", 14784, 8192, "qwen"),  # 2 * 29568 / 4
    Projection("Qwen2.5-72B_tp4.down", 8192, 7392, "qwen"),  # K = 29568 / 4
    Projection("Qwen3-30B-A3B.qkv", 5120, 2048, "qwen"),  # (32 + 2*4) * 128
    Projection("Qwen3-30B-A3B.o", 2048, 4096, "qwen"),  # K = 32 * 128
    Projection("Qwen3-30B-A3B.expert_gate_up", 1536, 2048, "qwen"),  # 2 * 768
    Projection("Qwen3-30B-A3B.expert_down", 2048, 768, "qwen"),
)

# Mistral-Nemo-12B (mistralai/Mistral-Nemo-Base-2407/config.json): hidden 5120, 32 heads, 8 kv
# heads, head dim 128, intermediate 14336, one GPU. (Mistral-7B is Llama-3.1-8B's pairs.)
MISTRAL = (
    Projection("Mistral-Nemo-12B.qkv", 6144, 5120, "mistral"),  # (32 + 2*8) * 128
    Projection("Mistral-Nemo-12B.o", 5120, 4096, "mistral"),  # K = 32 * 128
    Projection("Mistral-Nemo-12B.gate_up", 28672, 5120, "mistral"),  # 2 * 14336
    Projection("Mistral-Nemo-12B.down", 5120, 14336, "mistral"),
)

# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite/config.json): hidden 2048, 16 heads, multi-head
# latent attention without a q LoRA (qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
# kv_lora_rank 512), 64 routed experts of intermediate 1408, one GPU.
DEEPSEEK = (
    Projection("DeepSeek-V2-Lite.q", 3072, 2048, "deepseek"),  # 16 * (128 + 64)
    Projection("DeepSeek-V2-Lite.kv_a", 576, 2048, "deepseek"),  # 512 + 64
    Projection("DeepSeek-V2-Lite.kv_b", 4096, 512, "deepseek"),  # 16 * (128 + 128), K = 512
    Projection("DeepSeek-V2-Lite.o", 2048, 2048, "deepseek"),  # K = 16 * 128
    Projection("DeepSeek-V2-Lite.expert_gate_up", 2816, 2048, "deepseek"),  # 2 * 1408
    Projection("DeepSeek-V2-Lite.expert_down", 2048, 1408, "deepseek"),
)

# Gemma-2 (google/gemma-2-*/config.json).
# 9B: hidden 3584, 16 heads, 8 kv heads, head dim 256, intermediate 14336, one GPU.
# 27B: hidden 4608, 32 heads, 16 kv heads, head dim 128, intermediate 36864, tensor parallel 2.
GEMMA = (
    # qkv: (16 + 2*8) * 256 = 8192 by 3584, 70B_tp8.down's pair
    Projection("Gemma-2-9B.o", 3584, 4096, "gemma"),  # K = 16 * 256
    Projection("Gemma-2-9B.gate_up", 28672, 3584, "gemma"),  # 2 * 14336
    Projection("Gemma-2-9B.down", 3584, 14336, "gemma"),
    Projection("Gemma-2-27B_tp2.qkv", 4096, 4608, "gemma"),  # (32 + 2*16) * 128 / 2
    Projection("Gemma-2-27B_tp2.o", 4608, 2048, "gemma"),  # K = 32 * 128 / 2
    Projection("Gemma-2-27B_tp2.gate_up", 36864, 4608, "gemma"),  # 2 * 36864 / 2
    Projection("Gemma-2-27B_tp2.down", 4608, 18432, "gemma"),  # K = 36864 / 2
)

# Phi-3-medium (microsoft/Phi-3-medium-4k-instruct/config.json): hidden 5120, 40 heads, 10 kv
# heads, head dim 128, intermediate 17920, one GPU; its checkpoint fuses qkv and gate_up itself.
PHI = (
    Projection("Phi-3-medium.qkv", 7680, 5120, "phi"),  # (40 + 2*10) * 128
    Projection("Phi-3-medium.o", 5120, 5120, "phi"),
    Projection("Phi-3-medium.gate_up", 35840, 5120, "phi"),  # 2 * 17920
    Projection("Phi-3-medium.down", 5120, 17920, "phi"),
)

# Mixtral (mistralai/Mixtral-*/config.json): head dim 128, 8 kv heads, 8 experts.
# 8x7B: hidden 4096, 32 heads, expert intermediate 14336, tensor parallel 2.
# 8x22B: hidden 6144, 48 heads, expert intermediate 16384, tensor parallel 8.
# vLLM shards each expert like a dense FFN: gate_up splits N, down splits K.
MIXTRAL = (
    Projection("Mixtral-8x7B_tp2.qkv", 3072, 4096, "mixtral"),  # (32 + 2*8) * 128 / 2
    Projection("Mixtral-8x7B_tp2.o", 4096, 2048, "mixtral"),  # K = 32 * 128 / 2
    Projection("Mixtral-8x7B_tp2.expert_gate_up", 14336, 4096, "mixtral"),  # 2 * 14336 / 2
    Projection("Mixtral-8x7B_tp2.expert_down", 4096, 7168, "mixtral"),  # K = 14336 / 2
    Projection("Mixtral-8x22B_tp8.qkv", 1024, 6144, "mixtral"),  # (48 + 2*8) * 128 / 8
    Projection("Mixtral-8x22B_tp8.o", 6144, 768, "mixtral"),  # K = 48 * 128 / 8
    Projection("Mixtral-8x22B_tp8.expert_gate_up", 4096, 6144, "mixtral"),  # 2 * 16384 / 8
    Projection("Mixtral-8x22B_tp8.expert_down", 6144, 2048, "mixtral"),  # K = 16384 / 8
)

CATALOGUE = (*LLAMA, *QWEN, *MISTRAL, *DEEPSEEK, *GEMMA, *PHI, *MIXTRAL)
FAMILIES = tuple(dict.fromkeys(p.family for p in CATALOGUE))
