"""A small but real diffusers-shaped video model for the hub double to serve.

`write_model(root, repo_id, big_mb)` lays out `<root>/<org>/<name>/<commit>/...` and
`refs/main`: a pipeline index, a transformer in 3 safetensors shards with its index (one shard
of at least `big_mb` MiB, so a test can catch a download halfway), a VAE, a text encoder, a
tokenizer (its tokenizer.json over 1 MiB: LFS by size) and a scheduler; about big_mb MiB + 18 MB
in 16 files. Tensor bytes come from SHAKE-128 seeded by the tensor's name, so the same
arguments give the same bytes, blob ids and commit on every machine, and a second call finds
the model already there and writes nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
from pathlib import Path

import safetensors

from .server import Repos

MIB = 1024 * 1024
LAYOUT = 1  # bump when the files written change, so an old copy is not taken for this one


def _tensor(name: str, shape: list[int], keep: list) -> safetensors.TensorSpec:
    """A BF16 tensor of deterministic pseudo-random bytes; `keep` holds the buffer alive."""
    n = 2
    for s in shape:
        n *= s
    buf = bytearray(hashlib.shake_128(name.encode()).digest(n))
    cbuf = (ctypes.c_char * n).from_buffer(buf)
    keep.append((buf, cbuf))
    return safetensors.TensorSpec(dtype="bfloat16", shape=shape, data_ptr=ctypes.addressof(cbuf), data_len=n)


def _write_safetensors(path: Path, tensors: dict[str, list[int]]) -> int:
    """Write real safetensors with these names and shapes; returns the tensor bytes."""
    keep: list = []
    specs = {name: _tensor(f"{path.name}/{name}", shape, keep) for name, shape in tensors.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    safetensors.serialize_file(specs, str(path), metadata={"format": "pt"})
    return sum(s.data_len for s in specs.values())


def _json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _transformer_shards(big_mb: int, dim: int) -> list[dict[str, list[int]]]:
    """Three shards of blocks: the first holds >= big_mb MiB, the others ~8 MiB and ~2 MiB."""
    block_bytes = 4 * dim * dim * 2 + 2 * dim * 2  # q, k, v, out weights + norm weight and bias

    def blocks(first: int, mib: float) -> tuple[dict[str, list[int]], int]:
        count = max(1, -(-int(mib * MIB) // block_bytes))
        out: dict[str, list[int]] = {}
        for b in range(first, first + count):
            for w in ("to_q", "to_k", "to_v", "to_out.0"):
                out[f"blocks.{b}.attn1.{w}.weight"] = [dim, dim]
            out[f"blocks.{b}.norm1.weight"] = [dim]
            out[f"blocks.{b}.norm1.bias"] = [dim]
        return out, first + count

    s1, nxt = blocks(0, big_mb)
    s1["patch_embedding.weight"] = [dim, 16, 1, 2, 2]
    s2, nxt = blocks(nxt, 8)
    s3, nxt = blocks(nxt, 1.5)
    s3["proj_out.weight"] = [64, dim]
    return [s1, s2, s3]


def _vocab(n: int) -> dict[str, int]:
    return {f"▁tok{i:05d}": i for i in range(n)}


def _write(base: Path, big_mb: int) -> None:
    dim = 512
    shards = _transformer_shards(big_mb, dim)
    layers = sum(1 for s in shards for k in s if k.endswith("norm1.bias"))
    _json(base / "model_index.json", {
        "_class_name": "WanPipeline", "_diffusers_version": "0.33.1",
        "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]})
    (base / "README.md").write_text(
        "---\nlibrary_name: diffusers\nlicense: apache-2.0\npipeline_tag: text-to-video\n---\n\n"
        "# tiny-video-dit\n\nA tiny text-to-video DiT written by `tests/doubles/hub/model.py` for the\n"
        "hub double: real safetensors files with random weights. It generates nothing useful.\n")
    (base / ".gitattributes").write_text(
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
        "tokenizer/tokenizer.json filter=lfs diff=lfs merge=lfs -text\n")
    _json(base / "transformer/config.json", {
        "_class_name": "WanTransformer3DModel", "_diffusers_version": "0.33.1", "num_layers": layers,
        "num_attention_heads": dim // 64, "attention_head_dim": 64, "in_channels": 16, "out_channels": 16,
        "patch_size": [1, 2, 2], "text_dim": 256})
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards, 1):
        name = f"diffusion_pytorch_model-{i:05d}-of-{len(shards):05d}.safetensors"
        total += _write_safetensors(base / "transformer" / name, tensors)
        weight_map.update({t: name for t in tensors})
    _json(base / "transformer/diffusion_pytorch_model.safetensors.index.json",
          {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    _json(base / "vae/config.json", {"_class_name": "AutoencoderKLWan", "_diffusers_version": "0.33.1",
                                     "base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4]})
    _write_safetensors(base / "vae/diffusion_pytorch_model.safetensors", {
        f"encoder.down_blocks.{i}.conv.weight": [96, 96, 3, 3, 3] for i in range(6)})
    _json(base / "text_encoder/config.json", {"architectures": ["UMT5EncoderModel"], "d_model": 256,
                                              "num_layers": 2, "vocab_size": 32128, "torch_dtype": "bfloat16"})
    _write_safetensors(base / "text_encoder/model.safetensors", {
        "shared.weight": [4096, 256], "encoder.block.0.layer.0.SelfAttention.q.weight": [256, 256]})
    _json(base / "tokenizer/tokenizer_config.json", {"model_max_length": 512, "tokenizer_class": "T5Tokenizer",
                                                     "pad_token": "<pad>", "eos_token": "</s>"})
    _json(base / "tokenizer/special_tokens_map.json", {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"})
    _json(base / "tokenizer/tokenizer.json", {"version": "1.0", "model": {"type": "WordLevel", "vocab": _vocab(60000),
                                                                           "unk_token": "<unk>"}})
    _json(base / "scheduler/scheduler_config.json", {"_class_name": "UniPCMultistepScheduler",
                                                     "num_train_timesteps": 1000, "prediction_type": "flow_prediction"})


def commit_id(base: Path) -> tuple[str, list[str]]:
    """The commit a written tree gets: sha1 of its sorted `path blob_id` lines (blob ids as
    the double reports them, the LFS pointer's for LFS files)."""
    files = Repos(base.parent).files(base.parent, base.name)
    lines = "".join(f"{rel} {m.blob_id}\n" for rel, m in sorted(files.items()))
    return hashlib.sha1(lines.encode()).hexdigest(), sorted(files)


def write_model(root, repo_id: str = "lab/tiny-video-dit", big_mb: int = 110) -> tuple[str, list[str]]:
    """Write the model under `root` (once: the same arguments find it there) and point
    refs/main at it; returns (commit, the files' repo paths)."""
    repo = Path(root) / repo_id
    marker = repo / f".written-layout{LAYOUT}-big{big_mb}.json"
    if marker.is_file():
        done = json.loads(marker.read_text())
        base = repo / done["commit"]
        if all((base / rel).is_file() and (base / rel).stat().st_size == size for rel, size in done["files"].items()):
            _set_ref(repo, "main", done["commit"])
            return done["commit"], sorted(done["files"])
    tmp = repo / f".writing-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write(tmp, big_mb)
        commit, relpaths = commit_id(tmp)
        final = repo / commit
        if final.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _set_ref(repo, "main", commit)
    marker.write_text(json.dumps({"commit": commit, "files": {r: (final / r).stat().st_size for r in relpaths}}))
    return commit, relpaths


def _set_ref(repo: Path, branch: str, commit: str) -> None:
    ref = repo / "refs" / branch
    ref.parent.mkdir(parents=True, exist_ok=True)
    if ref.is_file() and ref.read_text().strip() == commit:
        return
    tmp = ref.with_name(f".{branch}.{os.getpid()}")
    tmp.write_text(commit + "\n")
    os.replace(tmp, ref)
