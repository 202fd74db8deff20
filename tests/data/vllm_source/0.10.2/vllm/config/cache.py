# Excerpt of vllm/config/cache.py from vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 e0cba6110483d9bf25c4402d8655cf78d366dd13e4155210980cc3480ed98b7b).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# lines 25-25:
CacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
