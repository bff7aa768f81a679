"""Record transformers' tokenization of the SmolLM2 GGUF as an independent reference.

kern-run builds its tokenizer from GGUF metadata itself; this script records what
transformers' own GGUF tokenizer conversion produces for the texts in the test, so CI (which
has neither torch nor transformers) can compare against an implementation that is not ours.
Run it in an environment with transformers and gguf, NOT the uv workspace:

    python make_tokenizer_reference.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf

It rewrites tokenizer_reference.json beside this file.
"""

import json
import sys
from pathlib import Path

import transformers
from transformers import AutoTokenizer

TEXTS = [
    "The capital of France is",
    "Hello world 12345, héllo — 日本語!\n\n  x",
    "def f(x):\n    return x**2  # square\n\ttab",
    "I'm sure they'll've DONE it's",
    "   leading spaces and trailing   ",
    "emoji 🤖👍🏽 and accents: naïve café",
    "<|im_start|>user\nhi<|im_end|>\n",
    "3.14159 and 2024-11-30 and 1,000,000",
]


def main() -> None:
    gguf = Path(sys.argv[1])
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    out = {
        "source": f"transformers {transformers.__version__} AutoTokenizer(gguf_file={gguf.name})",
        "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in TEXTS],
        "chat": {"user": "What is the capital of France?", "prompt": chat,
                 "ids": tok.encode(chat, add_special_tokens=False)},
    }
    path = Path(__file__).with_name("tokenizer_reference.json")
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
