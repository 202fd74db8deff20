"""bench: what a provisioned host really serves, measured through each instance's OpenAI-compatible endpoint.

Pure modules (no pyinfra, no network): roofline (GPU memory bandwidth by GPU name, bytes read per decoded token),
figures (TTFT, inter-token latency, tokens/s from timed requests; the degenerate-output check; the load's bounds),
report (terminal table, JSON, Markdown, the PNG plot), sweep (the alternative llama-server flags and the
always-restart around them), vram (the peak VRAM of an instance's processes, sampled through a given runner).
facts.py reads what a running instance shows of itself on its host (read-only).
The load generator and the command are v100kit/loadgen.py and v100kit/bench.py.
"""
