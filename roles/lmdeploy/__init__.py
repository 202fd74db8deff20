"""lmdeploy: LMDeploy's TurboMind engine for 4-bit AWQ/GPTQ models on Volta (issue 30), prepared ahead of the engine
registry: only pure modules so far.

versions.py: the release table and lock names; machine_code.py: the sm_70 check of a lock (vLLM's reader);
quant.py: config.json quantization_config -> TurboMind's --model-format, or a refusal; planner.py: TurboMind's KV
cache arithmetic; flags.py: the `lmdeploy serve api_server` words; launch.py: the key-file launcher run on the host.
"""
