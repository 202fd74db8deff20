"""Tensor bytes per name and the header bytes (up to the data offset) of a GGUF. usage: dump.py IN.gguf OUT.json OUT.hdr"""
import json, sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
kv = {}
for f in r.fields.values():
    if f.name.startswith("tokenizer.ggml.") and f.name != "tokenizer.ggml.model":
        continue
    try:
        v = f.contents()
    except Exception:
        v = None
    kv[f.name] = v if not isinstance(v, (bytes, bytearray)) else v.decode("utf8", "replace")
import os
tensors = {t.name: dict(type=t.tensor_type.name, shape=[int(x) for x in t.shape], n_bytes=int(t.n_bytes)) for t in r.tensors}
json.dump(dict(file=sys.argv[1], file_size=os.path.getsize(sys.argv[1]), data_offset=int(r.data_offset), kv=kv,
               tensors=tensors), open(sys.argv[2], "w"), indent=0, default=str)
with open(sys.argv[1], "rb") as f, open(sys.argv[3], "wb") as o:
    o.write(f.read(int(r.data_offset)))
print("dumped", sys.argv[1], len(tensors), "tensors, data_offset", r.data_offset)
