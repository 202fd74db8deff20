# Excerpt of vllm/v1/attention/backends/registry.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 34:
class AttentionBackendEnum(Enum, metaclass=_AttentionBackendEnumMeta):
    # lines 44-44:
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    # lines 48-48:
    TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
    # lines 62-62:
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
    # lines 78-78:
    FLEX_ATTENTION = "vllm.v1.attention.backends.flex_attention.FlexAttentionBackend"
